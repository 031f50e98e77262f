//! Log flags and initialisation: `--log-format text|json` (`HOLDFAST_LOG_FORMAT`),
//! the level from `RUST_LOG`, always on stderr.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

/// The log filter without `RUST_LOG`: `info`, less the client library's own line
/// for every failed request (holdfast reports the failure itself, with context).
pub const DEFAULT_LOG_FILTER: &str = "info,kube_client::client::builder=off";

/// The text format's fields with every control character escaped: values come from
/// requests and objects (names, users, annotations), and a raw newline would forge a
/// log line, an escape sequence would drive the terminal of whoever reads the log.
fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use tracing_subscriber::field::MakeExt as _;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let raw = format!("{value:?}");
        let text = escape_controls(&raw);
        if field.name() == "message" {
            write!(w, "{text}")
        } else {
            write!(w, "{field}={text}")
        }
    })
    .delimited(" ")
}

/// `s` with every control character written as its Rust escape (`\n`, `\u{1b}`).
pub fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(
        s.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

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
                .fmt_fields(escaped_fields())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_controls("plain ünïcode"), "plain ünïcode");
        assert_eq!(
            escape_controls("a\nINFO forged\r\u{1b}[31m"),
            "a\\nINFO forged\\r\\u{1b}[31m"
        );
    }
}
