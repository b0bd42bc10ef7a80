//! `/healthz` under a cheap flood (SECURITY.md, "Review floods"): idle clients hold
//! every connection slot, then about 30 connections a second send `GET /healthz ` and
//! stall (over TLS: connect and send nothing), or 600 a second send nothing. Every
//! one-second probe, once a second, must be answered 200: before, each stalled
//! connection took one of the 8 health slots for a second, and the probes found none;
//! and silent connections beyond the 256 places for reading heads closed the rest.

mod http_kit;

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use axum::{Router, routing::get};
use http_kit::{Server, pipeline_with_races};
use rustls::pki_types::{CertificateDer, ServerName};
use sidecar_race_agent::http::{
    self, Limits,
    tls::{Reloading, TlsFiles},
};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::TcpStream,
};
use tokio_rustls::TlsConnector;

/// The connections the idle clients hold: the server's cap.
const IDLE: usize = 128;
/// Stalled connections opened each second: the flood's shape, and more than the 256
/// places for connections beyond the cap can hold for the second each may take.
const STALLED_PER_SECOND: u32 = 30;
const SILENT_PER_SECOND: u32 = 600;
/// How long a probe may take, as a kubelet probe with `timeoutSeconds: 1`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What the flood's own clients counted.
#[derive(Default)]
struct Counts {
    idle_opened: AtomicUsize,
    stalled_opened: AtomicUsize,
}

/// Keeps `IDLE` connections open and silent: one that the server closes (at its
/// header timeout) is opened again at once, as a flood would.
fn hold_idle(addr: SocketAddr, counts: Arc<Counts>, done: Arc<AtomicBool>) {
    for _ in 0..IDLE {
        let (counts, done) = (counts.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Relaxed) {
                let Ok(mut s) = TcpStream::connect(addr).await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                counts.idle_opened.fetch_add(1, Relaxed);
                let mut buf = [0u8; 64];
                // Until the server closes it (or the flood ends).
                let _ = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await;
            }
        });
    }
}

/// Opens `per_second` connections a second, each sending `prefix` and nothing more,
/// kept until the server closes them (at most 3 s).
fn stall(
    addr: SocketAddr,
    (prefix, per_second): (&'static [u8], u32),
    counts: Arc<Counts>,
    done: Arc<AtomicBool>,
) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(1) / per_second);
        while !done.load(Relaxed) {
            every.tick().await;
            let counts = counts.clone();
            tokio::spawn(async move {
                let Ok(mut s) = TcpStream::connect(addr).await else {
                    return;
                };
                counts.stalled_opened.fetch_add(1, Relaxed);
                if s.write_all(prefix).await.is_err() {
                    return;
                }
                let mut buf = [0u8; 64];
                let _ = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await;
            });
        }
    });
}

/// One probe on `io`: whether `/healthz` answered 200.
async fn probe_on<S: AsyncRead + AsyncWrite + Unpin>(mut io: S) -> bool {
    let request = b"GET /healthz HTTP/1.1\r\nHost: agent\r\nUser-Agent: kube-probe/1.34\r\nAccept: */*\r\nConnection: close\r\n\r\n";
    if io.write_all(request).await.is_err() {
        return false;
    }
    let mut out = Vec::new();
    let _ = io.read_to_end(&mut out).await;
    out.starts_with(b"HTTP/1.1 200")
}

/// Runs the flood against `addr` and probes it `probes` times, once a second, with
/// `probe`; returns each probe's latency when it was answered 200 in time.
async fn flood_and_probe<F, Fut>(
    name: &str,
    addr: SocketAddr,
    stalled: (&'static [u8], u32),
    probes: usize,
    probe: F,
) -> Vec<Option<Duration>>
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let counts = Arc::new(Counts::default());
    let done = Arc::new(AtomicBool::new(false));
    hold_idle(addr, counts.clone(), done.clone());
    // The idle clients first, then the stalled ones for a second before the probes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stall(addr, stalled, counts.clone(), done.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut answered = Vec::new();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    for _ in 0..probes {
        every.tick().await;
        let started = Instant::now();
        let ok = matches!(tokio::time::timeout(PROBE_TIMEOUT, probe()).await, Ok(true));
        answered.push(ok.then(|| started.elapsed()));
    }
    done.store(true, Relaxed);
    let mut times: Vec<Duration> = answered.iter().flatten().copied().collect();
    times.sort();
    eprintln!(
        "{name}: {} of {probes} probes answered 200 within {PROBE_TIMEOUT:?} (median {:?}, max {:?}); \
         the flood opened {} idle connections (holding {IDLE}) and {} stalled ones",
        times.len(),
        times.get(times.len() / 2),
        times.last(),
        counts.idle_opened.load(Relaxed),
        counts.stalled_opened.load(Relaxed),
    );
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_through_stalled_probe_prefixes() {
    let server = Server::start(pipeline_with_races(1), Limits::default(), true).await;
    let addr = server.addr;
    let stalled = (&b"GET /healthz "[..], STALLED_PER_SECOND);
    let answered = flood_and_probe("plain HTTP", addr, stalled, 15, || async move {
        match TcpStream::connect(addr).await {
            Ok(s) => probe_on(s).await,
            Err(_) => false,
        }
    })
    .await;
    assert!(
        answered.iter().all(Option::is_some),
        "every probe is answered through the flood: {answered:?}"
    );
    server.stop();
}

/// Silent connections beyond the cap faster than its 256 places can hold them for a
/// second each: the oldest gives its place to the newest, so a probe, which sends its
/// head at once, still gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_through_more_silent_connections_than_places() {
    let server = Server::start(pipeline_with_races(1), Limits::default(), true).await;
    let addr = server.addr;
    let silent = (&b""[..], SILENT_PER_SECOND);
    let answered = flood_and_probe("silent", addr, silent, 10, || async move {
        match TcpStream::connect(addr).await {
            Ok(s) => probe_on(s).await,
            Err(_) => false,
        }
    })
    .await;
    assert!(
        answered.iter().all(Option::is_some),
        "every probe is answered through the flood: {answered:?}"
    );
    server.stop();
}

struct Files {
    dir: PathBuf,
    files: TlsFiles,
    cert: CertificateDer<'static>,
}

impl Files {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("sr-flood-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = TlsFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        std::fs::write(&files.key, made.signing_key.serialize_pem()).unwrap();
        std::fs::write(&files.cert, made.cert.pem()).unwrap();
        let cert = made.cert.der().clone();
        Self { dir, files, cert }
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_over_tls_through_idle_connections_beyond_the_cap() {
    let files = Files::new();
    let tls = Arc::new(Reloading::new(files.files.clone()).expect("the files load"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/healthz", get(|| async { "ok\n" }));
    tokio::spawn(http::server::serve(
        listener,
        app,
        Limits::default(),
        Some(tls),
        std::future::pending(),
    ));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(files.cert.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = TlsConnector::from(Arc::new(config));
    // Over TLS nothing can be read before the handshake: the stalled clients send
    // nothing at all.
    let answered = flood_and_probe("TLS", addr, (b"", STALLED_PER_SECOND), 10, || {
        let connector = connector.clone();
        async move {
            let Ok(tcp) = TcpStream::connect(addr).await else {
                return false;
            };
            let name = ServerName::try_from("127.0.0.1").unwrap();
            match connector.connect(name, tcp).await {
                Ok(tls) => probe_on(tls).await,
                Err(_) => false,
            }
        }
    })
    .await;
    assert!(
        answered.iter().all(Option::is_some),
        "every probe is answered through the flood: {answered:?}"
    );
}
