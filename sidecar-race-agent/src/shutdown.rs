//! SIGINT / SIGTERM as a future.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal as unix_signal};

/// Installs the SIGINT and SIGTERM handlers now (not when first polled: a signal that
/// comes while the agent starts must not kill it) and resolves on the first of them.
pub fn signal() -> impl Future<Output = ()> {
    let mut term = unix_signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = unix_signal(SignalKind::interrupt()).expect("install SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}
