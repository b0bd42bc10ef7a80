//! Where the endpoints are served: the main address, and `/api/v1/incidents` on its
//! own address or off (`--api-listen`), until shutdown.

use std::{net::SocketAddr, sync::Arc};

use tokio::sync::watch;

use super::{
    endpoints::{api_router, router},
    server::{self, Limits},
    state::HttpState,
    tls::Reloading,
};

/// Where `/api/v1/incidents` is served instead of the main address (`--api-listen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiListen {
    /// Not at all.
    Off,
    /// Only on this address (e.g. 127.0.0.1:9966, for `kubectl port-forward`).
    On(SocketAddr),
}

impl std::str::FromStr for ApiListen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "off" {
            return Ok(ApiListen::Off);
        }
        s.parse()
            .map(ApiListen::On)
            .map_err(|e| format!("`{s}` is neither `off` nor an address like 127.0.0.1:9966 ({e})"))
    }
}

/// Binds `addr` (and the API's own address, with `api`) and serves, over TLS with
/// `tls`, until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    api: Option<ApiListen>,
    state: HttpState,
    limits: Limits,
    tls: Option<Arc<Reloading>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let api_listener = match api {
        Some(ApiListen::On(api_addr)) => {
            Some((tokio::net::TcpListener::bind(api_addr).await?, api_addr))
        }
        _ => None,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let main = router(state.clone(), limits, api.is_none());
    let main = tokio::spawn(server::serve(
        listener,
        main,
        limits,
        tls.clone(),
        stopped(),
    ));
    let second = api_listener.map(|(l, api_addr)| {
        tracing::info!(%api_addr, scheme, "serving /api/v1/incidents");
        tokio::spawn(server::serve(
            l,
            api_router(state, limits),
            limits,
            tls.clone(),
            stopped(),
        ))
    });
    match api {
        None => {
            tracing::info!(%addr, scheme, "serving /healthz, /readyz, /metrics, /api/v1/incidents")
        }
        Some(_) => tracing::info!(%addr, scheme, "serving /healthz, /readyz, /metrics"),
    }
    if api == Some(ApiListen::Off) {
        tracing::info!("/api/v1/incidents is off (--api-listen off)");
    }
    Ok(tokio::spawn(async move {
        shutdown.await;
        stop_tx.send_replace(true);
        if let Some(second) = second {
            second.await??;
        }
        main.await?
    }))
}
