//! Many clients asking for a full incident history at once: the agent's memory stays
//! bounded (answers are built a few at a time and sent in pieces) and its liveness
//! check keeps answering. Alone in its test binary so that the process's resident
//! set is the server's (and these clients', which keep nothing).

mod http_kit;

use http_kit::{Server, get, get_streamed, pipeline_with_races, reset_peak_rss, rss};
use sidecar_race_agent::http::Limits;

const INCIDENTS: u64 = 10_000;
const CLIENTS: usize = 50;
/// How much the peak resident set may grow over the idle server's: about 3x what was
/// measured (39 MiB, debug build). One answer of 10,000 incidents is ~11 MB of JSON
/// plus its views; the server builds at most `api_concurrency` (2) at once and holds
/// an answer's slot until it is sent. Building all 50 at once takes ~1 GB.
const PEAK_GROWTH_BOUND: u64 = 128 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_clients_reading_ten_thousand_incidents_keep_memory_bounded() {
    // A debug build serializes ~10x slower than a release one: requests queued for an
    // answer slot may wait longer than the default 30 s; that is not what is measured.
    let limits = Limits {
        request_timeout: std::time::Duration::from_secs(600),
        ..Limits::default()
    };
    let server = Server::start(pipeline_with_races(INCIDENTS), limits, true).await;
    let path = format!("/api/v1/incidents?limit={INCIDENTS}");
    // Warm the allocator and check the answer is what the clients will count.
    let one = get_streamed(server.addr, &path, "\"pod_uid\":").await;
    assert_eq!(one.status, 200);
    assert_eq!(one.needles, INCIDENTS as usize, "every incident is served");
    assert!(one.tail.ends_with("\"truncated\":false}"), "{}", one.tail);

    reset_peak_rss();
    let (before, _) = rss();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (addr, path) = (server.addr, path.clone());
            tokio::spawn(async move { get_streamed(addr, &path, "\"pod_uid\":").await })
        })
        .collect();
    // Liveness is answered while the clients are served.
    let (health, body) = get(server.addr, "/healthz").await;
    assert_eq!((health, body.as_str()), (200, "ok\n"));
    for c in clients {
        let answer = c.await.unwrap();
        assert_eq!(answer.status, 200);
        assert_eq!(answer.needles, INCIDENTS as usize);
        assert_eq!(answer.bytes, one.bytes, "every client got the whole answer");
    }
    let (_, peak) = rss();
    let growth = peak.saturating_sub(before);
    assert!(
        growth < PEAK_GROWTH_BOUND,
        "peak resident set grew by {} MiB serving {CLIENTS} clients (bound {} MiB)",
        growth >> 20,
        PEAK_GROWTH_BOUND >> 20
    );
    eprintln!("peak RSS growth: {} MiB", growth >> 20);
    server.stop();
    server.task.await.unwrap().unwrap();
}
