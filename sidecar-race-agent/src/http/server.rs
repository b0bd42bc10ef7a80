//! Connections of the agent's HTTP server, within limits a slow or hostile client
//! cannot stretch: a connection cap, a header-read timeout (slowloris), a maximum
//! connection age (idle keep-alive clients), an absolute deadline for each answer
//! (head and body: a client reading slowly is cut off) and no request bodies.
//! Beyond the cap, a few more connections are taken that serve only `/healthz` and
//! `/readyz`: each must send a probe's whole request head (over TLS, after its
//! handshake) within a second before it takes a health slot, so neither requests
//! waiting for a token review, nor clients stalling in their head, nor idle TLS
//! connections can hold those, and a flood does not get the agent restarted by its
//! liveness probe. When more connections than the places for reading heads come, the
//! oldest is closed for the newest, so silent ones cannot keep a probe out either.
//! Shutdown waits for connections at most as long as a request may take.

use std::{
    net::SocketAddr,
    os::fd::{AsRawFd, RawFd},
    sync::Arc,
    time::Duration,
};

use super::{
    answer_deadline::{AnswerDeadline, ArmedBody, deadline_passed},
    health_slot::{PEEK_TIMEOUT, read_probe_head},
    peeking::{PeekPlace, Peeking},
    replay::Replayed,
    tls::Reloading,
    write_deadline::WriteDeadline,
};
use axum::{
    Router,
    body::Body,
    extract::{ConnectInfo, Request},
    http::{HeaderValue, StatusCode, header},
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
    /// Connections served at once; further ones get a health slot, or are closed.
    pub max_connections: usize,
    /// Connections beyond `max_connections` whose request head is read (within a
    /// second, TLS handshake included) to tell the kubelet's probes from the rest,
    /// which are closed; a further one takes the place of the oldest, which is closed.
    pub peeked_connections: usize,
    /// Probes among those answered at once, on slots of their own taken once a whole
    /// request head arrived: only [`HEALTH_PATHS`], one request each.
    pub health_connections: usize,
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
            peeked_connections: 256,
            health_connections: 8,
            max_connection_age: Duration::from_secs(300),
            max_header_bytes: 16 * 1024,
            max_body_bytes: 16 * 1024,
            api_concurrency: 2,
            metrics_concurrency: 4,
        }
    }
}

/// The paths a health slot serves: the kubelet's probes.
pub const HEALTH_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// One connection: who is at its other end, and whether it holds a health slot.
#[derive(Debug, Clone, Copy)]
pub struct Connection {
    pub peer: SocketAddr,
    pub health_only: bool,
}

/// Adds the request timeout and the body limit to `app`, for one connection whose
/// answers are cut off at their deadline through `deadline`; requests carry the peer's
/// address (`ConnectInfo`), for the token-review budget of its source.
pub fn limited(app: Router, limits: Limits, deadline: AnswerDeadline, conn: Connection) -> Router {
    app.layer(middleware::from_fn(move |req: Request, next: Next| {
        within_limits(limits, deadline.clone(), conn, req, next)
    }))
}

async fn within_limits(
    limits: Limits,
    deadline: AnswerDeadline,
    conn: Connection,
    mut req: Request,
    next: Next,
) -> Response {
    req.extensions_mut().insert(ConnectInfo(conn.peer));
    if conn.health_only {
        // One request per health slot, so that a client cannot keep one.
        let mut res = if HEALTH_PATHS.contains(&req.uri().path()) {
            within_deadline(limits, deadline, req, next).await
        } else {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "connection limit reached: only /healthz and /readyz are served now\n",
            )
                .into_response()
        };
        res.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return res;
    }
    within_deadline(limits, deadline, req, next).await
}

async fn within_deadline(
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

/// Serves `app` on `listener` (over TLS with `tls`) until `shutdown` completes, then
/// closes every connection gracefully within `limits.request_timeout`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    tls: Option<Arc<Reloading>>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let health_slots = Arc::new(Semaphore::new(limits.health_connections));
    let peeking = Peeking::new(limits.peeked_connections);
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    let mut evicted_warned = false;
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!("cannot accept an HTTP connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (stream, peer) = stream;
        // Beyond the cap, a connection's head is read (on a peek place) before it may
        // take a health slot; with every place taken, the oldest gives its own up.
        let (slot, place) = match slots.clone().try_acquire_owned() {
            Ok(slot) => (Some(slot), None),
            Err(_) => {
                let (place, evicted) = peeking.enter();
                if evicted && !evicted_warned {
                    tracing::warn!(
                        max = limits.max_connections,
                        "HTTP connection limit reached: beyond it only /healthz and /readyz \
                         are answered, and connections slow to send them are closed"
                    );
                    evicted_warned = true;
                }
                (None, Some(place))
            }
        };
        let health_only = place.is_some();
        let fd = stream.as_raw_fd();
        let (deadline, cut_at) = AnswerDeadline::new();
        let service = TowerToHyperService::new(limited(
            app.clone(),
            limits,
            deadline,
            Connection { peer, health_only },
        ));
        let conn = Driven {
            service,
            // A probe's head is read before it is served: only its own time counts.
            header_read_timeout: if health_only {
                limits.header_read_timeout.min(PEEK_TIMEOUT)
            } else {
                limits.header_read_timeout
            },
            limits,
            cut_at,
            stop: stop_rx.clone(),
            fd,
        };
        let health_slots = health_slots.clone();
        let acceptor = tls.as_ref().map(|t| t.acceptor());
        tokio::spawn(async move {
            let io = WriteDeadline::new(stream, limits.write_timeout);
            if let Some(place) = place {
                // The handshake and the probe's whole head, both on the peek place.
                let by = Instant::now() + PEEK_TIMEOUT;
                let Some(acceptor) = acceptor else {
                    return answer_probe(io, by, place, health_slots, conn).await;
                };
                let accepted = tokio::select! {
                    _ = place.evicted() => return,
                    accepted = tokio::time::timeout_at(by, acceptor.accept(io)) => accepted,
                };
                if let Ok(Ok(tls)) = accepted {
                    answer_probe(tls, by, place, health_slots, conn).await;
                }
                return;
            }
            let _slot = slot;
            let Some(acceptor) = acceptor else {
                return drive(io, conn).await;
            };
            // The handshake within the header timeout, as a request's headers.
            match tokio::time::timeout(conn.header_read_timeout, acceptor.accept(io)).await {
                Ok(Ok(tls)) => drive(tls, conn).await,
                Ok(Err(e)) => tracing::debug!("TLS handshake failed: {e}"),
                Err(_) => tracing::debug!("TLS handshake not done within the header timeout"),
            }
        });
    }
    drop(listener);
    stop_tx.send_replace(true);
    // Every connection task holds a slot: all slots back means all connections ended.
    let all = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let drained = tokio::time::timeout(limits.request_timeout + Duration::from_secs(1), async {
        let general = slots.acquire_many(all(limits.max_connections)).await;
        while peeking.live() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let health = health_slots
            .acquire_many(all(limits.health_connections))
            .await;
        (general, health)
    })
    .await;
    if drained.is_err() {
        tracing::warn!("HTTP connections still open at shutdown are dropped");
    }
    Ok(())
}

/// What serving one connection needs besides its stream.
struct Driven {
    service: TowerToHyperService<Router>,
    header_read_timeout: Duration,
    limits: Limits,
    cut_at: watch::Receiver<Option<Instant>>,
    stop: watch::Receiver<bool>,
    fd: RawFd,
}

/// Beyond the cap: reads a probe's whole request head by `by` while `place` (its peek
/// place) is held, and only then takes a health slot to answer it, so that a client
/// stalling in its head holds no health slot. Anything else is closed, as is a
/// connection whose place a newer one took meanwhile.
async fn answer_probe<I>(
    mut io: I,
    by: Instant,
    place: PeekPlace,
    health_slots: Arc<Semaphore>,
    conn: Driven,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let max = conn.limits.max_header_bytes;
    let head = tokio::select! {
        _ = place.evicted() => return,
        head = tokio::time::timeout_at(by, read_probe_head(&mut io, max)) => head,
    };
    let Ok(Some(head)) = head else {
        return; // closed: beyond the cap, only the probes are served
    };
    // Health slots are held only while whole probes are answered: one comes back fast.
    let health = tokio::select! {
        _ = place.evicted() => return,
        health = tokio::time::timeout_at(by, health_slots.acquire_owned()) => health,
    };
    let Ok(Ok(_health)) = health else {
        return;
    };
    drop(place); // the peek place goes back to the next connection
    drive(Replayed::new(head, io), conn).await;
}

/// Serves one connection's requests on `io` (plain or TLS) until it ends, its
/// answer's deadline passes (then it is reset), it reaches its maximum age, or the
/// server stops (then its request in flight may finish).
async fn drive<I>(io: I, conn: Driven)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Driven {
        service,
        header_read_timeout,
        limits,
        mut cut_at,
        mut stop,
        fd,
    } = conn;
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .serve_connection(TokioIo::new(io), service);
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
}
