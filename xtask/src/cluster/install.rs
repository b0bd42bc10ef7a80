//! The agent installed the way the README tells a user: the image imported into the
//! node's runtime under the local overlay's name, `kubectl apply -k` of that
//! overlay, the Prometheus Operator's CRDs, deploy/monitoring, and the operator.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sidecar_race_testbed::agent;

use super::{build::operator_source, clients::kubectl, operator, runtime::Runtime};
use crate::run::{checked, output, succeeds, workspace_root};

/// The overlay `up` applies: deploy/base with the image set, through the documented
/// knob (kustomize `images:`), to the name the archive is imported as, and the Unix
/// hooks on the syscall tracepoints (the test host has neither fexit nor kprobes).
pub const OVERLAY: &str = "deploy/overlays/local-cluster";
/// What the imported agent image is tagged as (the overlay's `newName`).
pub const LOCAL_AGENT_REPOSITORY: &str = "sr-test.local/sidecar-race-agent";

/// The agent as the README installs it, then deploy/monitoring on the operator's CRDs,
/// and the operator to reconcile it.
pub fn install_agent(runtime: Runtime) -> anyhow::Result<()> {
    let built = crate::image::image(None, &[])?;
    let local = format!("{LOCAL_AGENT_REPOSITORY}:{}", crate::image::VERSION);
    runtime.import(&built.archive, &built.reference, &local)?;
    let root = workspace_root();
    checked(kubectl().arg("apply").arg("-k").arg(root.join(OVERLAY)))?;
    let crds = operator_source()?.join("example/prometheus-operator-crd");
    checked(kubectl().args(["apply", "--server-side", "-f"]).arg(&crds))?;
    // `kubectl wait` fails at once on a CRD that has no conditions yet: retry.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !succeeds(kubectl().args([
        "wait",
        "--for=condition=Established",
        "--timeout=10s",
        "crd/podmonitors.monitoring.coreos.com",
        "crd/servicemonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com",
    ])) {
        if Instant::now() > deadline {
            bail!("the Prometheus Operator's CRDs were not Established within 60 s");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    checked(
        kubectl()
            .arg("apply")
            .arg("-k")
            .arg(root.join("deploy/monitoring")),
    )?;
    operator::start()?;
    checked(kubectl().args(agent::ROLLOUT_STATUS)).with_context(|| {
        let pods = output(kubectl().args(["-n", agent::NAMESPACE, "describe", "pods"]))
            .unwrap_or_default();
        format!("the agent's DaemonSet pod did not become Ready:\n{pods}")
    })
}
