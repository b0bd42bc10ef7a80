//! The agent binary, run as a user runs it, with what it prints collected.

use std::{
    io::{BufRead, BufReader},
    os::unix::process::CommandExt as _,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::pod::{empty_pods_file, require_binary, sibling_binary};

/// Log message the agent prints once its probes are attached.
pub const READY_MESSAGE: &str = "watching the kernel";

pub fn agent_binary() -> PathBuf {
    let path = std::env::var_os("SIDECAR_RACE_AGENT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| sibling_binary("sidecar-race-agent"));
    require_binary(&path)
}

/// The agent's own CLI parses `args` (a DaemonSet's, from `what`): `args --help`
/// exits 0.
pub fn assert_accepts_args<S: AsRef<std::ffi::OsStr>>(args: &[S], what: &str) {
    let out = Command::new(agent_binary())
        .args(args)
        .arg("--help")
        .output()
        .expect("run the agent");
    assert!(
        out.status.success(),
        "{what}'s arguments are rejected by the agent: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sidecar-race-agent trace …` in the background.
pub struct TraceAgent {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    readers: Vec<thread::JoinHandle<()>>,
}

impl TraceAgent {
    /// Starts `trace` with `args` and waits until it watches the kernel.
    pub fn start(args: &[&str]) -> Self {
        let mut child = Command::new(agent_binary())
            .arg("trace")
            .args(args)
            .env("SIDECAR_RACE_LOG_FORMAT", "json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the agent");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let l = lines.clone();
        let e = stderr.clone();
        let readers = vec![
            thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let v: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("trace printed a non-JSON line ({e}): {line}"));
                    l.lock().unwrap().push(v);
                }
            }),
            collect_lines(err, e),
        ];
        let agent = Self {
            child,
            lines,
            stderr,
            readers,
        };
        agent.wait_stderr(READY_MESSAGE, Duration::from_secs(30));
        agent
    }

    fn wait_stderr(&self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self
                .stderr
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(needle))
            {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "the agent did not print `{needle}` within {timeout:?}; stderr:\n{}",
            self.stderr.lock().unwrap().join("\n")
        );
    }

    /// Log lines printed so far.
    pub fn log(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// Events printed so far that match `pred`.
    pub fn events(&self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|v| pred(v))
            .cloned()
            .collect()
    }

    /// Waits until at least `n` events match `pred`, then returns them.
    pub fn wait_for(
        &self,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self.events(&pred);
            if found.len() >= n || Instant::now() >= deadline {
                return found;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGINT, then the exit summary the agent prints on stderr.
    pub fn stop(mut self) -> (Vec<Value>, Value) {
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().expect("agent exit");
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let stderr = self.stderr.lock().unwrap().clone();
        assert!(
            status.success(),
            "agent exited with {status}; stderr:\n{}",
            stderr.join("\n")
        );
        let summary = stderr
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find_map(|v| v.get("summary").cloned())
            .unwrap_or_else(|| panic!("no summary on stderr:\n{}", stderr.join("\n")));
        (self.lines.lock().unwrap().clone(), summary)
    }
}

impl Drop for TraceAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Matches events of `kind` from the cgroup `cgroup_id`.
pub fn of(kind: &'static str, cgroup_id: u64) -> impl Fn(&Value) -> bool {
    move |v| v["kind"] == kind && v["cgroup_id"] == cgroup_id
}

/// Well past the agent's reorder window (200 ms) and late-refusal window (100 ms).
const QUIET: Duration = Duration::from_secs(1);

/// In a child before exec: a private mount namespace where `/sys/kernel/btf` is an
/// empty tmpfs (the host's mounts are untouched).
fn hide_btf() -> std::io::Result<()> {
    let fail = || Err(std::io::Error::last_os_error());
    // SAFETY: unshare and mount with valid NUL-terminated strings.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return fail();
        }
        let none = std::ptr::null();
        if libc::mount(
            none,
            c"/".as_ptr(),
            none,
            libc::MS_REC | libc::MS_PRIVATE,
            none.cast(),
        ) != 0
        {
            return fail();
        }
        let btf = c"/sys/kernel/btf".as_ptr();
        if libc::mount(c"none".as_ptr(), btf, c"tmpfs".as_ptr(), 0, none.cast()) != 0 {
            return fail();
        }
    }
    Ok(())
}

/// In a child before exec: a private mount namespace with no tracefs and no way to
/// mount one, and the kernel's BTF still there, as on a host that does not mount
/// tracefs for the agent's container: tracefs and debugfs unmounted, `/sys/kernel` an
/// empty read-only tmpfs, and `/sys/kernel/btf` bound back from `saved` (a directory
/// the parent made; the host's mounts are untouched).
fn hide_tracefs(saved: &std::ffi::CStr) -> std::io::Result<()> {
    let fail = || Err(std::io::Error::last_os_error());
    let none = std::ptr::null();
    // SAFETY: unshare, mount, umount2 and mkdir with valid NUL-terminated strings.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return fail();
        }
        let private = libc::MS_REC | libc::MS_PRIVATE;
        if libc::mount(none, c"/".as_ptr(), none, private, none.cast()) != 0 {
            return fail();
        }
        libc::umount2(c"/sys/kernel/debug/tracing".as_ptr(), libc::MNT_DETACH);
        libc::umount2(c"/sys/kernel/tracing".as_ptr(), libc::MNT_DETACH);
        libc::umount2(c"/sys/kernel/debug".as_ptr(), libc::MNT_DETACH);
        let btf = c"/sys/kernel/btf".as_ptr();
        if libc::mount(btf, saved.as_ptr(), none, libc::MS_BIND, none.cast()) != 0 {
            return fail();
        }
        let kernel = c"/sys/kernel".as_ptr();
        if libc::mount(c"none".as_ptr(), kernel, c"tmpfs".as_ptr(), 0, none.cast()) != 0
            || libc::mkdir(btf, 0o755) != 0
            || libc::mount(saved.as_ptr(), btf, none, libc::MS_BIND, none.cast()) != 0
            || libc::mount(
                none,
                kernel,
                none,
                libc::MS_REMOUNT | libc::MS_RDONLY,
                none.cast(),
            ) != 0
        {
            return fail();
        }
    }
    Ok(())
}

/// `sidecar-race-agent run …` in the background, talked to over HTTP.
pub struct RunAgent {
    child: Child,
    pub addr: String,
    stderr: Arc<Mutex<Vec<String>>>,
    reader: Option<thread::JoinHandle<()>>,
}

impl RunAgent {
    /// Starts `run` on a free loopback port with `args`, and waits until it is ready.
    pub fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// [`RunAgent::start`] with extra environment variables (e.g. `KUBECONFIG`).
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn(args, env, Command::new(agent_binary()))
    }

    /// [`RunAgent::start`] on `addr`, for a scraper configured before the agent
    /// starts (e.g. a fresh loopback port from [`crate::http::free_port`]).
    pub fn start_at(addr: &str, args: &[&str]) -> Self {
        Self::spawn_at(addr.to_string(), args, &[], Command::new(agent_binary()))
    }

    /// [`RunAgent::start`] as on a kernel without BTF: the agent runs in a mount
    /// namespace of its own with an empty tmpfs over `/sys/kernel/btf`.
    pub fn start_without_btf(args: &[&str]) -> Self {
        let mut cmd = Command::new(agent_binary());
        // SAFETY: only async-signal-safe syscalls between fork and exec.
        unsafe { cmd.pre_exec(hide_btf) };
        Self::spawn(args, &[], cmd)
    }

    /// [`RunAgent::start`] as on a host that does not give the agent tracefs (and
    /// where it cannot mount one), the kernel's BTF still there.
    pub fn start_without_tracefs(args: &[&str]) -> Self {
        let saved = std::env::temp_dir().join(format!("sr-btf-{}", std::process::id()));
        std::fs::create_dir_all(&saved).expect("a directory for the BTF");
        let saved = std::ffi::CString::new(saved.into_os_string().into_encoded_bytes())
            .expect("a path without NUL");
        let mut cmd = Command::new(agent_binary());
        // SAFETY: only async-signal-safe syscalls between fork and exec.
        unsafe { cmd.pre_exec(move || hide_tracefs(&saved)) };
        Self::spawn(args, &[], cmd)
    }

    fn spawn(args: &[&str], env: &[(&str, &str)], cmd: Command) -> Self {
        let addr = format!("127.0.0.1:{}", crate::http::free_port());
        Self::spawn_at(addr, args, env, cmd)
    }

    fn spawn_at(addr: String, args: &[&str], env: &[(&str, &str)], mut cmd: Command) -> Self {
        let mut child = cmd
            // No Events: a developer's KUBECONFIG must not receive the tests' races.
            .args([
                "run",
                "--listen",
                &addr,
                "--stats-interval-seconds",
                "5",
                "--events=false",
            ])
            .args(args)
            .env("SIDECAR_RACE_LOG_FORMAT", "json")
            // Tests run agents side by side on one kernel: none pins (one would own the
            // node) unless its test asks.
            .env("SIDECAR_RACE_PIN", "off")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the agent");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let e = stderr.clone();
        let err = child.stderr.take().unwrap();
        let reader = collect_lines(err, e);
        let agent = Self {
            child,
            addr,
            stderr,
            reader: Some(reader),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while crate::http::get(&agent.addr, "/readyz").map(|r| r.0) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "agent not ready on {}; stderr:\n{}",
                agent.addr,
                agent.stderr().join("\n")
            );
            thread::sleep(Duration::from_millis(50));
        }
        agent
    }

    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// The agent reading the pods file of `name` (empty until `write_pod_list` fills
    /// it, polled every 0.1 s), with `extra` arguments; and that file.
    pub fn start_with_pods_file(name: &str, extra: &[&str]) -> (RunAgent, PathBuf) {
        let (pods_file, source) = empty_pods_file(name);
        let mut args = vec!["--pods-from", &source, "--pods-poll-seconds", "0.1"];
        args.extend_from_slice(extra);
        (RunAgent::start(&args), pods_file)
    }

    /// The value of counter `sidecar_race_<name>_total` (unlabelled) on `/metrics`.
    pub fn counter(&self, name: &str) -> u64 {
        let prefix = format!("sidecar_race_{name}_total ");
        let metrics = self.metrics();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix}in {metrics}"))
    }

    /// `GET /metrics`: the body of a 200 answer.
    pub fn metrics(&self) -> String {
        let (status, body) = crate::http::get(&self.addr, "/metrics").expect("GET /metrics");
        assert_eq!(status, 200);
        body
    }

    /// The agent's process id (its /proc/PID/status tells its memory).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until a log line contains every one of `needles`; returns that line.
    pub fn wait_log(&self, needles: &[&str], timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self
                .stderr()
                .into_iter()
                .find(|l| needles.iter().all(|n| l.contains(n)))
            {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "the agent did not log {needles:?} within {timeout:?}; its log:\n{}",
                self.stderr().join("\n")
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, as the OOM killer or a node crash ends it; nothing runs on its way out.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `GET /api/v1/incidents?query`.
    pub fn incidents(&self, query: &str) -> Vec<Value> {
        let path = if query.is_empty() {
            "/api/v1/incidents".to_string()
        } else {
            format!("/api/v1/incidents?{query}")
        };
        let (status, body) = crate::http::get(&self.addr, &path).unwrap_or_else(|| {
            let log = self.stderr();
            let tail = &log[log.len().saturating_sub(30)..];
            panic!(
                "the agent at {} does not answer {path}; its last log lines:\n{}",
                self.addr,
                tail.join("\n")
            )
        });
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).expect("JSON");
        v["incidents"]
            .as_array()
            .expect("an incidents list")
            .clone()
    }

    /// Incidents of one pod.
    pub fn incidents_of(&self, pod_uid: &str) -> Vec<Value> {
        self.incidents("")
            .into_iter()
            .filter(|i| i["pod_uid"] == pod_uid)
            .collect()
    }

    /// Waits until `pred` holds for the pod's incidents, returning them either way.
    pub fn wait_incidents(
        &self,
        pod_uid: &str,
        timeout: Duration,
        pred: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self.incidents_of(pod_uid);
            if pred(&found) || Instant::now() >= deadline {
                return found;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The one incident of `pod_uid` once it is resolved; panics on none, or on a
    /// second one showing up while the agent's reorder and late-refusal windows pass.
    pub fn one_resolved(&self, pod_uid: &str, timeout: Duration) -> Value {
        self.one_resolved_holding(pod_uid, 0, timeout)
    }

    /// [`RunAgent::one_resolved`] once the pod's incidents hold at least `refused`
    /// refusals (all the client counted, so none is left to make another incident).
    pub fn one_resolved_holding(&self, pod_uid: &str, refused: u64, timeout: Duration) -> Value {
        let held = |i: &[Value]| {
            i.iter()
                .map(|i| i["refused_count"].as_u64().unwrap_or(0))
                .sum::<u64>()
        };
        let found = self.wait_incidents(pod_uid, timeout, |i| {
            i.iter().any(|i| i["state"] == "resolved") && held(i) >= refused
        });
        assert!(
            found.iter().any(|i| i["state"] == "resolved") && held(&found) >= refused,
            "no resolved incident holding {refused} refusals within {timeout:?}: {found:#?}"
        );
        // Facts still held back for ordering, or a late refusal, would show up by now.
        let deadline = Instant::now() + QUIET;
        let found = loop {
            let now = self.incidents_of(pod_uid);
            assert_eq!(now.len(), 1, "expected one incident: {now:#?}");
            if Instant::now() >= deadline {
                break now;
            }
            thread::sleep(Duration::from_millis(100));
        };
        found.into_iter().next().unwrap()
    }

    /// SIGTERM and wait; returns stderr.
    pub fn stop(mut self) -> Vec<String> {
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().expect("agent exit");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let stderr = self.stderr();
        assert!(
            status.success(),
            "agent exited with {status}:\n{}",
            stderr.join("\n")
        );
        stderr
    }
}

impl Drop for RunAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /api/v1/incidents?query` of the agent at `addr`.
pub fn incidents_at(addr: &str, query: &str) -> Vec<Value> {
    incidents_at_as(addr, query, None)
}

/// `GET /api/v1/incidents?query` of the agent at `addr`, with a bearer token when
/// given (an agent run with `--auth kubernetes`).
pub fn incidents_at_as(addr: &str, query: &str, token: Option<&str>) -> Vec<Value> {
    let path = if query.is_empty() {
        "/api/v1/incidents".to_string()
    } else {
        format!("/api/v1/incidents?{query}")
    };
    let (status, body) = crate::http::get_as(addr, &path, token).expect("the agent answers");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    v["incidents"]
        .as_array()
        .expect("an incidents list")
        .clone()
}

/// Collects the lines `from` writes into `into`, until it closes.
fn collect_lines(
    from: impl std::io::Read + Send + 'static,
    into: Arc<Mutex<Vec<String>>>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            into.lock().unwrap().push(line);
        }
    })
}
