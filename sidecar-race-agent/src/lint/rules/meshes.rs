//! Sidecars injected at admission as classic sidecars: SR006 (Linkerd's
//! wait-before-exit sleep), SR008 (Istio's holdApplicationUntilProxyStarts), SR009
//! (an injector that can inject a native sidecar is not asked to), SR011 (one that
//! cannot, whose sidecar the app uses).

use super::evidence::dialers;
use crate::{
    lint::{
        finding::{Finding, Rule, Severity},
        injection::{self, Injection},
        known,
        options::Options,
        workload::Workload,
    },
    pods::catalog::CATALOG,
};

pub(super) fn meshes(w: &Workload, opts: &Options, out: &mut Vec<Finding>) {
    for inj in injection::injections(w, opts) {
        let i = inj.injector;
        let proxy = i.container.as_str();
        if i.id == "linkerd"
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
                        known::LINKERD_NATIVE
                    ),
                ),
            );
        }
        if inj.mode.native() {
            continue;
        }
        match (&i.native.annotation, &i.native.value) {
            (Some(key), Some(value)) => classic_with_native_annotation(w, &inj, key, value, out),
            _ if i.native.supported => classic_with_native_setting(w, &inj, out),
            _ => classic_only(w, &inj, out),
        }
    }
}

fn classic_with_native_annotation(
    w: &Workload,
    inj: &Injection,
    key: &str,
    value: &str,
    out: &mut Vec<Finding>,
) {
    let i = inj.injector;
    let proxy = i.container.as_str();
    let annotation = format!("{key}: \"{value}\"");
    let why = inj.mode.why_classic(i);
    if i.id == "istio" && known::istio_holds_application(w) {
        out.push(
            Finding::new(w, Rule::IstioHoldApplication, Severity::Warning, vec![proxy.into()])
                .says(
                    "holdApplicationUntilProxyStarts starts the app once istio-proxy is ready, but covers startup only: at drain istio-proxy gets SIGTERM together with the app and can stop serving first".into(),
                    format!("Use Istio's native-sidecar mode (pod annotation {annotation}), which orders both startup and drain; --fix sets it"),
                ),
        );
    }
    out.push(
        Finding::new(w, Rule::MeshNativeSidecarMode, Severity::Warning, vec![proxy.into()]).says(
            format!(
                "{} injects {proxy} into this pod as a classic sidecar{why}",
                i.name
            ),
            format!(
                "Set the pod template annotation {annotation} (--fix sets it): {} then injects {proxy} as a native sidecar with its own startupProbe (Kubernetes 1.29+)",
                i.name
            ),
        ),
    );
}

fn classic_with_native_setting(w: &Workload, inj: &Injection, out: &mut Vec<Finding>) {
    let i = inj.injector;
    let proxy = i.container.as_str();
    let setting = i.native.setting.as_deref().unwrap_or_default();
    out.push(
        Finding::new(w, Rule::MeshNativeSidecarMode, Severity::Warning, vec![proxy.into()]).says(
            format!(
                "{} injects {proxy} into this pod as a classic sidecar{}",
                i.name,
                inj.mode.why_classic(i)
            ),
            format!(
                "Turn on {}'s native sidecars with {setting}: it has no pod annotation for it, so --fix cannot",
                i.name
            ),
        ),
    );
}

/// An injector without a native mode: a finding only when the app uses the sidecar
/// (for Vault's agent: dials its listener), since --fix cannot order it.
fn classic_only(w: &Workload, inj: &Injection, out: &mut Vec<Finding>) {
    let i = inj.injector;
    let proxy = i.container.as_str();
    let Some(sidecar) = CATALOG.sidecar(&i.sidecar) else {
        return;
    };
    let mut used_by = Vec::new();
    if sidecar.uses_listener {
        let moved = sidecar
            .listener_port_annotation
            .as_deref()
            .and_then(|key| w.annotation(key))
            .and_then(|port| port.trim().parse().ok());
        if let Some(port) = moved.or(sidecar.listener_port) {
            used_by.extend(dialers(w, proxy, port));
        }
        if used_by.is_empty() {
            return;
        }
    }
    let mut use_clause = if used_by.is_empty() {
        String::new()
    } else {
        format!(" and {} dials its listener", used_by.join(", "))
    };
    if let Some(source) = &inj.by_default {
        use_clause.insert_str(0, &format!(" (by the cluster's default, {source})"));
    }
    let mut containers = vec![proxy.to_string()];
    containers.extend(used_by);
    out.push(
        Finding::new(w, Rule::InjectedClassicSidecar, Severity::Warning, containers).says(
            format!(
                "{} injects {proxy} into this pod as a classic sidecar{use_clause}: the app's first and last calls race it",
                i.name
            ),
            format!(
                "{}; --fix cannot change how it is injected",
                i.native.note.as_deref().unwrap_or("it has no native-sidecar mode")
            ),
        ),
    );
}
