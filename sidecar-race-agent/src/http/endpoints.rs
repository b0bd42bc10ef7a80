//! The routes and their handlers: `/healthz` (the reader is alive), `/readyz`
//! (programs attached and the cgroup index built), `/metrics` and
//! `/api/v1/incidents`, each answer bounded by its slots.

use std::{
    convert::Infallible,
    sync::{Arc, atomic::Ordering::Relaxed},
    time::Duration,
};

use axum::{
    Json, Router,
    body::{Body, Bytes},
    extract::{Query, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{
    auth,
    rendered::{Format, Rendered},
    server::Limits,
    state::HttpState,
};
use crate::{
    api::{DEFAULT_LIMIT, MAX_LIMIT, Page},
    detect::{Kind, Phase, State as IncidentState, render::Filter},
};

/// The reader wakes every second; three missed wake-ups means it is stuck.
const READER_STALE_AFTER: Duration = Duration::from_secs(3);

/// Answers are sent in pieces of this size, holding their API slot until sent.
const CHUNK: usize = 64 * 1024;

#[derive(Clone)]
struct Shared {
    state: HttpState,
    /// Slots for incidents answers being built or sent.
    api_slots: Arc<Semaphore>,
    /// Slots for `/metrics` answers being sent, and their shared bodies.
    metrics_slots: Arc<Semaphore>,
    rendered: Arc<Rendered>,
}

/// What Prometheus asks for; prometheus-client writes OpenMetrics text.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const CLASSIC_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `/healthz`, `/readyz` (always open, for the kubelet), `/metrics`, and
/// `/api/v1/incidents` when `with_api` (behind `--auth` when it is on).
pub fn router(state: HttpState, limits: Limits, with_api: bool) -> Router {
    let mut protected = Router::new().route("/metrics", get(metrics));
    if with_api {
        protected = protected.route("/api/v1/incidents", get(incidents));
    }
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(behind_auth(protected, &state))
        .with_state(shared(state, limits))
}

/// `/api/v1/incidents` alone, for its own address.
pub fn api_router(state: HttpState, limits: Limits) -> Router {
    let api = Router::new().route("/api/v1/incidents", get(incidents));
    behind_auth(api, &state).with_state(shared(state, limits))
}

fn behind_auth(routes: Router<Shared>, state: &HttpState) -> Router<Shared> {
    match &state.auth {
        Some(auth) => routes.route_layer(axum::middleware::from_fn_with_state(
            auth.clone(),
            auth::require,
        )),
        None => routes,
    }
}

fn shared(state: HttpState, limits: Limits) -> Shared {
    Shared {
        state,
        api_slots: Arc::new(Semaphore::new(limits.api_concurrency.max(1))),
        metrics_slots: Arc::new(Semaphore::new(limits.metrics_concurrency.max(1))),
        rendered: Arc::default(),
    }
}

async fn healthz(State(Shared { state: s, .. }): State<Shared>) -> (StatusCode, &'static str) {
    if s.stream.is_alive(READER_STALE_AFTER) {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "kernel event reader is not running\n",
        )
    }
}

/// Ready, and on a node where the agent cannot see everything, what it cannot: a
/// degraded agent still serves what it sees, so it stays ready. The `degraded:` line
/// only without `--auth`: with it, `/readyz` stays open for the kubelet and says only
/// `ready` (SECURITY.md), and the sentence is in the agent's log.
async fn readyz(State(Shared { state: s, .. }): State<Shared>) -> (StatusCode, String) {
    if s.ready.load(Relaxed) && s.stream.is_alive(READER_STALE_AFTER) {
        let body = match &s.degraded {
            Some(what) if s.auth.is_none() => format!("ready\ndegraded: {what}\n"),
            _ => "ready\n".to_string(),
        };
        (StatusCode::OK, body)
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n".to_string())
    }
}

/// `?kind=&phase=&namespace=&state=&limit=` of `/api/v1/incidents`.
#[derive(Debug, Default, serde::Deserialize)]
struct IncidentsQuery {
    kind: Option<String>,
    phase: Option<String>,
    namespace: Option<String>,
    state: Option<String>,
    limit: Option<usize>,
}

impl IncidentsQuery {
    /// The filter, or why a value is not one the API knows.
    fn filter(&self) -> Result<Filter, String> {
        let phase = parsed(&self.phase, Phase::parse, |p| {
            format!("unknown phase `{p}`: startup, drain, steady or unresolved")
        })?;
        let kind = parsed(&self.kind, Kind::parse, |k| {
            format!("unknown kind `{k}`: sidecar_race, app_not_ready, init_deadlock or stuck_job")
        })?;
        let state = parsed(&self.state, IncidentState::parse, |s| {
            format!("unknown state `{s}`: open or resolved")
        })?;
        Ok(Filter {
            kind,
            phase,
            namespace: self.namespace.clone(),
            state,
        })
    }
}

/// `value` parsed by `parse`, if given; `why` it is not a value.
fn parsed<T>(
    value: &Option<String>,
    parse: fn(&str) -> Option<T>,
    why: impl Fn(&str) -> String,
) -> Result<Option<T>, String> {
    match value.as_deref() {
        None => Ok(None),
        Some(v) => parse(v).map(Some).ok_or_else(|| why(v)),
    }
}

async fn incidents(State(s): State<Shared>, Query(q): Query<IncidentsQuery>) -> Response {
    let bad = |msg: String| (StatusCode::BAD_REQUEST, Json(json!({"error": msg}))).into_response();
    let filter = match q.filter() {
        Ok(filter) => filter,
        Err(msg) => return bad(msg),
    };
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return bad(format!("limit must be 1 to {MAX_LIMIT}, not {limit}"));
    }
    // A slot bounds the answers in memory at once; it is held until the answer is sent.
    let Ok(slot) = s.api_slots.clone().acquire_owned().await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let pipeline = s.state.pipeline.clone();
    // Views are built under the pipeline lock, serialized after it is released, off
    // the async workers (health checks stay answered).
    let json = tokio::task::spawn_blocking(move || {
        let (list, truncated) = pipeline.lock().incidents(&filter, limit);
        serde_json::to_vec(&Page {
            incidents: &list[..],
            truncated,
        })
    })
    .await;
    match json {
        Ok(Ok(bytes)) => (
            [
                (header::CONTENT_TYPE, "application/json".to_string()),
                (header::CONTENT_LENGTH, bytes.len().to_string()),
            ],
            sent_holding(Bytes::from(bytes), slot),
        )
            .into_response(),
        _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// A body of `bytes` that holds `slot` until it is sent (or the client went away).
fn sent_holding(bytes: Bytes, slot: OwnedSemaphorePermit) -> Body {
    let chunks: Vec<Bytes> = (0..bytes.len())
        .step_by(CHUNK)
        .map(|at| bytes.slice(at..(at + CHUNK).min(bytes.len())))
        .collect();
    let stream = futures::stream::unfold((chunks.into_iter(), slot), |(mut rest, slot)| async {
        let chunk = rest.next()?;
        Some((Ok::<_, Infallible>(chunk), (rest, slot)))
    });
    Body::from_stream(stream)
}

/// OpenMetrics for those who ask for it (Prometheus does), the classic text format
/// otherwise (curl, promtool). A slot is held until the answer is sent; the body is
/// shared with the other scrapes of the same second.
async fn metrics(State(s): State<Shared>, headers: axum::http::HeaderMap) -> Response {
    let wants_openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let (format, content_type) = if wants_openmetrics {
        (Format::OpenMetrics, OPENMETRICS)
    } else {
        (Format::Classic, CLASSIC_TEXT)
    };
    let Ok(slot) = s.metrics_slots.clone().acquire_owned().await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    match s.rendered.body(&s.state.metrics, format).await {
        Ok(bytes) => (
            [
                (header::CONTENT_TYPE, content_type.to_string()),
                (header::CONTENT_LENGTH, bytes.len().to_string()),
            ],
            sent_holding(bytes, slot),
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use axum::body::to_bytes;
    use parking_lot::Mutex;
    use tower::ServiceExt;

    use super::*;
    use crate::{
        clock,
        detect::DetectorConfig,
        http::auth::{Authenticator, CacheTtls, NoClient},
        ingest::stream::StreamStats,
        sinks::metrics::Metrics,
        test_facts,
    };

    async fn readyz_body(auth: Option<Arc<Authenticator>>) -> (StatusCode, String) {
        let stream = Arc::new(StreamStats::default());
        stream
            .last_poll_boot_ns
            .store(clock::boot_now_ns(), Relaxed);
        let dir = test_facts::temp_dir("readyz");
        let state = HttpState {
            ready: Arc::new(AtomicBool::new(true)),
            degraded: Some("Unix domain sockets are not seen (lockdown)".into()),
            stream,
            pipeline: Arc::new(Mutex::new(test_facts::pipeline(
                &dir,
                None,
                DetectorConfig::default(),
            ))),
            metrics: Arc::new(Mutex::new(Metrics::new(false, "test", "test"))),
            auth,
        };
        let req = axum::http::Request::get("/readyz")
            .body(Body::empty())
            .unwrap();
        let res = router(state, Limits::default(), true)
            .oneshot(req)
            .await
            .unwrap();
        let status = res.status();
        let body = to_bytes(res.into_body(), 1 << 16).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn readyz_says_what_is_degraded_only_when_every_endpoint_is_open() {
        let (status, body) = readyz_body(None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            body,
            "ready\ndegraded: Unix domain sockets are not seen (lockdown)\n"
        );
        let auth = Authenticator::new(Box::new(NoClient("none".into())), CacheTtls::default());
        let (status, body) = readyz_body(Some(Arc::new(auth))).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "ready\n", "with --auth, /readyz says only ready");
    }
}
