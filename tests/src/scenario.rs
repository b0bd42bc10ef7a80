//! Building blocks of the scenario tests and the demo: the stand-in proxy and app
//! started in a simulated pod.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use crate::{
    agent::incidents_at,
    pod::{SimContainer, SimPod, require_binary, sibling_binary},
};

/// Starts `sr-proxy` in `c` with `args` (e.g. `--delay-ms 1500`).
pub fn proxy(pod: &mut SimPod, c: &SimContainer, args: &[&str]) -> u32 {
    let mut cmd = Command::new(require_binary(&sibling_binary("sr-proxy")));
    cmd.args(args);
    pod.spawn(c, cmd).expect("start sr-proxy")
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

/// The classic startup race inside `pod`: the proxy in `p` listens on
/// `127.0.0.1:15001` only after `delay_ms`, the app in `a` dials it at once every 50 ms
/// until it connects.
pub fn late_proxy_race(pod: &mut SimPod, p: &SimContainer, a: &SimContainer, delay_ms: u64) {
    let delay = delay_ms.to_string();
    proxy(
        pod,
        p,
        &["--listen", "127.0.0.1:15001", "--delay-ms", &delay],
    );
    app_done(
        pod,
        a,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "50"],
    );
}

/// A classic startup race in a new pod `name` (the proxy listens 1 s late, the app
/// dials at once and retries), and the resolved `startup` incident that the agent at
/// `addr` must report for it, with the right client and sidecar containers.
pub fn assert_startup_race_detected(addr: &str, name: &str) {
    let mut pod = SimPod::new(name).expect("a simulated pod");
    let p = pod.container("proxy").expect("proxy container");
    let a = pod.container("app").expect("app container");
    late_proxy_race(&mut pod, &p, &a, 1000);
    let deadline = Instant::now() + Duration::from_secs(10);
    let incident = loop {
        let resolved = incidents_at(addr, "state=resolved");
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
