//! The agent's HTTP server on a loopback port with a pipeline holding real incidents
//! (made from kernel events as the reader decodes them), and a raw HTTP/1.1 client
//! that streams answers instead of buffering them.

#![allow(dead_code)]

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    time::Duration,
};

use parking_lot::Mutex;
use sidecar_race_agent::{
    clock,
    detect::DetectorConfig,
    http::{self, HttpState, Limits},
    ingest::events::{CgroupFact, KernelEvent, Sender, SocketFact},
    ingest::stream::StreamStats,
    inventory::cgroups::CgroupIndex,
    inventory::{Inventory, store::PodStore},
    pipeline::Pipeline,
    sinks::metrics::Metrics,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::Notify,
};

const MS: u64 = 1_000_000;

fn uid(i: u64) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", i, i)
}

fn created(ts: u64, cgroup_id: u64, path: String) -> KernelEvent {
    KernelEvent::CgroupCreated(CgroupFact {
        ts_boot_ns: ts,
        cgroup_id,
        level: 4,
        path,
        truncated: false,
        path_unread: false,
    })
}

fn socket(ts: u64, cgroup_id: u64, src: &str, dst: Option<&str>) -> SocketFact {
    SocketFact {
        ts_boot_ns: ts,
        owner: Sender {
            cgroup_id,
            pid: 7,
            tgid: 7,
            comm: "app".into(),
        },
        ipv6: false,
        src: src.parse().unwrap(),
        dst: dst.map(|d| d.parse().unwrap()),
        local_dst: None,
        start_boot_ns: 0,
    }
}

/// A pipeline with `n` startup races, one per pod: the app is refused on the
/// sidecar's port 15001, then the sidecar listens.
pub fn pipeline_with_races(n: u64) -> Pipeline {
    let dir = std::env::temp_dir().join(format!("sr-http-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inventory = Inventory::new(
        CgroupIndex::new(&dir, u64::MAX),
        PodStore::new(Duration::from_secs(600)),
        false,
    );
    let config = DetectorConfig {
        history: n as usize,
        metadata_wait_ns: 0,
        ..DetectorConfig::default()
    };
    let mut p = Pipeline::new(inventory, config, 0);
    for i in 0..n {
        let ts = i * 10 * MS;
        let pod = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
            uid(i).replace('-', "_")
        );
        let (app, sidecar) = (format!("{:064x}", 2 * i), format!("{:064x}", 2 * i + 1));
        let cg = 1_000 + 3 * i;
        for ev in [
            created(ts, cg, pod.clone()),
            created(ts + 1, cg + 1, format!("{pod}/cri-containerd-{app}.scope")),
            created(
                ts + 2,
                cg + 2,
                format!("{pod}/cri-containerd-{sidecar}.scope"),
            ),
            KernelEvent::Refused(socket(
                ts + MS,
                cg + 1,
                "127.0.0.1:40000",
                Some("127.0.0.1:15001"),
            )),
            KernelEvent::Listen(socket(ts + 2 * MS, cg + 2, "127.0.0.1:15001", None)),
        ] {
            p.kernel_event(&ev);
        }
        if i % 256 == 255 {
            p.tick(ts + 3 * MS);
        }
    }
    p.tick(n * 10 * MS + 1_000 * MS);
    p
}

pub struct Server {
    pub addr: SocketAddr,
    pub pipeline: Arc<Mutex<Pipeline>>,
    stop: Arc<Notify>,
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Serves `router` of a state with `pipeline`, within `limits`; the reader's
    /// heartbeat is kept fresh so `/healthz` says what the server does, not the reader.
    pub async fn start(pipeline: Pipeline, limits: Limits, with_api: bool) -> Self {
        let metrics = Metrics::new(false, "0.1.0", "test");
        Self::start_with(pipeline, metrics, limits, with_api).await
    }

    /// As `start`, with these metrics.
    pub async fn start_with(
        pipeline: Pipeline,
        metrics: Metrics,
        limits: Limits,
        with_api: bool,
    ) -> Self {
        let stream = Arc::new(StreamStats::default());
        let beat = stream.clone();
        tokio::spawn(async move {
            loop {
                beat.last_poll_boot_ns.store(clock::boot_now_ns(), Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        let pipeline = Arc::new(Mutex::new(pipeline));
        let state = HttpState {
            ready: Arc::new(AtomicBool::new(true)),
            degraded: None,
            stream,
            pipeline: pipeline.clone(),
            metrics: Arc::new(Mutex::new(metrics)),
            auth: None,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(Notify::new());
        let notified = stop.clone();
        let task = tokio::spawn(http::server::serve(
            listener,
            http::router(state, limits, with_api),
            limits,
            None,
            async move { notified.notified().await },
        ));
        Self {
            addr,
            pipeline,
            stop,
            task,
        }
    }

    pub fn stop(&self) {
        self.stop.notify_one();
    }
}

/// An answer read as a stream: status, size, how often `needle` occurred, its tail.
pub struct Streamed {
    pub status: u16,
    pub bytes: usize,
    pub needles: usize,
    pub tail: String,
}

/// GETs `path` and reads the answer without keeping it, counting `needle`.
pub async fn get_streamed(addr: SocketAddr, path: &str, needle: &str) -> Streamed {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 16 * 1024];
    // The last bytes read: a needle split across reads, and the answer's tail.
    let mut window: Vec<u8> = Vec::new();
    let mut head = Vec::new();
    let (mut bytes, mut needles) = (0, 0);
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        if head.len() < 64 {
            head.extend_from_slice(&buf[..n.min(64)]);
        }
        bytes += n;
        let carried = window.len();
        window.extend_from_slice(&buf[..n]);
        // Needles wholly inside the carried part were counted already.
        let from = carried.saturating_sub(needle.len() - 1);
        needles += count(&window[from..], needle.as_bytes());
        let keep = 64.min(window.len());
        window.drain(..window.len() - keep);
    }
    let status = String::from_utf8_lossy(&head)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Streamed {
        status,
        bytes,
        needles,
        tail: String::from_utf8_lossy(&window).into_owned(),
    }
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// A small GET, read whole: (status, body).
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// This process's resident set and its peak, in bytes (/proc/self/status).
pub fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets the peak (VmHWM) to the current resident set.
pub fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}
