//! `--auth=kubernetes` against the fake API server, through the agent's HTTP server and
//! kube's real client (no root needed): a token the API server allows `get` on the
//! `sidecar-race.io` resources gets `/metrics` and `/api/v1/incidents`, in
//! `Authorization` or in `X-Sidecar-Race-Token`; no token or an invalid one gets 401, a
//! valid one without the grant 403 (also one that `system:discovery` lets `get`
//! `/api/*`), neither with detail; `/healthz` and `/readyz` stay open. Decisions are
//! reused briefly and reviewed again after; with the API server down a cached allow
//! holds for a bounded time, then the answer is 503 (never 200), counted in a metric.
//! Reviews are bounded: a source over its budget gets 429 without a review, and a
//! flood of random tokens from many sources leaves `/healthz` answering and cached
//! allows served (its numbers are in SECURITY.md).

use std::{
    net::{Ipv4Addr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpSocket,
};

use sidecar_race_agent::{
    clock,
    detect::DetectorConfig,
    http::{
        self, HttpState, Limits,
        auth::{AuthCounts, Authenticator, CacheTtls, KubeReviewer, ReviewBudget},
    },
    ingest::stream::StreamStats,
    inventory::cgroups::CgroupIndex,
    inventory::{Inventory, store::PodStore},
    pipeline::Pipeline,
    sinks::metrics::{Metrics, Totals, TotalsSource},
};
use sidecar_race_tests::{
    fake_api::{AGENT_NAMESPACE, FakeApi, Mode},
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
    let ttls = CacheTtls {
        fresh: FRESH,
        allow_when_unreachable: WHILE_UNREACHABLE,
        denied_fresh: FRESH,
        ..CacheTtls::default()
    };
    serve_with(api, ttls, ReviewBudget::default()).await
}

/// The same, with these cache times and review budget.
async fn serve_with(api: &FakeApi, ttls: CacheTtls, budget: ReviewBudget) -> SocketAddr {
    let reviewer = KubeReviewer::new(client_of(api).await);
    assert_eq!(reviewer.namespace(), AGENT_NAMESPACE, "the kubeconfig's");
    let auth = Arc::new(Authenticator::with_budget(Box::new(reviewer), ttls, budget));
    let dir = std::env::temp_dir().join(format!("sr-auth-{}-{}", std::process::id(), api.port));
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
        degraded: None,
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
        None,
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
    api.allow(PROMETHEUS, "metrics");
    api.allow(PROMETHEUS, "incidents");
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
    // Through the API server's pod proxy (`report --agents-via-api`) the token comes
    // in X-Sidecar-Race-Token, reviewed like a bearer token.
    for (token, status) in [
        ("prom-token", 200),
        ("stranger-token", 403),
        ("forged-proxied", 401),
    ] {
        for path in ["/metrics", "/api/v1/incidents"] {
            let header = format!("X-Sidecar-Race-Token: {token}");
            let answer = request(addr, LOOPBACK, path, &[&header]).await;
            assert_eq!(answer.map(|a| a.0), Some(status), "{path} with {header}");
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
    assert_eq!(metric(&exposition, "forbidden"), 4);
    assert_eq!(metric(&exposition, "unauthenticated"), 8);
    assert!(metric(&exposition, "allowed") >= 6);
    // Unauthenticated requests never reach the API server without a token.
    assert_eq!(get(&addr.to_string(), "/metrics").unwrap().0, 401);
}

const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// `GET path` with `headers` from the address `from` (any of 127.0.0.0/8: each is a
/// source of its own to the agent), on a connection of its own: (status, body), or
/// None when the agent closed the connection without an answer or took over 10 s.
async fn request(
    addr: SocketAddr,
    from: Ipv4Addr,
    path: &str,
    headers: &[&str],
) -> Option<(u16, String)> {
    let exchange = async {
        let socket = TcpSocket::new_v4().ok()?;
        socket.bind(SocketAddr::from((from, 0))).ok()?;
        let mut s = socket.connect(addr).await.ok()?;
        let mut head = format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n");
        for h in headers {
            head.push_str(h);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.ok()?;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer.split_whitespace().nth(1)?.parse().ok()?;
        let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}")
}

/// A source over its review budget is answered 429 without the API server being
/// asked; another source still gets its reviews, a repeated bad token is answered
/// from the negative cache, and a cached allow is not spent from any budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_over_its_review_budget_gets_429_without_a_review() {
    let api = FakeApi::start(Mode::Healthy);
    api.add_token("prom-token", PROMETHEUS);
    api.allow(PROMETHEUS, "metrics");
    let budget = ReviewBudget {
        burst: 5.0,
        per_second: 0.01,
        ..ReviewBudget::default()
    };
    let addr = serve_with(&api, CacheTtls::default(), budget).await;
    let (flooder, other) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3));
    assert_eq!(
        request(addr, flooder, "/metrics", &[&bearer("prom-token")])
            .await
            .map(|a| a.0),
        Some(200)
    );
    let before = api.token_reviews();
    let mut statuses = Vec::new();
    for i in 0..12 {
        let token = bearer(&format!("random-{i}"));
        statuses.push(
            request(addr, flooder, "/metrics", &[&token])
                .await
                .map(|a| a.0),
        );
    }
    assert_eq!(
        statuses,
        [[Some(401); 4].as_slice(), [Some(429); 8].as_slice()].concat(),
        "the prom-token's review and four new tokens spent the burst of 5"
    );
    assert_eq!(api.token_reviews() - before, 4, "no review past the budget");
    let (status, body) = request(addr, flooder, "/metrics", &[&bearer("random-99")])
        .await
        .unwrap();
    assert_eq!(
        (status, body.as_str()),
        (429, "too many token reviews from this address\n")
    );
    // The negative cache: a token denied just now costs no review, within any budget.
    assert_eq!(
        request(addr, flooder, "/metrics", &[&bearer("random-0")])
            .await
            .map(|a| a.0),
        Some(401)
    );
    // A cached allow is served to the spent source.
    assert_eq!(
        request(addr, flooder, "/metrics", &[&bearer("prom-token")])
            .await
            .map(|a| a.0),
        Some(200)
    );
    // Another source has its own budget.
    assert_eq!(
        request(addr, other, "/metrics", &[&bearer("random-other")])
            .await
            .map(|a| a.0),
        Some(401)
    );
    assert_eq!(api.token_reviews() - before, 5);
    // Scrapes within a second share one rendered body: let it age.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (_, exposition) = request(addr, other, "/metrics", &[&bearer("prom-token")])
        .await
        .unwrap();
    assert_eq!(metric(&exposition, "throttled"), 9, "{exposition}");
}

/// Flooders: connections from this many source addresses at once, each sending a new
/// random token in a loop, for `FLOOD_FOR`; the API server answers each review call in
/// `API_DELAY` (a loaded one), so reviews are slow and requests pile up.
const FLOODERS: usize = 200;
const FLOOD_SOURCES: u8 = 50;
const FLOOD_FOR: Duration = Duration::from_secs(8);
const API_DELAY: Duration = Duration::from_millis(200);
/// The DaemonSet's liveness probe: `timeoutSeconds: 2`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A flood of random tokens (more connections than the server's 128 slots, from 50
/// addresses, against a slow API server) leaves `/healthz` answering within the
/// probe's timeout every time, the scraper's cached allow served whenever its
/// connection gets a slot, and, with the API server then down, still served from the
/// cache. Prints the numbers SECURITY.md records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_random_tokens_leaves_healthz_answering_and_allows_cached() {
    let mut api = FakeApi::start(Mode::Healthy);
    api.add_token("prom-token", PROMETHEUS);
    api.allow(PROMETHEUS, "metrics");
    let ttls = CacheTtls {
        fresh: FRESH,
        ..CacheTtls::default()
    };
    let addr = serve_with(&api, ttls, ReviewBudget::default()).await;
    let scrape = || async {
        request(addr, LOOPBACK, "/metrics", &[&bearer("prom-token")])
            .await
            .map(|a| a.0)
    };
    assert_eq!(scrape().await, Some(200));
    api.set_mode(Mode::Slow(API_DELAY));
    let reviews_before = api.token_reviews();
    let sent = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let flood: Vec<_> = (0..FLOODERS)
        .map(|i| {
            let sent = sent.clone();
            let from = Ipv4Addr::new(127, 0, 1, 1 + (i % usize::from(FLOOD_SOURCES)) as u8);
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                let mut n = 0;
                while started.elapsed() < FLOOD_FOR {
                    n += 1;
                    let token = bearer(&format!("flood-{i}-{n}"));
                    sent.fetch_add(1, Relaxed);
                    statuses.push(
                        request(addr, from, "/api/v1/incidents", &[&token])
                            .await
                            .map(|a| a.0),
                    );
                }
                statuses
            })
        })
        .collect();
    // The kubelet's probe, and the scraper, meanwhile.
    let mut probes = Vec::new();
    let mut scrapes = Vec::new();
    while started.elapsed() < FLOOD_FOR {
        let t = Instant::now();
        let answer =
            tokio::time::timeout(PROBE_TIMEOUT, request(addr, LOOPBACK, "/healthz", &[])).await;
        probes.push((answer.ok().flatten().map(|a| a.0), t.elapsed()));
        scrapes.push(scrape().await);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut statuses = std::collections::BTreeMap::new();
    for f in flood {
        for s in f.await.unwrap() {
            *statuses.entry(s).or_insert(0u64) += 1;
        }
    }
    let reviews = api.token_reviews() - reviews_before;
    let mut latencies: Vec<Duration> = probes.iter().map(|p| p.1).collect();
    latencies.sort();
    eprintln!(
        "flood: {} requests with random tokens from {FLOOD_SOURCES} addresses over {FLOOD_FOR:?} ({FLOODERS} at once), answers {statuses:?}; \
         {reviews} token reviews made; /healthz {} probes, {} answered 200, median {:?}, max {:?}; \
         scrapes {} answered {}, 200 {}",
        sent.load(Relaxed),
        probes.len(),
        probes.iter().filter(|p| p.0 == Some(200)).count(),
        latencies[latencies.len() / 2],
        latencies.last().unwrap(),
        scrapes.len(),
        scrapes.iter().flatten().count(),
        scrapes.iter().filter(|s| **s == Some(200)).count(),
    );
    assert!(
        probes.iter().all(|p| p.0 == Some(200)),
        "every /healthz answered within {PROBE_TIMEOUT:?}: {probes:?}"
    );
    // The scraper's connections compete with the flood's for the 128 slots (Prometheus
    // tries again at its next interval); once in, its cached allow is served.
    let answered: Vec<_> = scrapes.iter().flatten().collect();
    assert!(
        answered.iter().all(|s| **s == 200) && answered.len() * 2 >= scrapes.len(),
        "the scraper was served: {scrapes:?}"
    );
    // Each source's budget (20, then 2/s) bounds the reviews the flood caused.
    let budget = ReviewBudget::default();
    let bound = f64::from(FLOOD_SOURCES)
        * (budget.burst + budget.per_second * started.elapsed().as_secs_f64());
    assert!(
        (reviews as f64) <= bound,
        "{reviews} reviews, bound {bound}"
    );
    assert!(
        statuses.get(&Some(429)).is_some_and(|n| *n > 0),
        "{statuses:?}"
    );

    // The API server goes down after the flood: the scraper's allow is still cached.
    api.down();
    tokio::time::sleep(FRESH + Duration::from_millis(200)).await;
    assert_eq!(
        scrape().await,
        Some(200),
        "the cached allow outlived the flood"
    );
}
