//! Logs on stderr (stdout belongs to `trace`), text or JSON.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt};

use crate::cli::LogFormat;

pub fn init(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
