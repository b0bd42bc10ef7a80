//! Test kit for sidecar-race on a real kernel: simulated pods (a network namespace,
//! cgroups laid out as the kubelet lays them out, real processes), the agent binary
//! run as a user runs it, and helpers to read what it printed; the kubelet's side of
//! the CRI against a real containerd (`cri`), the scrape configurations the
//! Prometheus Operator generates (`operator`), a real Prometheus (`prometheus`), Debian's
//! Prometheus on the real operator's configuration (`operator_prometheus`), and
//! the commands of the docs (`docs`).

pub mod agent;
pub mod bench_verdicts;
pub mod bpf;
pub mod cluster;
pub mod cri;
pub mod docs;
pub mod fake_api;
pub mod http;
pub mod manifests;
pub mod metrics_text;
pub mod operator;
pub mod operator_prometheus;
pub mod pod;
pub mod prometheus;
pub mod root;
pub mod scenario;
pub mod soak;
pub mod tools;
pub mod vm;
pub mod vm_arch;
