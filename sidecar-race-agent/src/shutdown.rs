//! SIGINT / SIGTERM as a future.

use tokio::signal::unix::{SignalKind, signal as unix_signal};

pub async fn signal() {
    let mut term = unix_signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = unix_signal(SignalKind::interrupt()).expect("install SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
