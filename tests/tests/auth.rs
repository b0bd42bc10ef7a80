//! `--auth=kubernetes` against the fake API server, through the agent's HTTP server and
//! kube's real client (no root needed): a token the API server allows gets `/metrics`
//! and `/api/v1/incidents`; no token or an invalid one gets 401, a valid one without
//! the grant 403, neither with detail; `/healthz` and `/readyz` stay open. Decisions are
//! reused briefly and reviewed again after; with the API server down a cached allow
//! holds for a bounded time, then the answer is 503 (never 200), counted in a metric.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    time::Duration,
};

use sidecar_race_agent::{
    clock,
    detect::DetectorConfig,
    http::{
        self, HttpState, Limits,
        auth::{AuthCounts, Authenticator, CacheTtls, KubeReviewer},
    },
    ingest::stream::StreamStats,
    inventory::cgroups::CgroupIndex,
    inventory::{Inventory, store::PodStore},
    pipeline::Pipeline,
    sinks::metrics::{Metrics, Totals, TotalsSource},
};
use sidecar_race_tests::{
    fake_api::{FakeApi, Mode},
    http::{free_port, get, get_as},
};

const PROMETHEUS: &str = "system:serviceaccount:monitoring:prometheus-k8s";
const STRANGER: &str = "system:serviceaccount:default:default";
const FRESH: Duration = Duration::from_secs(1);
const WHILE_UNREACHABLE: Duration = Duration::from_secs(4);

/// The authenticator's counts, read at scrape time as the daemon reads them.
#[derive(Debug)]
struct Counts(Arc<AuthCounts>);

impl TotalsSource for Counts {
    fn totals(&self) -> Totals {
        Totals {
            auth: Some(self.0.read().to_vec()),
            ..Totals::default()
        }
    }
}

async fn client_of(api: &FakeApi) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(api.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// The agent's HTTP server with `--auth=kubernetes` reviewing through `api`.
async fn serve(api: &FakeApi) -> SocketAddr {
    let auth = Arc::new(Authenticator::new(
        Box::new(KubeReviewer(client_of(api).await)),
        CacheTtls {
            fresh: FRESH,
            allow_when_unreachable: WHILE_UNREACHABLE,
            ..CacheTtls::default()
        },
    ));
    let dir = std::env::temp_dir().join(format!("sr-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inventory = Inventory::new(
        CgroupIndex::new(&dir, u64::MAX),
        PodStore::new(Duration::from_secs(600)),
        false,
    );
    let stream = Arc::new(StreamStats::default());
    stream
        .last_poll_boot_ns
        .store(clock::boot_now_ns() + 3_600_000_000_000, Relaxed);
    let metrics =
        Metrics::new(false, "0.1.0", "test").with_totals(Box::new(Counts(auth.counts.clone())));
    let state = HttpState {
        ready: Arc::new(AtomicBool::new(true)),
        stream,
        pipeline: Arc::new(parking_lot::Mutex::new(Pipeline::new(
            inventory,
            DetectorConfig::default(),
            0,
        ))),
        metrics: Arc::new(parking_lot::Mutex::new(metrics)),
        auth: Some(auth),
    };
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    http::serve(
        addr,
        None,
        state,
        Limits::default(),
        std::future::pending::<()>(),
    )
    .await
    .unwrap();
    addr
}

/// A blocking GET off the async workers (the fake and the client are threads).
async fn get_with(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let (path, token) = (path.to_string(), token.map(str::to_string));
    tokio::task::spawn_blocking(move || {
        get_as(&addr.to_string(), &path, token.as_deref()).expect("the agent answers")
    })
    .await
    .unwrap()
}

fn metric(exposition: &str, result: &str) -> u64 {
    let prefix = format!("sidecar_race_http_auth_requests_total{{result=\"{result}\"}} ");
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in {exposition}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_denied_cached_and_unreachable() {
    let mut api = FakeApi::start(Mode::Healthy);
    api.add_token("prom-token", PROMETHEUS);
    api.add_token("stranger-token", STRANGER);
    api.allow(PROMETHEUS, "/metrics");
    api.allow(PROMETHEUS, "/api/v1/incidents");
    let addr = serve(&api).await;

    // Allowed: a token the API server vouches for, with the grant.
    let (status, body) = get_with(addr, "/metrics", Some("prom-token")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("sidecar_race_build_info"), "{body}");
    let (status, body) = get_with(addr, "/api/v1/incidents", Some("prom-token")).await;
    assert_eq!(
        (status, body.as_str()),
        (200, r#"{"incidents":[],"truncated":false}"#)
    );

    // Denied, without detail.
    for (token, status, text) in [
        (None, 401, "Unauthorized\n"),
        (Some("forged-token"), 401, "Unauthorized\n"),
        (Some("stranger-token"), 403, "Forbidden\n"),
    ] {
        for path in ["/metrics", "/api/v1/incidents"] {
            assert_eq!(
                get_with(addr, path, token).await,
                (status, text.to_string()),
                "{path} with {token:?}"
            );
        }
    }
    // The kubelet's probes need no token.
    assert_eq!(get_with(addr, "/healthz", None).await.0, 200);
    assert_eq!(get_with(addr, "/readyz", None).await.0, 200);

    // Decisions are reused briefly: no new review for the same token and path.
    let reviews = api.token_reviews();
    assert_eq!(get_with(addr, "/metrics", Some("prom-token")).await.0, 200);
    assert_eq!(api.token_reviews(), reviews, "answered from the cache");
    // ...and reviewed again once they expire: a revoked token is refused.
    api.add_token("short-lived", PROMETHEUS);
    assert_eq!(get_with(addr, "/metrics", Some("short-lived")).await.0, 200);
    api.revoke_token("short-lived");
    assert_eq!(
        get_with(addr, "/metrics", Some("short-lived")).await.0,
        200,
        "cached"
    );
    tokio::time::sleep(FRESH + Duration::from_millis(200)).await;
    assert_eq!(
        get_with(addr, "/metrics", Some("short-lived")).await.0,
        401,
        "reviewed again after the cache expired"
    );

    // The API server goes down: the cached allow holds (past its freshness) for a
    // bounded time; a token never reviewed gets 503, never 200; no token is still 401.
    assert_eq!(get_with(addr, "/metrics", Some("prom-token")).await.0, 200);
    api.down();
    tokio::time::sleep(FRESH + Duration::from_millis(200)).await;
    assert_eq!(
        get_with(addr, "/metrics", Some("prom-token")).await.0,
        200,
        "a cached allow holds while the API server is unreachable"
    );
    assert_eq!(
        get_with(addr, "/metrics", Some("stranger-token")).await.0,
        503
    );
    assert_eq!(get_with(addr, "/metrics", None).await.0, 401);
    tokio::time::sleep(WHILE_UNREACHABLE).await;
    let (status, body) = get_with(addr, "/metrics", Some("prom-token")).await;
    assert_eq!(
        (status, body.as_str()),
        (503, "cannot authorize the request now\n"),
        "past the bound the cached allow no longer holds"
    );
    assert_eq!(
        get_with(addr, "/api/v1/incidents", Some("prom-token"))
            .await
            .0,
        503
    );

    // Back up: the 503s were counted.
    api.up();
    let (status, exposition) = get_with(addr, "/metrics", Some("prom-token")).await;
    assert_eq!(status, 200, "{exposition}");
    assert_eq!(metric(&exposition, "unavailable"), 3, "{exposition}");
    assert_eq!(metric(&exposition, "allowed_api_unreachable"), 1);
    assert_eq!(metric(&exposition, "forbidden"), 2);
    assert_eq!(metric(&exposition, "unauthenticated"), 6);
    assert!(metric(&exposition, "allowed") >= 6);
    // Unauthenticated requests never reach the API server without a token.
    assert_eq!(get(&addr.to_string(), "/metrics").unwrap().0, 401);
}
