//! Service meshes that inject a classic sidecar: SR006 (Linkerd's wait-before-exit
//! sleep), SR008 (Istio's holdApplicationUntilProxyStarts), SR009 (native-sidecar mode
//! off).

use super::{Finding, Rule, Severity};
use crate::{
    inventory::pod_info::Role,
    lint::{
        known::{self, Mesh},
        workload::Workload,
    },
};

pub(super) fn meshes(w: &Workload, out: &mut Vec<Finding>) {
    for mesh in known::meshes(w) {
        let proxy = mesh.proxy_container();
        if mesh == Mesh::Linkerd
            && let Some(secs) = w.annotation(known::LINKERD_WAIT_BEFORE_EXIT)
        {
            out.push(
                Finding::new(w, Rule::PreStopSleep, Severity::Warning, vec![proxy.into()]).says(
                    format!(
                        "{} gives the injected {proxy} a preStop sleep of {secs} s so that it outlives the app's drain: a tuned race",
                        known::LINKERD_WAIT_BEFORE_EXIT
                    ),
                    format!(
                        "Use Linkerd's native-sidecar mode ({}: \"true\"), which stops {proxy} after the app, and drop this annotation (Linkerd: not to be used with native sidecars)",
                        mesh.native_annotation()
                    ),
                ),
            );
        }
        let native = known::native_mode(w, mesh) || w.info.role(proxy) == Some(Role::NativeSidecar);
        if native {
            continue;
        }
        let annotation = format!("{}: \"true\"", mesh.native_annotation());
        if mesh == Mesh::Istio && known::istio_holds_application(w) {
            out.push(
                Finding::new(w, Rule::IstioHoldApplication, Severity::Warning, vec![proxy.into()])
                    .says(
                        "holdApplicationUntilProxyStarts starts the app once istio-proxy is ready, but covers startup only: at drain istio-proxy gets SIGTERM together with the app and can stop serving first".into(),
                        format!("Use Istio's native-sidecar mode (pod annotation {annotation}), which orders both startup and drain"),
                    ),
            );
        }
        out.push(
            Finding::new(w, Rule::MeshNativeSidecarMode, Severity::Warning, vec![proxy.into()]).says(
                format!(
                    "{} injects {proxy} into this pod as a classic sidecar",
                    mesh.name()
                ),
                format!(
                    "Set the pod template annotation {annotation}: {} then injects {proxy} as a native sidecar with its own startupProbe (Kubernetes 1.29+)",
                    mesh.name()
                ),
            ),
        );
    }
}
