//! `holdfast-controller` binary: see the library crate for the commands.

/// jemalloc: gives freed memory back to the system (docs/performance.md,
/// "Controller memory at fleet size").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    holdfast_controller::cli::main()
}
