//! The pod sources against fake servers at the HTTP level, through kube's real client
//! stack: a fake API server scripted with list/watch responses (bookmarks, a dropped
//! connection, 410 Gone, a malformed object), a local HTTPS "kubelet" serving real
//! `/pods` JSON, and a pods file that changes. No real Kubernetes API server can run
//! here; these fakes speak its HTTP protocol with real Pod JSON.

use std::{
    collections::{HashMap, VecDeque},
    convert::Infallible,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::{Query, State},
    response::Response,
    routing::get,
};
use futures::StreamExt;
use serde_json::{Value, json};
use sidecar_race_agent::inventory::sources::{
    Pacer, PodUpdate, SourceOptions, SourceStats, api, file, kubelet,
};
use tokio::sync::mpsc;

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn pod(name: &str, uid: &str, rv: &str) -> Value {
    let mut p = fixture("classic-deployment.json");
    p["metadata"]["name"] = json!(name);
    p["metadata"]["uid"] = json!(uid);
    p["metadata"]["resourceVersion"] = json!(rv);
    p
}

fn pod_list(rv: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": rv}, "items": items})
}

fn uids(pods: &[sidecar_race_agent::pods::pod_info::PodInfo]) -> Vec<&str> {
    let mut u: Vec<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
    u.sort();
    u
}

async fn next(rx: &mut mpsc::Receiver<PodUpdate>) -> PodUpdate {
    tokio::time::timeout(Duration::from_secs(15), rx.recv())
        .await
        .expect("an update within 15 s")
        .expect("source still running")
}

/// What a watch response does after its events.
enum End {
    Close,
    StayOpen,
}

#[derive(Default)]
struct Script {
    lists: VecDeque<Value>,
    watches: VecDeque<(Vec<Value>, End)>,
    requests: Vec<HashMap<String, String>>,
}

type Shared = Arc<Mutex<Script>>;

async fn pods(State(s): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    let mut script = s.lock().unwrap();
    script.requests.push(q.clone());
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let (events, end) = script
            .watches
            .pop_front()
            .unwrap_or((vec![], End::StayOpen));
        let lines = futures::stream::iter(
            events
                .into_iter()
                .map(|e| Ok::<_, Infallible>(format!("{e}\n"))),
        );
        let body = match end {
            End::Close => Body::from_stream(lines),
            End::StayOpen => Body::from_stream(lines.chain(futures::stream::pending())),
        };
        return Response::builder()
            .header("content-type", "application/json")
            .body(body)
            .unwrap();
    }
    let list = script
        .lists
        .pop_front()
        .unwrap_or_else(|| pod_list("1", vec![]));
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(list.to_string()))
        .unwrap()
}

async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

fn client_for(addr: SocketAddr) -> kube::Client {
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn api_source_lists_watches_resumes_relists_and_skips_malformed_pods() {
    let script: Shared = Arc::default();
    {
        let mut s = script.lock().unwrap();
        let mut malformed = pod("broken", "00000000-0000-4000-8000-00000000000b", "99");
        malformed["spec"] = json!("not an object");
        s.lists
            .push_back(pod_list("100", vec![pod("a", "a", "90"), malformed]));
        s.lists.push_back(pod_list(
            "200",
            vec![pod("b", "b", "101"), pod("c", "c", "150")],
        ));
        // 1: an added pod, a bookmark, then the connection drops.
        s.watches.push_back((
            vec![
                json!({"type": "ADDED", "object": pod("b", "b", "101")}),
                json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "105"}}}),
            ],
            End::Close,
        ));
        // 2: resumed from the bookmark, but that version is gone: 410 → relist.
        s.watches.push_back((
            vec![json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": "too old resource version: 105 (200)", "reason": "Expired", "code": 410}})],
            End::Close,
        ));
        // 3: after the relist, a deletion, and the watch stays open.
        s.watches.push_back((
            vec![json!({"type": "DELETED", "object": pod("b", "b", "201")})],
            End::StayOpen,
        ));
    }
    let addr = serve(
        Router::new()
            .route("/api/v1/pods", get(pods))
            .with_state(script.clone()),
    )
    .await;
    let (tx, mut rx) = mpsc::channel(16);
    let stats = Arc::new(SourceStats::default());
    tokio::spawn(api::watch(
        client_for(addr),
        Some("node-a".into()),
        tx,
        stats.clone(),
    ));

    let PodUpdate::Replace {
        pods: first,
        unparsable,
    } = next(&mut rx).await
    else {
        panic!("first a full list")
    };
    assert_eq!(uids(&first), ["a"], "the malformed pod is skipped");
    assert_eq!(
        unparsable,
        ["00000000-0000-4000-8000-00000000000b"],
        "and keeps its last good version"
    );
    assert_eq!(stats.malformed_objects(), 1);
    let PodUpdate::Apply(b) = next(&mut rx).await else {
        panic!("then the watched ADDED pod")
    };
    assert_eq!(b.uid, "b");
    let PodUpdate::Replace { pods: relisted, .. } = next(&mut rx).await else {
        panic!("410 Gone must relist")
    };
    assert_eq!(uids(&relisted), ["b", "c"]);
    assert_eq!(next(&mut rx).await, PodUpdate::Delete { uid: "b".into() });
    assert!(
        stats.errors() >= 2,
        "malformed object and 410 are counted: {}",
        stats.errors()
    );

    let requests = script.lock().unwrap().requests.clone();
    assert!(
        requests
            .iter()
            .all(|q| q.get("fieldSelector").map(String::as_str) == Some("spec.nodeName=node-a")),
        "only this node's pods: {requests:?}"
    );
    let watches: Vec<&HashMap<String, String>> = requests
        .iter()
        .filter(|q| q.get("watch").is_some())
        .collect();
    assert_eq!(
        watches[0].get("resourceVersion").map(String::as_str),
        Some("100")
    );
    assert_eq!(
        watches[0].get("allowWatchBookmarks").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        watches[1].get("resourceVersion").map(String::as_str),
        Some("105"),
        "a dropped connection resumes from the bookmark, without a relist"
    );
    assert_eq!(
        watches[2].get("resourceVersion").map(String::as_str),
        Some("200")
    );
    let lists = requests.iter().filter(|q| q.get("watch").is_none()).count();
    assert_eq!(lists, 2, "one list at start, one after 410 Gone");
}

#[tokio::test]
async fn api_source_survives_an_unreachable_server() {
    // A port nothing listens on: connection refused, over and over.
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let stats = Arc::new(SourceStats::default());
    let task = tokio::spawn(api::watch(
        client_for(unused),
        Some("node-a".into()),
        tx,
        stats.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(stats.errors() >= 1, "failures are counted");
    assert!(rx.try_recv().is_err(), "and produce no updates");
    assert!(!task.is_finished(), "the source keeps retrying");
    task.abort();
}

/// A local HTTPS server that answers `/pods` like a kubelet, when the bearer token is right.
async fn fake_kubelet(body: String, token: &'static str) -> (SocketAddr, PathBuf) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let dir = std::env::temp_dir().join(format!(
        "sr-kubelet-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let body = body.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut stream = BufReader::new(tls);
                let mut head = Vec::new();
                loop {
                    let mut line = String::new();
                    if stream.read_line(&mut line).await.unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push(line);
                }
                let authorized = head.iter().any(|l| {
                    l.to_ascii_lowercase().trim() == format!("authorization: bearer {token}")
                });
                let path_ok = head.first().is_some_and(|l| l.starts_with("GET /pods "));
                let (status, body) = match (path_ok, authorized) {
                    (true, true) => ("200 OK", body),
                    (true, false) => (
                        "401 Unauthorized",
                        r#"{"kind":"Status","code":401}"#.to_string(),
                    ),
                    _ => ("404 Not Found", "{}".to_string()),
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.get_mut().write_all(resp.as_bytes()).await;
                let _ = stream.get_mut().shutdown().await;
            });
        }
    });
    (addr, ca)
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn kubelet_options(addr: SocketAddr, ca: PathBuf, token: &str) -> SourceOptions {
    let token_file = ca.with_file_name("token");
    std::fs::write(&token_file, token).unwrap();
    SourceOptions {
        node_ip: Some(addr.ip().to_string()),
        kubelet_port: addr.port(),
        kubelet_ca: Some(ca),
        token_file: Some(token_file),
        poll_interval: Duration::from_millis(200),
        ..SourceOptions::default()
    }
}

#[tokio::test]
async fn kubelet_source_polls_pods_over_https_with_the_token() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let list = pod_list(
        "",
        vec![fixture("classic-deployment.json"), fixture("cronjob.json")],
    );
    let (addr, ca) = fake_kubelet(list.to_string(), "sa-token").await;
    let opts = kubelet_options(addr, ca, "sa-token");
    let (tx, mut rx) = mpsc::channel(16);
    let stats = Arc::new(SourceStats::default());
    let client = kubelet::client(&opts).unwrap();
    let task = tokio::spawn(kubelet::poll(
        client,
        Pacer::every(opts.poll_interval),
        tx,
        stats.clone(),
    ));
    let PodUpdate::Replace { pods, .. } = next(&mut rx).await else {
        panic!()
    };
    let mut names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["checkout-7d4b9c8f5-x2k8q", "nightly-report-29071440-p9z7m"]
    );
    assert_eq!(stats.errors(), 0);
    task.abort();
}

#[tokio::test]
async fn kubelet_source_counts_refusals_and_keeps_polling() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (addr, ca) = fake_kubelet(pod_list("", vec![]).to_string(), "right-token").await;
    let opts = kubelet_options(addr, ca, "wrong-token");
    let (tx, mut rx) = mpsc::channel(16);
    let stats = Arc::new(SourceStats::default());
    let client = kubelet::client(&opts).unwrap();
    let task = tokio::spawn(kubelet::poll(
        client,
        Pacer::every(opts.poll_interval),
        tx,
        stats.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        stats.errors() >= 2,
        "every failed poll counts: {}",
        stats.errors()
    );
    assert!(rx.try_recv().is_err());
    assert!(!task.is_finished());
    task.abort();
    let Err(err) = kubelet::client(&SourceOptions::default()) else {
        panic!("needs a node IP")
    };
    assert!(err.contains("--node-ip"), "{err}");
}

#[tokio::test]
async fn file_source_rereads_on_change_and_keeps_the_last_good_pods() {
    let dir = std::env::temp_dir().join(format!(
        "sr-podsfile-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pods.json");
    std::fs::write(&path, pod_list("1", vec![pod("a", "a", "1")]).to_string()).unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let stats = Arc::new(SourceStats::default());
    let task = tokio::spawn(file::run(
        path.clone(),
        Pacer::every(Duration::from_millis(50)),
        tx,
        stats.clone(),
    ));
    let PodUpdate::Replace { pods: p, .. } = next(&mut rx).await else {
        panic!()
    };
    assert_eq!(uids(&p), ["a"]);

    std::fs::write(&path, "{ this is not json").unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        stats.errors(),
        1,
        "a malformed file is counted once per change"
    );
    assert!(rx.try_recv().is_err(), "and the last good pods stay");

    // kubectl get pods -o yaml, with two pods
    let yaml = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a, uid: a}\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: b, uid: b, namespace: shop}\n";
    std::fs::write(&path, yaml).unwrap();
    let PodUpdate::Replace { pods: p, .. } = next(&mut rx).await else {
        panic!()
    };
    assert_eq!(uids(&p), ["a", "b"]);
    task.abort();
    std::fs::remove_dir_all(dir).unwrap();
}

/// Log lines written through a tracing subscriber, for asserting what an operator sees.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logs_of(f: impl FnOnce()) -> String {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
}

#[tokio::test]
async fn kubelet_insecure_warns_that_the_token_goes_to_an_unverified_server() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let opts = SourceOptions {
        node_ip: Some("10.0.0.7".into()),
        kubelet_port: 10250,
        kubelet_insecure: true,
        ..SourceOptions::default()
    };
    let logs = logs_of(|| {
        kubelet::client(&opts).unwrap();
    });
    let line = logs
        .lines()
        .find(|l| l.contains("--kubelet-insecure"))
        .unwrap_or_else(|| panic!("no warning about --kubelet-insecure in {logs:?}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains("TLS certificate is NOT verified")
            && line.contains("token is sent to whatever answers at https://10.0.0.7:10250/"),
        "{line}"
    );

    let verified = SourceOptions {
        kubelet_insecure: false,
        ..opts
    };
    let logs = logs_of(|| {
        kubelet::client(&verified).unwrap();
    });
    assert!(!logs.contains("WARN"), "{logs}");
}
