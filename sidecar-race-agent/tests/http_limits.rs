//! The agent's HTTP server against slow and unusual clients: a client sending one
//! header byte per second is disconnected and does not hold shutdown up; request
//! bodies and bad limits are refused; `/api/v1/incidents` can be left out of the
//! main address (`--api-listen`); a panic under the pipeline lock poisons nothing.

mod http_kit;

use std::time::{Duration, Instant};

use http_kit::{Server, get, get_streamed, pipeline_with_races};
use sidecar_race_agent::http::{ApiListen, Limits};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// Scheduling slack on a loaded 2-CPU machine; the outcome is "cut off", not a speed.
const MARGIN: Duration = Duration::from_secs(5);

fn limits() -> Limits {
    Limits {
        header_read_timeout: HEADER_TIMEOUT,
        request_timeout: Duration::from_secs(3),
        ..Limits::default()
    }
}

/// Sends a request's header one byte per second until the server closes the
/// connection; returns when it did, or None if it never did within `give_up`.
async fn slowloris(addr: std::net::SocketAddr, give_up: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nHost: agent\r\nX-Slow: ";
    let mut buf = [0u8; 256];
    for &b in request.iter().chain(std::iter::repeat(&b'a')) {
        if started.elapsed() > give_up {
            return None;
        }
        if s.write_all(&[b]).await.is_err() {
            return Some(started.elapsed()); // closed under us
        }
        // Wait a second for the next byte, noticing a close meanwhile.
        match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => return Some(started.elapsed()), // an error answer, then close
            Err(_) => {}
        }
    }
    None
}

#[tokio::test]
async fn a_client_sending_one_header_byte_per_second_is_cut_off() {
    let server = Server::start(pipeline_with_races(1), limits(), true).await;
    let cut = slowloris(
        server.addr,
        HEADER_TIMEOUT + MARGIN + Duration::from_secs(10),
    )
    .await;
    let cut = cut.expect("the server never closed the slow connection");
    assert!(
        cut <= HEADER_TIMEOUT + MARGIN,
        "closed after {cut:?}, header-read timeout {HEADER_TIMEOUT:?}"
    );
    // The server still serves others.
    assert_eq!(get(server.addr, "/healthz").await.0, 200);
    server.stop();
    server.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_slow_client_does_not_hold_shutdown_up() {
    let server = Server::start(pipeline_with_races(1), limits(), true).await;
    let addr = server.addr;
    let slow = tokio::spawn(async move { slowloris(addr, Duration::from_secs(120)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.stop();
    // Shutdown completes: the slow connection is closed with the rest, within the
    // request timeout, not when the client gives up (two minutes).
    let stopped = tokio::time::timeout(Duration::from_secs(60), server.task)
        .await
        .expect("shutdown was held up by a slow client");
    stopped.unwrap().unwrap();
    assert!(
        slow.await.unwrap().is_some(),
        "the slow client's connection was closed"
    );
}

#[tokio::test]
async fn request_bodies_and_bad_limits_are_refused() {
    let server = Server::start(pipeline_with_races(3), limits(), true).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(
        b"GET /api/v1/incidents HTTP/1.1\r\nHost: agent\r\nConnection: close\r\nContent-Length: 1000000\r\n\r\n",
    )
    .await
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    for bad in ["0", "10001"] {
        let (status, body) = get(server.addr, &format!("/api/v1/incidents?limit={bad}")).await;
        assert_eq!(status, 400, "limit={bad}: {body}");
        assert!(body.contains("limit must be 1 to 10000"), "{body}");
    }
    let (status, body) = get(server.addr, "/api/v1/incidents?limit=2").await;
    assert_eq!(status, 200);
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["incidents"].as_array().unwrap().len(), 2);
    assert_eq!(page["truncated"], true, "3 incidents, 2 shown");
    // Filters apply before the limit: the newest 2 that match.
    let (_, body) = get(server.addr, "/api/v1/incidents?phase=startup&limit=5").await;
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["incidents"].as_array().unwrap().len(), 3);
    assert_eq!(page["truncated"], false);
    let (_, body) = get(server.addr, "/api/v1/incidents?phase=drain").await;
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["incidents"], serde_json::json!([]));
    server.stop();
}

/// A task that panics while holding the pipeline lock (a bug in a request handler)
/// leaves the lock usable: the next request is answered and the daemon goes on.
#[tokio::test]
async fn a_panic_while_holding_the_pipeline_lock_does_not_break_the_next_user() {
    let server = Server::start(pipeline_with_races(2), limits(), true).await;
    let pipeline = server.pipeline.clone();
    let panicked = std::thread::spawn(move || {
        let _held = pipeline.lock();
        panic!("a handler bug while holding the pipeline");
    })
    .join();
    assert!(
        panicked.is_err(),
        "the thread panicked while holding the lock"
    );
    let (status, body) = get(server.addr, "/api/v1/incidents").await;
    assert_eq!(status, 200, "{body}");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["incidents"].as_array().unwrap().len(), 2);
    server.stop();
}

#[tokio::test]
async fn the_incidents_api_can_leave_the_main_address() {
    let server = Server::start(pipeline_with_races(2), limits(), false).await;
    assert_eq!(get(server.addr, "/api/v1/incidents").await.0, 404);
    assert_eq!(get(server.addr, "/healthz").await.0, 200);
    let metrics = get_streamed(server.addr, "/metrics", "sidecar_race_build_info").await;
    assert_eq!(metrics.status, 200, "Prometheus still scrapes");
    assert!(metrics.needles > 0);
    server.stop();

    assert_eq!("off".parse::<ApiListen>(), Ok(ApiListen::Off));
    assert_eq!(
        "127.0.0.1:9966".parse::<ApiListen>(),
        Ok(ApiListen::On("127.0.0.1:9966".parse().unwrap()))
    );
    let err = "loopback".parse::<ApiListen>().unwrap_err();
    assert!(err.contains("neither `off` nor an address"), "{err}");
}

/// Connections that send nothing (opened and left idle, or kept alive after an answer)
/// are closed after the header-read timeout, so they cannot hold every connection slot
/// and starve the kubelet's probes.
#[tokio::test]
async fn idle_connections_do_not_keep_their_slot() {
    let server = Server::start(
        pipeline_with_races(1),
        Limits {
            max_connections: 5,
            ..limits()
        },
        true,
    )
    .await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    // A kept-alive connection after one answer is idle too.
    let mut kept = TcpStream::connect(server.addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let n = kept.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "the fifth connection has a slot and is answered"
    );
    for s in idle.iter_mut().chain(std::iter::once(&mut kept)) {
        // Read until the server closes (the kept-alive one answers first).
        loop {
            match tokio::time::timeout(HEADER_TIMEOUT + MARGIN, s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(_)) => continue,
                Err(_) => panic!(
                    "an idle connection was still open after {:?}",
                    started.elapsed()
                ),
            }
        }
    }
    // All slots are free again: the probes get in.
    assert_eq!(get(server.addr, "/healthz").await.0, 200);
    server.stop();
}

/// A client that asks for a large answer and reads none of it is disconnected after
/// the write timeout, so its answer slot goes to the next client.
#[tokio::test]
async fn a_client_that_stops_reading_gives_its_answer_slot_back() {
    const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
    let server = Server::start(
        pipeline_with_races(10_000),
        Limits {
            api_concurrency: 1,
            write_timeout: WRITE_TIMEOUT,
            // Long enough that only the write timeout can free the slot in time.
            request_timeout: Duration::from_secs(60),
            ..limits()
        },
        true,
    )
    .await;
    // ~11 MB, far more than the socket buffers take: the server's write blocks.
    let mut stalled = TcpStream::connect(server.addr).await.unwrap();
    stalled
        .write_all(b"GET /api/v1/incidents?limit=10000 HTTP/1.1\r\nHost: agent\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let next = tokio::time::timeout(
        Duration::from_secs(45),
        get(server.addr, "/api/v1/incidents?limit=1"),
    )
    .await
    .expect("the stalled client kept the only answer slot");
    assert_eq!(next.0, 200, "{}", next.1);
    server.stop();
}

/// Reads an answer slowly but steadily (64 KiB every half second: the server's writes
/// never stall for its write timeout) until the connection ends: how much it read, or
/// None if it did not end within `give_up`.
async fn slow_reader(addr: std::net::SocketAddr, path: &str, give_up: Duration) -> Option<usize> {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: agent\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut read = 0;
    while started.elapsed() < give_up {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return Some(read),
            Ok(n) => {
                read += n;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    None
}

/// Two clients reading the largest answer slowly (but never stalling the server's
/// writes) cannot hold both answer slots: each answer is cut off at its deadline (the
/// request timeout, from the request), and the next client gets a slot in time.
#[tokio::test]
async fn slow_readers_are_cut_off_at_the_answer_deadline() {
    // Long enough for a debug build to render both answers of 10,000 incidents.
    const DEADLINE: Duration = Duration::from_secs(20);
    let server = Server::start(
        pipeline_with_races(10_000),
        Limits {
            request_timeout: DEADLINE,
            ..limits()
        },
        true,
    )
    .await;
    let path = "/api/v1/incidents?limit=10000";
    let whole = get_streamed(server.addr, path, "\"pod_uid\":").await.bytes;
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let addr = server.addr;
            tokio::spawn(async move { slow_reader(addr, path, Duration::from_secs(150)).await })
        })
        .collect();
    // Both slots are taken; this client's deadline is 10 s after the readers'. Read at
    // 128 KiB/s their answers (11 MB) would take 80 s: only their deadline frees a slot.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (status, body) = get(server.addr, "/api/v1/incidents?limit=1").await;
    assert_eq!(
        status, 200,
        "a slot came free within the next client's deadline: {body}"
    );
    for r in readers {
        let read = r
            .await
            .unwrap()
            .expect("a slow reader's answer never ended");
        assert!(
            read > 10_000 && read < whole,
            "cut off while reading its answer: {read} of {whole} bytes"
        );
    }
    server.stop();
}
