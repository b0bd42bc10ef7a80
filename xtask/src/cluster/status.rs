//! `cargo xtask cluster status`: the variant `up` started (Kubernetes, runtime), which
//! components run, the API server's and the node's readiness, the agent's pods.

use std::path::Path;

use clap::ValueEnum;

use sidecar_race_testbed::agent;

use super::{
    clients::kubectl,
    host,
    kubernetes::Kubernetes,
    node::{BRIDGE, STATE_DIR, admin_kubeconfig},
    operator, procs,
    runtime::Runtime,
};
use crate::run::output;

/// The cluster's processes besides its runtime's.
const COMPONENTS: [&str; 7] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
    "kubelet",
    operator::NAME,
];

/// What an earlier `up` left on this host.
pub enum Earlier {
    /// Some of its components still run (their names and pids).
    Running(String),
    /// Its state directory or bridge is there but none of its components runs: a run
    /// killed before its `down` (a cancelled CI job, a restarted VM).
    Stale(String),
}

/// Whether a cluster from an earlier run is on this host, and in which shape.
pub fn earlier() -> Option<Earlier> {
    // Either runtime: an earlier `up` may have started the other one.
    let runtimes = Runtime::value_variants().iter().map(|r| r.process());
    let running: Vec<String> = runtimes
        .chain(COMPONENTS)
        .filter_map(|c| procs::running(c).map(|pid| format!("{c} pid {pid}")))
        .collect();
    if !running.is_empty() {
        return Some(Earlier::Running(running.join(", ")));
    }
    if Path::new(STATE_DIR).exists() || host::bridge_exists() {
        return Some(Earlier::Stale(format!(
            "{STATE_DIR} or the bridge {BRIDGE} is left from an earlier run, none of whose components runs"
        )));
    }
    None
}

pub fn print() -> anyhow::Result<()> {
    if earlier().is_none() {
        println!("no cluster is up");
        return Ok(());
    }
    // The variant `up` started: its Kubernetes and its runtime, not the other.
    let runtime = Runtime::recorded();
    let variant = format!(
        "Kubernetes {} on {}",
        Kubernetes::recorded().version(),
        runtime.label()
    );
    println!("{:<24} {variant}", "variant");
    for c in std::iter::once(runtime.process()).chain(COMPONENTS) {
        match procs::running(c) {
            Some(pid) => println!("{c:<24} running (pid {pid})"),
            None => println!("{c:<24} not running"),
        }
    }
    if procs::running("kube-apiserver").is_some() {
        let ready = output(kubectl().args(["get", "--raw", "/readyz"]))
            .unwrap_or_else(|| "not ready".into());
        println!("{:<24} {ready}", "API server /readyz");
        let node = output(kubectl().args(["get", "nodes", "-o", "wide", "--no-headers"]))
            .unwrap_or_default();
        println!("{:<24} {node}", "node");
        let pods = output(kubectl().args([
            "-n",
            agent::NAMESPACE,
            "get",
            "pods",
            "-o",
            "wide",
            "--no-headers",
        ]))
        .unwrap_or_default();
        println!("{:<24} {pods}", "agent pods");
        println!("{:<24} {}", "kubeconfig", admin_kubeconfig().display());
    }
    Ok(())
}
