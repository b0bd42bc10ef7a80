//! `cargo xtask demo [--cluster]`: a real startup race and what the agent makes of it.
//! Without `--cluster`, in a simulated pod on this machine (`sr-demo`); with it, on the
//! throwaway cluster of `cargo xtask cluster up` (`sr-cluster-demo`: the Event, the
//! metric through Prometheus, `report` and `lint --fix`), which it takes down again.

use std::{process::Command, time::Instant};

use crate::{
    cluster,
    run::{cargo, checked},
    setup::{self, Tier},
};

/// What the cluster demo tells a person before it starts (figures: docs/cluster.md).
const CLUSTER_INTRO: &str = "\
xtask: the cluster demo: a throwaway single-node Kubernetes on this machine, a real startup race on it.
  1. set-up: the first run builds Kubernetes, etcd, helm, the Prometheus Operator and Prometheus from
     their Go modules, cached under ~/.cache/sidecar-race/go/: 42 min on a 2-core machine (2502 s
     measured, kube-apiserver alone 16 min), then the agent and its image (minutes in a fresh
     target/). Later runs skip all of it;
  2. `cluster up` (about 30 s): API server, etcd, kubelet, kube-proxy, containerd, the Prometheus
     Operator, and the agent installed from deploy/ as the README says;
  3. a Deployment with a classic sidecar that listens late, and its fixed form (a native sidecar with a
     startupProbe, as `lint --fix` writes it); the Event the agent posts, the incident metric through
     Prometheus, `report --agents-via-api` and the patch of `lint --fix` (1-2 min);
  4. `cluster down` (about 15 s), whether the demo passed or not.";

/// The simulated-pod demo.
pub fn simulated() -> anyhow::Result<()> {
    setup::ensure(Tier::Demo)?;
    build()?;
    checked(&mut Command::new(
        crate::run::target_dir().join("debug/sr-demo"),
    ))
}

/// The cluster demo: set-up, build, `cluster up`, `sr-cluster-demo`, `cluster down`.
pub fn on_cluster() -> anyhow::Result<()> {
    eprintln!("{CLUSTER_INTRO}\n");
    let started = Instant::now();
    setup::ensure(Tier::Cluster)?;
    build()?;
    eprintln!(
        "xtask: set-up and build took {} s",
        started.elapsed().as_secs()
    );
    let kubeconfig = cluster::up(cluster::Runtime::Containerd, cluster::Kubernetes::V1_34)?;
    let demo = checked(
        Command::new(crate::run::target_dir().join("debug/sr-cluster-demo"))
            .env("SIDECAR_RACE_KUBECONFIG", &kubeconfig)
            .env(
                "SIDECAR_RACE_KUBECTL",
                cluster::build::kubernetes_bin("kubectl"),
            )
            .env(
                "SIDECAR_RACE_PROMETHEUS_BIN",
                cluster::build::prometheus_bin(),
            ),
    );
    eprintln!("\nxtask: taking the cluster down");
    let down = cluster::down();
    eprintln!(
        "xtask: the cluster demo took {} s",
        started.elapsed().as_secs()
    );
    demo.and(down)
}

/// The agent and the simulated pod kit (the demo's programs): not the test suite's
/// crate, whose CRI bindings need protoc and a longer build.
pub fn build() -> anyhow::Result<()> {
    checked(cargo().args([
        "build",
        "-p",
        "sidecar-race-agent",
        "-p",
        "sidecar-race-kit",
        "--bins",
    ]))
}
