//! The Prometheus Operator as a host process of the cluster (like kube-scheduler), with
//! the admin kubeconfig: it reconciles the PodMonitor, ServiceMonitor and PrometheusRule
//! of deploy/monitoring into a Prometheus resource's generated configuration (the
//! cluster tier's case 10 runs Debian's Prometheus with it).
//!
//! No image is pulled here, so a Prometheus resource's pods cannot run: the default
//! images point at names nothing serves (`sr-test.local/...`) and the tier's Prometheus
//! resources have `replicas: 0`; the operator still generates their configuration.

use std::{process::Command, time::Duration};

use super::{build::operator_bin, clients::http_get, node::admin_kubeconfig, procs};

pub const NAME: &str = "prometheus-operator";
/// Its /metrics and /healthz, on loopback (the default :8080 is every address).
pub const PORT: u16 = 10280;

pub fn start() -> anyhow::Result<()> {
    let listen = format!("127.0.0.1:{PORT}");
    procs::spawn(
        NAME,
        Command::new(operator_bin())
            .env("KUBECONFIG", admin_kubeconfig())
            .args([
                &format!("--web.listen-address={listen}"),
                "--prometheus-default-base-image=sr-test.local/prometheus",
                "--alertmanager-default-base-image=sr-test.local/alertmanager",
                "--thanos-default-base-image=sr-test.local/thanos",
                "--prometheus-config-reloader=sr-test.local/prometheus-config-reloader:none",
            ]),
    )?;
    procs::wait_ready(NAME, Duration::from_secs(60), || {
        http_get(&listen, "/healthz").is_some()
    })
}
