//! The end-to-end tests' kit, on the simulated pod kit (`sidecar_race_kit`: pods, the
//! agent binary run as a user runs it, the stand-in proxy and app, re-exported here
//! under the names the tests use): the kubelet's side of the CRI against a real
//! containerd (`cri`), the scrape configurations the Prometheus Operator generates
//! (`operator`), a real Prometheus (`prometheus`), Debian's Prometheus on the real
//! operator's configuration (`operator_prometheus`), a real OpenTelemetry Collector
//! (`otelcol`), the kernel tier's VMs (`vm`), the
//! cluster tier's cases (`cluster`, and what its case files share: `cluster_cases`) and
//! the commands of the docs (`docs`).

pub mod bench_verdicts;
pub mod bpf;
pub mod browser;
pub mod cluster_cases;
pub mod cri;
pub mod docs;
pub mod fake_api;
pub mod grafana_schema;
pub mod house;
pub mod house_impls;
pub mod house_layers;
pub mod manifests;
pub mod metrics_text;
pub mod operator;
pub mod soak;
pub mod tools;
pub mod vm;
pub mod vm_arch;

// The simulated pod kit and the cluster's view, where the tests have always found them.
pub use sidecar_race_kit::{
    agent, cluster, datagram_sidecars, flood, glibc_fleet, http, operator_prometheus, otelcol,
    pinned, pod, prometheus, real_sidecars, root, scenario, stand_in,
};
