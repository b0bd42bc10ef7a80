//! The agent's HTTP endpoints: `/healthz` (the reader is alive), `/readyz` (programs
//! attached and the cgroup index built), `/metrics`, `/api/v1/incidents`.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    time::Duration,
};

use axum::{
    Json, Router,
    extract::{Query, State},
    http::StatusCode,
    routing::get,
};
use serde_json::json;

use crate::{detect::render::Filter, metrics::Metrics, pipeline::Pipeline, stream::StreamStats};

/// The reader wakes every second; three missed wake-ups means it is stuck.
const READER_STALE_AFTER: Duration = Duration::from_secs(3);

#[derive(Clone)]
pub struct HttpState {
    pub ready: Arc<AtomicBool>,
    pub stream: Arc<StreamStats>,
    pub pipeline: Arc<Mutex<Pipeline>>,
    pub metrics: Arc<Mutex<Metrics>>,
}

/// What Prometheus asks for; prometheus-client writes OpenMetrics text.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const CLASSIC_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/v1/incidents", get(incidents))
        .route("/metrics", get(metrics))
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

async fn incidents(
    State(s): State<HttpState>,
    Query(filter): Query<Filter>,
) -> Result<Json<serde_json::Value>, (StatusCode, Json<serde_json::Value>)> {
    let bad = |msg: String| (StatusCode::BAD_REQUEST, Json(json!({"error": msg})));
    if let Some(p) = filter.phase.as_deref()
        && crate::detect::Phase::parse(p).is_none()
    {
        return Err(bad(format!(
            "unknown phase `{p}`: startup, drain, steady or unresolved"
        )));
    }
    if let Some(k) = filter.kind.as_deref()
        && crate::detect::render::Kind::parse(k).is_none()
    {
        return Err(bad(format!(
            "unknown kind `{k}`: sidecar_race, app_not_ready, init_deadlock or stuck_job"
        )));
    }
    if let Some(st) = filter.state.as_deref()
        && st != "open"
        && st != "resolved"
    {
        return Err(bad(format!("unknown state `{st}`: open or resolved")));
    }
    let list = s.pipeline.lock().expect("pipeline lock").incidents(&filter);
    Ok(Json(json!({ "incidents": list })))
}

/// OpenMetrics for those who ask for it (Prometheus does), the classic text format
/// otherwise (curl, promtool).
async fn metrics(
    State(s): State<HttpState>,
    headers: axum::http::HeaderMap,
) -> impl axum::response::IntoResponse {
    let wants_openmetrics = headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let m = s.metrics.lock().expect("metrics lock");
    if wants_openmetrics {
        (
            [(axum::http::header::CONTENT_TYPE, OPENMETRICS)],
            m.encode(),
        )
    } else {
        (
            [(axum::http::header::CONTENT_TYPE, CLASSIC_TEXT)],
            m.encode_classic(),
        )
    }
}

/// Binds `addr` and serves until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    state: HttpState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /healthz, /readyz, /metrics, /api/v1/incidents");
    Ok(tokio::spawn(async move {
        axum::serve(listener, router(state))
            .with_graceful_shutdown(shutdown)
            .await
    }))
}
