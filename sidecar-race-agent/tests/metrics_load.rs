//! 128 scrapers at once near the series cap, each slow to read its answer: the agent
//! renders `/metrics` once for the scrapes of the same second, sends that one body to
//! a few scrapers at a time, and its memory stays bounded. Alone in its test binary so
//! that the process's resident set is the server's.

mod http_kit;

use std::time::{Duration, Instant};

use http_kit::{Server, get, pipeline_with_races, reset_peak_rss, rss};
use sidecar_race_agent::{
    http::Limits,
    inventory::Attribution,
    pipeline::outcome::Outcome,
    pods::pod_info::Workload,
    sinks::metrics::{DEFAULT_MAX_SERIES, Metrics},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const SCRAPERS: usize = 128;
/// How much the peak resident set may grow over the idle server's while the scrapers
/// are served: measured 4 MiB (debug build). One body is ~1.4 MB here (the classic
/// format); a body per scraper, held while it is slow to read, is ~180 MB.
const PEAK_GROWTH_BOUND: u64 = 32 << 20;

/// Metrics at the series cap: a pod start of each of 10,000 workloads, with pod names.
fn metrics_near_the_cap() -> Metrics {
    let mut m = Metrics::new(true, "0.1.0", "test");
    let now = Instant::now();
    let outcomes: Vec<Outcome> = (0..DEFAULT_MAX_SERIES)
        .map(|i| Outcome::PodStarted {
            pod_uid: format!("uid-{i}"),
            start: 0,
            who: Attribution {
                namespace: Some("batch-reports".into()),
                workload: Some(Workload {
                    kind: "Job".into(),
                    name: format!("nightly-report-{i:05}"),
                }),
                pod: Some(format!("nightly-report-{i:05}-x7k2p")),
                ..Attribution::default()
            },
            // Jobs' pods carry no template label.
            template: None,
        })
        .collect();
    m.consume(&outcomes, now);
    m
}

/// Sends a scrape, waits `pause` before reading (a slow or busy scraper), then reads
/// the whole answer: (status, bytes).
async fn slow_scrape(addr: std::net::SocketAddr, pause: Duration) -> (u16, usize) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(pause).await;
    // Read and let go: these clients live in the server's process.
    let mut buf = vec![0u8; 16 * 1024];
    let (mut head, mut bytes) = (Vec::new(), 0);
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        if head.len() < 32 {
            head.extend_from_slice(&buf[..n.min(32)]);
        }
        bytes += n;
    }
    let status = String::from_utf8_lossy(&head)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scrapers_near_the_series_cap_keep_memory_bounded() {
    let limits = Limits {
        // A debug build renders slowly; queued scrapes must not time out here.
        request_timeout: Duration::from_secs(120),
        // Every scraper gets a connection (the default is 128).
        max_connections: SCRAPERS + 8,
        ..Limits::default()
    };
    let server =
        Server::start_with(pipeline_with_races(1), metrics_near_the_cap(), limits, true).await;
    let (status, one) = get(server.addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        one.contains(r#"workload="nightly-report-09999""#),
        "the last workload has its series"
    );
    assert!(!one.contains("overflow\""), "near the cap, not over it");
    // Past the reuse window of the body rendered above.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    reset_peak_rss();
    let (before, _) = rss();
    let scrapers: Vec<_> = (0..SCRAPERS)
        .map(|_| tokio::spawn(slow_scrape(server.addr, Duration::from_secs(1))))
        .collect();
    let mut sizes = Vec::new();
    for s in scrapers {
        let (status, bytes) = s.await.unwrap();
        assert_eq!(status, 200);
        sizes.push(bytes);
    }
    let (_, peak) = rss();
    let growth = peak.saturating_sub(before);
    assert!(
        growth < PEAK_GROWTH_BOUND,
        "peak resident set grew by {} MiB serving {SCRAPERS} scrapers (bound {} MiB)",
        growth >> 20,
        PEAK_GROWTH_BOUND >> 20
    );
    assert!(
        sizes.iter().all(|&n| n > one.len()),
        "every scraper got a whole body"
    );
    eprintln!(
        "body {} KiB, peak RSS growth {} MiB",
        one.len() >> 10,
        growth >> 20
    );
    assert_eq!(get(server.addr, "/healthz").await.0, 200);
    server.stop();
    server.task.await.unwrap().unwrap();
}
