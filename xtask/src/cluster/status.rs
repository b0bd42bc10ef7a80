//! `cargo xtask cluster status`: which components run, the API server's and the node's
//! readiness, the agent's pods.

use std::path::Path;

use sidecar_race_testbed::agent;

use super::{
    clients::kubectl,
    host,
    node::{BRIDGE, STATE_DIR, admin_kubeconfig},
    operator, procs,
};
use crate::run::output;

const COMPONENTS: [&str; 8] = [
    "containerd",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
    "kubelet",
    operator::NAME,
];

/// Why a cluster counts as up (a component runs, or its state is still there).
pub fn already_up() -> Option<String> {
    let running: Vec<String> = COMPONENTS
        .iter()
        .filter_map(|c| procs::running(c).map(|pid| format!("{c} pid {pid}")))
        .collect();
    if !running.is_empty() {
        return Some(running.join(", "));
    }
    if Path::new(STATE_DIR).exists() || host::bridge_exists() {
        return Some(format!(
            "{STATE_DIR} or the bridge {} is left from an earlier run",
            BRIDGE
        ));
    }
    None
}

pub fn print() -> anyhow::Result<()> {
    if already_up().is_none() {
        println!("no cluster is up");
        return Ok(());
    }
    for c in COMPONENTS {
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
