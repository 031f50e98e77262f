//! Exit codes and the frame of both `main`s: parse the command line, start
//! the logs, run, report a fatal error as one line.
//!
//! Exit codes: 0 success (and `--help`, `--version`), 1 runtime failure, 2
//! invalid command line or configuration ([`ConfigError`]).

use std::{ffi::OsString, future::Future, process::ExitCode};

use super::log::LogArgs;

/// Exit code for an invalid command line or configuration.
pub const EXIT_USAGE: u8 = 2;
/// Exit code for a runtime failure.
pub const EXIT_FAILURE: u8 = 1;

/// An invalid combination of flags or an unusable file named by a flag: the
/// process exits with [`EXIT_USAGE`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl ConfigError {
    /// A configuration error with this message.
    pub fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

/// Parses `args` (the first is the program name) as `C`, starts the logs with
/// the flags `log` picks out, runs `run` and turns its result into the exit
/// code, reporting a fatal error as one line.
pub fn main<C, I, T>(
    binary: &str,
    args: I,
    log: impl FnOnce(&C) -> LogArgs,
    run: impl FnOnce(C) -> anyhow::Result<()>,
) -> ExitCode
where
    C: clap::Parser,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    main_parsed(binary, C::try_parse_from(args), log, run)
}

/// [`main`] over a command line parsed already.
pub fn main_parsed<C>(
    binary: &str,
    parsed: Result<C, clap::Error>,
    log: impl FnOnce(&C) -> LogArgs,
    run: impl FnOnce(C) -> anyhow::Result<()>,
) -> ExitCode {
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are "errors" printed to stdout with success.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let log = log(&cli);
    log.init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log.report_fatal(binary, &e);
            if e.downcast_ref::<ConfigError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::from(EXIT_FAILURE)
            }
        }
    }
}

/// Runs `future` to completion on a multi-threaded async runtime.
pub fn block_on<F: Future<Output = anyhow::Result<()>>>(future: F) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::Error::new(e).context("starting the async runtime"))?
        .block_on(future)
}

/// Runs `future` to completion on a single-threaded async runtime (one-shot
/// commands).
pub fn block_on_current<F: Future<Output = anyhow::Result<T>>, T>(future: F) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::Error::new(e).context("starting the async runtime"))?
        .block_on(future)
}
