//! Log flags and initialisation: `--log-format text|json` (`HOLDFAST_LOG_FORMAT`),
//! the level from `RUST_LOG`, always on stderr.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

/// The log filter without `RUST_LOG`: `info`, less the client library's own line
/// for every failed request (holdfast reports the failure itself, with context).
pub const DEFAULT_LOG_FILTER: &str = "info,kube_client::client::builder=off";

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured only when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Logging flags (the level comes from `RUST_LOG`, default `info`).
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "HOLDFAST_LOG_FORMAT", global = true)]
    pub log_format: LogFormat,
}

impl LogArgs {
    /// Initialises `tracing` on stderr (`RUST_LOG`, default [`DEFAULT_LOG_FILTER`]):
    /// colours only when stderr is a terminal, or one JSON object per line. A
    /// second initialisation (tests) is harmless and ignored.
    pub fn init(&self) {
        let filter = EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        let _ = match self.log_format {
            LogFormat::Json => builder.json().try_init(),
            LogFormat::Text => builder
                .with_ansi(std::io::stderr().is_terminal())
                .try_init(),
        };
    }

    /// Reports a fatal error of `binary`: one line with all its causes (a JSON
    /// log line under `--log-format json`), then the backtrace only when one was
    /// asked for (`RUST_BACKTRACE` or `RUST_LIB_BACKTRACE`).
    pub fn report_fatal(&self, binary: &str, err: &anyhow::Error) {
        let line = crate::report::one_line(err.chain().map(ToString::to_string));
        match self.log_format {
            LogFormat::Json => tracing::error!(error = %line, "fatal"),
            LogFormat::Text => eprintln!("{binary}: error: {line}"),
        }
        if err.backtrace().status() == std::backtrace::BacktraceStatus::Captured {
            eprintln!("{}", err.backtrace());
        }
    }
}
