//! `holdfast-webhook`: the HTTPS admission server.
//!
//! Exit codes: 0 after a graceful stop, 1 on a fatal error (one line on stderr),
//! 2 for an invalid command line.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = holdfast_webhook::Args::parse();
    let format = args.log_format;
    holdfast_webhook::init_tracing(&format);
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::Error::new(e).context("starting the async runtime"))
        .and_then(|runtime| runtime.block_on(holdfast_webhook::run(args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            holdfast_webhook::report_fatal(&format, &e);
            ExitCode::FAILURE
        }
    }
}
