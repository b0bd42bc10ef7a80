//! Building blocks of the scenario tests and the demo: the stand-in proxy and app
//! started in a simulated pod, and Deployments' pods raced under an agent (the
//! Prometheus federation and html report tests share them).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{
    agent::{RunAgent, incidents_at_as},
    pod::{Declared, SimContainer, SimPod, require_binary, sibling_binary, write_pod_list},
};

/// Starts `sr-proxy` in `c` with `args` (e.g. `--delay-ms 1500`).
pub fn proxy(pod: &mut SimPod, c: &SimContainer, args: &[&str]) -> u32 {
    let mut cmd = Command::new(require_binary(&sibling_binary("sr-proxy")));
    cmd.args(args);
    pod.spawn(c, cmd).expect("start sr-proxy")
}

/// Starts `sr-proxy` in `c` listening on 127.0.0.1:`port` at once, and returns once
/// it serves (a native sidecar whose startupProbe passed): its pid.
pub fn proxy_serving(pod: &mut SimPod, c: &SimContainer, port: u16) -> u32 {
    let pid = proxy(pod, c, &["--listen", &format!("127.0.0.1:{port}")]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !listening(pid, port) {
        assert!(
            Instant::now() < deadline,
            "sr-proxy (pid {pid}) did not listen on 127.0.0.1:{port} within 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    pid
}

/// Whether process `pid`'s network namespace has a TCP listener on 127.0.0.1:`port`
/// (`/proc/<pid>/net/tcp`: local address `0100007F:<port hex>`, state `0A`).
pub fn listening(pid: u32, port: u16) -> bool {
    let local = format!("0100007F:{port:04X}");
    std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1) == Some(&local.as_str()) && f.get(3) == Some(&"0A")
        })
}

/// Starts `sr-app` in `c` with `args` (e.g. `--connect 127.0.0.1:15001`).
pub fn app(pod: &mut SimPod, c: &SimContainer, args: &[&str]) -> u32 {
    let mut cmd = Command::new(require_binary(&sibling_binary("sr-app")));
    cmd.args(args);
    pod.spawn(c, cmd).expect("start sr-app")
}

/// Runs `sr-app` to completion.
pub fn app_done(pod: &mut SimPod, c: &SimContainer, args: &[&str]) {
    let pid = app(pod, c, args);
    assert!(pod.wait(pid).expect("wait sr-app").success());
}

/// A pod with a classic startup race, started beside `neighbour` and listed with it
/// in the pods file: its app is refused exactly `refusals` times (every 20 ms) on
/// 127.0.0.1:15001, then its proxy listens there. The pod and its app container.
pub fn race_beside(
    pods_file: &std::path::Path,
    ns: &str,
    neighbour: &serde_json::Value,
    refusals: u64,
) -> (SimPod, SimContainer) {
    let mut race_pod = SimPod::new("racer").expect("racing pod");
    let p = race_pod.container("proxy").expect("proxy container");
    let a = race_pod.container("app").expect("app container");
    let race_manifest = race_pod.app_and_proxy_manifest(ns, "racer", &a, &p, Declared::App);
    write_pod_list(pods_file, &[neighbour.clone(), race_manifest]);
    app_done(
        &mut race_pod,
        &a,
        &[
            "--connect",
            "127.0.0.1:15001",
            "--interval-ms",
            "20",
            "--attempts",
            &refusals.to_string(),
        ],
    );
    proxy(&mut race_pod, &p, &["--listen", "127.0.0.1:15001"]);
    (race_pod, a)
}

/// Runs `sr-app` to completion; how many of its connects were refused, as it counted.
pub fn app_refused(pod: &mut SimPod, c: &SimContainer, args: &[&str]) -> u64 {
    CountedApp::start(pod, c, &sibling_binary("sr-app"), args).refused(pod)
}

/// `sr-app` running in a pod, its output going to a file to read its count from.
pub struct CountedApp {
    pid: u32,
    out: PathBuf,
}

impl CountedApp {
    /// Starts `program` (`sr-app`, or a link to it under another name) with `args`.
    pub fn start(pod: &mut SimPod, c: &SimContainer, program: &Path, args: &[&str]) -> Self {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let out = std::env::temp_dir().join(format!(
            "sr-app-{}-{}.out",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let mut cmd = Command::new(require_binary(program));
        cmd.args(args)
            .stdout(std::fs::File::create(&out).expect("sr-app output file"));
        let pid = pod.spawn(c, cmd).expect("start sr-app");
        Self { pid, out }
    }

    /// Waits for it to finish; how many of its connects were refused, as it counted.
    pub fn refused(self, pod: &mut SimPod) -> u64 {
        assert!(pod.wait(self.pid).expect("wait sr-app").success());
        let text = std::fs::read_to_string(&self.out).expect("sr-app output");
        let _ = std::fs::remove_file(&self.out);
        refused_in(&text).unwrap_or_else(|| panic!("no refusal count in sr-app's output: {text}"))
    }
}

/// `sr-app` under process name `name` (the kernel names a process by the file it was
/// run as): a symlink in a directory of this test process, e.g. `curl` for a shell's
/// wait loop.
pub fn app_named(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sr-named-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("directory for named links");
    let link = dir.join(name);
    if !link.exists() {
        std::os::unix::fs::symlink(require_binary(&sibling_binary("sr-app")), &link)
            .expect("link to sr-app");
    }
    link
}

/// sr-app's last line: `… after N refused attempts, …` or `…: N refused, …`.
fn refused_in(text: &str) -> Option<u64> {
    let line = text.lines().last()?;
    let n = match line.split_once(" after ") {
        Some((_, rest)) => rest.split(' ').next()?,
        None => line.rsplit_once(": ")?.1.split(' ').next()?,
    };
    n.parse().ok()
}

/// The classic startup race inside `pod`: the proxy in `p` listens on
/// `127.0.0.1:15001` only after `delay_ms`, the app in `a` dials it at once every 50 ms
/// until it connects. Returns how many of the app's connects were refused.
pub fn late_proxy_race(pod: &mut SimPod, p: &SimContainer, a: &SimContainer, delay_ms: u64) -> u64 {
    let delay = delay_ms.to_string();
    proxy(
        pod,
        p,
        &["--listen", "127.0.0.1:15001", "--delay-ms", &delay],
    );
    app_refused(
        pod,
        a,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "50"],
    )
}

/// A classic startup race in a new pod `name` (the proxy listens 1 s late, the app
/// dials at once and retries), and the resolved `startup` incident that the agent at
/// `addr` must report for it, with the right client and sidecar containers.
pub fn assert_startup_race_detected(addr: &str, name: &str) {
    assert_startup_race_detected_as(addr, name, None);
}

/// As `assert_startup_race_detected`, reading the incidents with a bearer token (an
/// agent run with `--auth kubernetes`).
pub fn assert_startup_race_detected_as(addr: &str, name: &str, token: Option<&str>) {
    let mut pod = SimPod::new(name).expect("a simulated pod");
    let p = pod.container("proxy").expect("proxy container");
    let a = pod.container("app").expect("app container");
    late_proxy_race(&mut pod, &p, &a, 1000);
    let deadline = Instant::now() + Duration::from_secs(10);
    let incident = loop {
        let resolved = incidents_at_as(addr, "state=resolved", token);
        if let Some(i) = resolved
            .into_iter()
            .find(|i| i["pod_uid"] == pod.uid.as_str())
        {
            break i;
        }
        assert!(
            Instant::now() < deadline,
            "no resolved incident for pod {}",
            pod.uid
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(incident["phase"], "startup", "{incident:#}");
    assert_eq!(incident["container_id"], a.id.as_str());
    assert_eq!(incident["sidecar_container_id"], p.id.as_str());
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_refusals_sr_app_counted() {
        let connected = "sr-app: connected to 127.0.0.1:15001 after 19 refused attempts, 1003 ms\n";
        assert_eq!(super::refused_in(connected), Some(19));
        let gave_up = "sr-app: 15 attempts to 127.0.0.1:15001: 6 refused, 9 connected\n";
        assert_eq!(super::refused_in(gave_up), Some(6));
        assert_eq!(super::refused_in(""), None);
    }
}

/// A Deployment's pods: namespace, name, how many race (the proxy listens `delay_ms`
/// late) and how many start in order (the proxy serves first).
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    pub namespace: &'static str,
    pub deployment: &'static str,
    pub racing: u64,
    pub ordered: u64,
    pub delay_ms: u64,
}

/// A pod of `w`, added to `manifests` and the pods file: racing starts app and proxy
/// together, the proxy `w.delay_ms` late; otherwise the proxy serves first.
pub fn start_workload_pod(
    w: &Workload,
    racing: bool,
    pods_file: &Path,
    manifests: &mut Vec<Value>,
) -> SimPod {
    let mut pod = SimPod::new(w.deployment).unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    manifests.push(pod.app_and_proxy_manifest(w.namespace, w.deployment, &a, &p, Declared::App));
    write_pod_list(pods_file, manifests);
    if racing {
        let delay = w.delay_ms.to_string();
        proxy(
            &mut pod,
            &p,
            &["--listen", "127.0.0.1:15001", "--delay-ms", &delay],
        );
    } else {
        proxy_serving(&mut pod, &p, 15001);
    }
    app_done(
        &mut pod,
        &a,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "100"],
    );
    pod
}

/// What an agent counted for a workload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counted {
    pub starts: u64,
    pub racing: u64,
    /// The refusals of its startup incidents, as the agent reported them.
    pub refusals: u64,
    /// Their race windows, as the agent reported them.
    pub windows: Vec<f64>,
    /// Its resolved startup incidents, as the agent's API gave them.
    pub incidents: Vec<Value>,
}

/// Starts every pod of `workloads` one after the other under `agent` (whose pod source
/// is `pods_file`), each racing pod once the agent resolved its incident. What the
/// agent counted, by (namespace, workload), and the pods, still running.
pub fn race_workloads(
    agent: &RunAgent,
    workloads: &[Workload],
    pods_file: &Path,
) -> (BTreeMap<(String, String), Counted>, Vec<SimPod>) {
    let mut manifests = Vec::new();
    let mut counted: BTreeMap<(String, String), Counted> = BTreeMap::new();
    let mut running = Vec::new();
    for w in workloads {
        let c = counted
            .entry((w.namespace.to_string(), w.deployment.to_string()))
            .or_default();
        for racing in (0..w.racing)
            .map(|_| true)
            .chain((0..w.ordered).map(|_| false))
        {
            let pod = start_workload_pod(w, racing, pods_file, &mut manifests);
            c.starts += 1;
            if racing {
                c.racing += 1;
                let incidents = agent.wait_incidents(&pod.uid, Duration::from_secs(10), |i| {
                    i.iter().any(|i| i["state"] == "resolved")
                });
                let startup: Vec<Value> = incidents
                    .iter()
                    .filter(|i| i["phase"] == "startup" && i["state"] == "resolved")
                    .cloned()
                    .collect();
                let refused: u64 = startup
                    .iter()
                    .map(|i| i["refused_count"].as_u64().unwrap())
                    .sum();
                assert!(refused >= 3, "{}: {incidents:#?}", w.deployment);
                c.refusals += refused;
                c.windows.extend(
                    startup
                        .iter()
                        .map(|i| i["race_window_seconds"].as_f64().unwrap()),
                );
                c.incidents.extend(startup);
            }
            running.push(pod);
        }
    }
    (counted, running)
}
