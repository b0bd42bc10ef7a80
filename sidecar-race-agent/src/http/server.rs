//! Connections of the agent's HTTP server, within limits a slow or hostile client
//! cannot stretch: a connection cap, a header-read timeout (slowloris), a maximum
//! connection age (idle keep-alive clients), a request timeout and no request bodies.
//! Shutdown waits for connections at most as long as a request may take.

use std::{sync::Arc, time::Duration};

use super::write_deadline::WriteDeadline;
use axum::{
    Router,
    extract::Request,
    http::{StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use hyper::server::conn::http1;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::{
    net::TcpListener,
    sync::{Semaphore, watch},
};

/// The server's limits (SECURITY.md, "HTTP server").
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A client must send a request's headers within this, or is disconnected.
    pub header_read_timeout: Duration,
    /// A request must be answered within this (503 otherwise).
    pub request_timeout: Duration,
    /// A client that reads nothing of an answer for this long is disconnected.
    pub write_timeout: Duration,
    /// Connections served at once; further ones are closed at once.
    pub max_connections: usize,
    /// A connection is closed (after its request in flight) at this age, so idle
    /// keep-alive clients cannot hold a slot forever.
    pub max_connection_age: Duration,
    /// Request headers larger than this close the connection.
    pub max_header_bytes: usize,
    /// Request bodies (no endpoint takes one) larger than this are refused (413).
    pub max_body_bytes: u64,
    /// `/api/v1/incidents` answers built and in flight at once; further requests wait.
    pub api_concurrency: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
            max_connections: 128,
            max_connection_age: Duration::from_secs(300),
            max_header_bytes: 16 * 1024,
            max_body_bytes: 16 * 1024,
            api_concurrency: 2,
        }
    }
}

/// Adds the request timeout and the body limit to `app`.
pub fn limited(app: Router, limits: Limits) -> Router {
    app.layer(middleware::from_fn(move |req: Request, next: Next| {
        within_limits(limits, req, next)
    }))
}

async fn within_limits(limits: Limits, req: Request, next: Next) -> Response {
    let length = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let chunked = req.headers().contains_key(header::TRANSFER_ENCODING);
    if chunked || length.is_some_and(|n| n > limits.max_body_bytes) {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request bodies are limited to {} bytes\n",
                limits.max_body_bytes
            ),
        )
            .into_response();
    }
    match tokio::time::timeout(limits.request_timeout, next.run(req)).await {
        Ok(res) => res,
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "request timed out in the agent\n",
        )
            .into_response(),
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then closes every
/// connection gracefully within `limits.request_timeout`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let app = limited(app, limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    let mut refused_warned = false;
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!("cannot accept an HTTP connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if !refused_warned {
                tracing::warn!(
                    max = limits.max_connections,
                    "HTTP connection limit reached: closing new connections until some end"
                );
                refused_warned = true;
            }
            continue; // dropping the stream closes it
        };
        let service = TowerToHyperService::new(app.clone());
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .max_buf_size(limits.max_header_bytes.max(8192))
                .serve_connection(
                    TokioIo::new(WriteDeadline::new(stream, limits.write_timeout)),
                    service,
                );
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = tokio::time::sleep(limits.max_connection_age) => {}
                _ = stop.wait_for(|stop| *stop) => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.request_timeout, conn).await;
        });
    }
    drop(listener);
    stop_tx.send_replace(true);
    // Every connection task holds a slot: all slots back means all connections ended.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let drained = tokio::time::timeout(
        limits.request_timeout + Duration::from_secs(1),
        slots.acquire_many(all),
    )
    .await;
    if drained.is_err() {
        tracing::warn!("HTTP connections still open at shutdown are dropped");
    }
    Ok(())
}
