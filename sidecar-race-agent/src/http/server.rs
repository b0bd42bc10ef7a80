//! Connections of the agent's HTTP server, within limits a slow or hostile client
//! cannot stretch: a connection cap, a header-read timeout (slowloris), a maximum
//! connection age (idle keep-alive clients), an absolute deadline for each answer
//! (head and body: a client reading slowly is cut off) and no request bodies.
//! Shutdown waits for connections at most as long as a request may take.

use std::{
    os::fd::{AsRawFd, RawFd},
    sync::Arc,
    time::Duration,
};

use super::{
    answer_deadline::{AnswerDeadline, ArmedBody, deadline_passed},
    write_deadline::WriteDeadline,
};
use axum::{
    Router,
    body::Body,
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
    time::Instant,
};

/// The server's limits (SECURITY.md, "HTTP server").
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A client must send a request's headers within this, or is disconnected.
    pub header_read_timeout: Duration,
    /// A request must be answered within this, its body sent included: 503 when the
    /// answer is not ready by then, the connection is cut when its body is not sent.
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
    /// `/metrics` answers in flight at once; further scrapes wait.
    pub metrics_concurrency: usize,
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
            metrics_concurrency: 4,
        }
    }
}

/// Adds the request timeout and the body limit to `app`, for one connection whose
/// answers are cut off at their deadline through `deadline`.
pub fn limited(app: Router, limits: Limits, deadline: AnswerDeadline) -> Router {
    app.layer(middleware::from_fn(move |req: Request, next: Next| {
        within_limits(limits, deadline.clone(), req, next)
    }))
}

async fn within_limits(
    limits: Limits,
    deadline: AnswerDeadline,
    req: Request,
    next: Next,
) -> Response {
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
    // Armed until the answer's body is sent (or dropped with its connection).
    let armed = deadline.arm(Instant::now() + limits.request_timeout);
    match tokio::time::timeout(limits.request_timeout, next.run(req)).await {
        Ok(res) => res.map(|body| Body::new(ArmedBody::new(body, armed))),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "request timed out in the agent\n",
        )
            .into_response(),
    }
}

/// Makes closing the socket `fd` (still owned by its connection) send a reset and drop
/// unsent data, instead of sending it at the reader's pace.
fn reset_on_close(fd: RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `fd` is the open socket of a connection that is dropped right after;
    // setsockopt reads `linger` for the length given.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        );
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
        let fd = stream.as_raw_fd();
        let (deadline, mut cut_at) = AnswerDeadline::new();
        let service = TowerToHyperService::new(limited(app.clone(), limits, deadline));
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
            // An answer past its deadline is cut off: reset, so that what the kernel
            // still buffers for a slow reader is discarded too.
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = deadline_passed(&mut cut_at) => return reset_on_close(fd),
                _ = tokio::time::sleep(limits.max_connection_age) => {}
                _ = stop.wait_for(|stop| *stop) => {}
            }
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                _ = tokio::time::timeout(limits.request_timeout, conn.as_mut()) => {}
                _ = deadline_passed(&mut cut_at) => reset_on_close(fd),
            }
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
