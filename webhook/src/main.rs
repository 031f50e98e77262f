//! `holdfast-webhook`: the HTTPS admission server.
//!
//! Exit codes: 0 after a graceful stop, 1 on a fatal error (one line on stderr),
//! 2 for an invalid command line.

/// jemalloc: gives freed memory back to the system (docs/performance.md, "The
/// webhook at fleet size").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    holdfast_shared::runtime::exit::main(
        "holdfast-webhook",
        std::env::args_os(),
        |args: &holdfast_webhook::Args| args.log,
        |args| holdfast_shared::runtime::exit::block_on(holdfast_webhook::run(args)),
    )
}
