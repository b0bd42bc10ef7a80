//! The agent's HTTP endpoints: `/healthz` (the reader is alive) and `/readyz`
//! (programs attached and the cgroup index built).

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    time::Duration,
};

use axum::{Router, extract::State, http::StatusCode, routing::get};

use crate::stream::StreamStats;

/// The reader wakes every second; three missed wake-ups means it is stuck.
const READER_STALE_AFTER: Duration = Duration::from_secs(3);

#[derive(Clone)]
pub struct HttpState {
    pub ready: Arc<AtomicBool>,
    pub stream: Arc<StreamStats>,
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn healthz(State(s): State<HttpState>) -> (StatusCode, &'static str) {
    if s.stream.is_alive(READER_STALE_AFTER) {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "kernel event reader is not running\n",
        )
    }
}

async fn readyz(State(s): State<HttpState>) -> (StatusCode, &'static str) {
    if s.ready.load(Relaxed) && s.stream.is_alive(READER_STALE_AFTER) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// Binds `addr` and serves until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    state: HttpState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /healthz and /readyz");
    Ok(tokio::spawn(async move {
        axum::serve(listener, router(state))
            .with_graceful_shutdown(shutdown)
            .await
    }))
}
