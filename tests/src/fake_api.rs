//! A fake Kubernetes API server at the HTTP level for the agent's `--pods-from api`:
//! `GET /api/v1/pods` lists and watches (chunked JSON lines, real Pod JSON), and can be
//! told to fail the ways a real one does: down (nothing listens, or connections cut),
//! slow, 500, and 410 Gone on watches. For `--auth=kubernetes` it answers TokenReviews
//! (tokens it was given, naming a user) and SubjectAccessReviews: `get` on the
//! `sidecar-race.io` resources it was told the user may read in the agent's namespace
//! ([`AGENT_NAMESPACE`], its kubeconfig context's), and, as Kubernetes' default
//! `system:discovery` role does, `get` on every non-resource URL under `/api/` for
//! every authenticated user. The agent talks to it through kube's real client, as it
//! would to a cluster.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Write},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

/// The namespace of the fake's kubeconfig context: the agent's, for its reviews.
pub const AGENT_NAMESPACE: &str = "sidecar-race";

/// How the fake answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Healthy,
    /// Every request: 500 with a Status.
    Error500,
    /// Lists and watches answer only after this long.
    Slow(Duration),
    /// Lists work; every watch ends at once with 410 Gone (its resourceVersion expired).
    WatchGone,
}

#[derive(Default)]
struct Store {
    /// (resourceVersion, pod)
    pods: Vec<(u64, Value)>,
    rv: u64,
    /// Query strings of the requests, in order.
    requests: Vec<HashMap<String, String>>,
    /// Valid bearer tokens and the users they name.
    tokens: HashMap<String, String>,
    /// (user, `sidecar-race.io` resource) allowed `get` in [`AGENT_NAMESPACE`].
    allowed: Vec<(String, String)>,
    /// TokenReviews answered.
    token_reviews: usize,
}

pub struct FakeApi {
    pub port: u16,
    mode: Arc<Mutex<Mode>>,
    store: Arc<Mutex<Store>>,
    /// Cleared to take the server down: the listener closes, watches are cut.
    up: Arc<AtomicBool>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl FakeApi {
    /// A fake on `port` that is down (nothing listens) until [`FakeApi::up`].
    pub fn down_on(port: u16) -> Self {
        Self {
            port,
            mode: Arc::new(Mutex::new(Mode::Healthy)),
            store: Arc::default(),
            up: Arc::new(AtomicBool::new(false)),
            acceptor: None,
        }
    }

    /// A fake on a free port, up, answering as `mode`.
    pub fn start(mode: Mode) -> Self {
        let mut api = Self::down_on(sidecar_race_kit::http::free_port());
        api.set_mode(mode);
        api.up();
        api
    }

    /// Starts listening (again) on its port.
    pub fn up(&mut self) {
        self.down();
        let listener = TcpListener::bind(("127.0.0.1", self.port)).expect("bind the fake API");
        listener.set_nonblocking(true).unwrap();
        self.up.store(true, Ordering::SeqCst);
        let (up, mode, store) = (self.up.clone(), self.mode.clone(), self.store.clone());
        self.acceptor = Some(thread::spawn(move || {
            while up.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (up, mode, store) = (up.clone(), mode.clone(), store.clone());
                        thread::spawn(move || serve(conn, &up, &mode, &store));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        }));
    }

    /// Takes it down: the port stops listening and open watches are cut.
    pub fn down(&mut self) {
        self.up.store(false, Ordering::SeqCst);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Adds (or replaces, by UID) a pod; watches see it as ADDED.
    pub fn add_pod(&self, pod: Value) {
        let mut s = self.store.lock().unwrap();
        s.rv += 1;
        let rv = s.rv;
        let uid = pod["metadata"]["uid"].clone();
        s.pods.retain(|(_, p)| p["metadata"]["uid"] != uid);
        s.pods.push((rv, pod));
    }

    /// A token the TokenReview authenticates as `user`.
    pub fn add_token(&self, token: &str, user: &str) {
        let mut s = self.store.lock().unwrap();
        s.tokens.insert(token.to_string(), user.to_string());
    }

    /// The token is no longer valid.
    pub fn revoke_token(&self, token: &str) {
        self.store.lock().unwrap().tokens.remove(token);
    }

    /// `user` may `get` the `sidecar-race.io` `resource` (`incidents`, `metrics`) in
    /// [`AGENT_NAMESPACE`].
    pub fn allow(&self, user: &str, resource: &str) {
        let mut s = self.store.lock().unwrap();
        s.allowed.push((user.to_string(), resource.to_string()));
    }

    /// TokenReviews answered so far.
    pub fn token_reviews(&self) -> usize {
        self.store.lock().unwrap().token_reviews
    }

    /// Lists (not watches) answered so far.
    pub fn lists(&self) -> usize {
        self.store
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|q| q.get("watch").is_none())
            .count()
    }

    /// A kubeconfig whose current context is this fake (removed with the fake).
    pub fn kubeconfig(&self) -> PathBuf {
        let path = self.kubeconfig_path();
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{}\nusers:\n- name: agent\n  user:\n    token: agent-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: agent\n    namespace: {AGENT_NAMESPACE}\ncurrent-context: fake\n",
                self.port
            ),
        )
        .unwrap();
        path
    }
}

impl FakeApi {
    fn kubeconfig_path(&self) -> PathBuf {
        std::env::temp_dir().join(format!(
            "sr-fake-api-{}-{}.kubeconfig",
            std::process::id(),
            self.port
        ))
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.down();
        let _ = std::fs::remove_file(self.kubeconfig_path());
    }
}

fn query(target: &str) -> HashMap<String, String> {
    target
        .split_once('?')
        .map(|(_, q)| q)
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn serve(conn: TcpStream, up: &AtomicBool, mode: &Mutex<Mode>, store: &Mutex<Store>) {
    let _ = conn.set_nonblocking(false);
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    if std::io::Read::read_exact(&mut reader, &mut body).is_err() {
        return;
    }
    let target = request_line.split_whitespace().nth(1).unwrap_or("/");
    let q = query(target);
    store.lock().unwrap().requests.push(q.clone());
    let mut conn = conn;
    let current = *mode.lock().unwrap();
    if let Mode::Slow(d) = current {
        thread::sleep(d);
    }
    if current == Mode::Error500 {
        return respond(
            &mut conn,
            "500 Internal Server Error",
            &status_json(500, "InternalError", "etcdserver: request timed out"),
        );
    }
    if let Some(answer) = review(target, &body, store) {
        return respond(&mut conn, "201 Created", &answer.to_string());
    }
    if !target.starts_with("/api/v1/pods") {
        return respond(
            &mut conn,
            "404 Not Found",
            &status_json(404, "NotFound", "no such path"),
        );
    }
    let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    if !watch {
        let s = store.lock().unwrap();
        let list = json!({"apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": s.rv.to_string()},
            "items": s.pods.iter().map(|(rv, p)| with_rv(p, *rv)).collect::<Vec<_>>()});
        drop(s);
        return respond(&mut conn, "200 OK", &list.to_string());
    }
    let _ = conn.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
    );
    if current == Mode::WatchGone {
        let gone = json!({"type": "ERROR", "object": status_json_value(410, "Expired", "too old resource version")});
        let _ = chunk(&mut conn, &format!("{gone}\n"));
        let _ = conn.write_all(b"0\r\n\r\n");
        return;
    }
    let mut since: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if !up.load(Ordering::SeqCst) || *mode.lock().unwrap() != current {
            // Cut: no final chunk, as when a server or its network goes away.
            let _ = conn.shutdown(std::net::Shutdown::Both);
            return;
        }
        let new: Vec<(u64, Value)> = store
            .lock()
            .unwrap()
            .pods
            .iter()
            .filter(|(rv, _)| *rv > since)
            .cloned()
            .collect();
        for (rv, pod) in new {
            let event = json!({"type": "ADDED", "object": with_rv(&pod, rv)});
            if chunk(&mut conn, &format!("{event}\n")).is_err() {
                return;
            }
            since = since.max(rv);
        }
        thread::sleep(Duration::from_millis(100));
    }
    let _ = conn.write_all(b"0\r\n\r\n");
}

/// The answer to a TokenReview or SubjectAccessReview POSTed to `target`, if it is one.
fn review(target: &str, body: &[u8], store: &Mutex<Store>) -> Option<Value> {
    let mut review: Value = serde_json::from_slice(body).ok()?;
    let mut s = store.lock().unwrap();
    if target.starts_with("/apis/authentication.k8s.io/v1/tokenreviews") {
        s.token_reviews += 1;
        let token = review["spec"]["token"].as_str().unwrap_or("");
        review["status"] = match s.tokens.get(token) {
            Some(user) => json!({"authenticated": true,
                "user": {"username": user, "uid": format!("uid-{user}"), "groups": ["system:authenticated"]}}),
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        };
        return Some(review);
    }
    if target.starts_with("/apis/authorization.k8s.io/v1/subjectaccessreviews") {
        let spec = &review["spec"];
        let user = spec["user"].as_str();
        let (url, res) = (&spec["nonResourceAttributes"], &spec["resourceAttributes"]);
        // system:discovery: get on /api/* for everyone authenticated.
        let discovery = url["verb"] == "get"
            && url["path"].as_str().is_some_and(|p| p.starts_with("/api/"))
            && spec["groups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|g| g == "system:authenticated"));
        let granted = res["verb"] == "get"
            && res["group"] == "sidecar-race.io"
            && res["namespace"] == AGENT_NAMESPACE
            && res["subresource"].is_null()
            && s.allowed
                .iter()
                .any(|(u, resource)| user == Some(u) && res["resource"].as_str() == Some(resource));
        let allowed = discovery || granted;
        review["status"] = json!({"allowed": allowed});
        return Some(review);
    }
    None
}

fn with_rv(pod: &Value, rv: u64) -> Value {
    let mut p = pod.clone();
    p["metadata"]["resourceVersion"] = json!(rv.to_string());
    p
}

fn chunk(conn: &mut TcpStream, data: &str) -> std::io::Result<()> {
    write!(conn, "{:x}\r\n{data}\r\n", data.len())?;
    conn.flush()
}

fn status_json_value(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn status_json(code: u16, reason: &str, message: &str) -> String {
    status_json_value(code, reason, message).to_string()
}

fn respond(conn: &mut TcpStream, status: &str, body: &str) {
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.flush();
}
