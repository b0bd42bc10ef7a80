//! The agent binary, run as a user runs it, with what it prints collected.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::pod::{require_binary, sibling_binary};

/// Log message the agent prints once its probes are attached.
pub const READY_MESSAGE: &str = "watching the kernel";

pub fn agent_binary() -> PathBuf {
    let path = std::env::var_os("SIDECAR_RACE_AGENT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| sibling_binary("sidecar-race-agent"));
    require_binary(&path)
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
            thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    e.lock().unwrap().push(line);
                }
            }),
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
