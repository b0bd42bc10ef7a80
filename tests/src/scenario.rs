//! Building blocks of the scenario tests and the demo: the stand-in proxy and app
//! started in a simulated pod.

use std::process::Command;

use crate::pod::{SimContainer, SimPod, require_binary, sibling_binary};

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
