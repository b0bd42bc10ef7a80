//! Sidecars injected at admission, which appear in no template: which injectors
//! ([`crate::pods::catalog`]'s `injectors`) will add one to a workload's pods (pod
//! annotations and labels, the marks injection leaves, the namespace's labels and
//! annotations), and whether they inject it as a native sidecar (the pod's
//! annotation, else the mesh-wide default read from the cluster or assumed with
//! `--assume-native-mesh`).

use std::collections::BTreeMap;

use super::{options::Options, workload::Workload};
use crate::{
    pods::catalog::{CATALOG, Injector, switched},
    pods::pod_info::Role,
};

/// How the injected sidecar will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Native: the pod asks for it, or the template already has it native.
    NativeByPod,
    /// Native by the mesh-wide default (its source).
    NativeByDefault(String),
    /// Classic, per the mesh default read from the cluster (its source).
    ClassicByDefault(String),
    /// Classic: the pod's annotation turns native mode off.
    ClassicByPod,
    /// Classic, assumed: the mesh's defaults were not read.
    ClassicAssumed,
}

impl Mode {
    pub fn native(&self) -> bool {
        matches!(self, Mode::NativeByPod | Mode::NativeByDefault(_))
    }

    /// The clause a finding adds on where "classic" comes from.
    pub fn why_classic(&self, injector: &Injector) -> String {
        match self {
            Mode::ClassicByDefault(source) => format!(" (the cluster's default: {source})"),
            Mode::ClassicAssumed if injector.native.supported => format!(
                " (assumed: without --cluster lint does not see {}'s mesh-wide default; --assume-native-mesh={} if it injects native sidecars)",
                injector.name, injector.id
            ),
            _ => String::new(),
        }
    }
}

/// One injector that adds its sidecar to the workload's pods.
#[derive(Debug, Clone)]
pub struct Injection {
    pub injector: &'static Injector,
    pub mode: Mode,
    /// Injected only by the injector's cluster-wide default (its source).
    pub by_default: Option<String>,
}

/// The pod's annotations and labels together (injectors read either).
fn pod_meta(w: &Workload) -> BTreeMap<String, String> {
    let mut meta = w.labels.clone();
    meta.extend(w.annotations.clone());
    meta
}

/// Whether `i` injects `w`'s pods: `Some(None)` by the pod's or its namespace's
/// switches (or marks), `Some(Some(source))` only by the injector's cluster-wide
/// default.
fn injects(i: &Injector, w: &Workload, opts: &Options) -> Option<Option<String>> {
    let pod = pod_meta(w);
    if i.injected_marks
        .iter()
        .any(|m| w.annotations.contains_key(m))
    {
        return Some(None);
    }
    if switched(&i.disable, &pod) {
        return None;
    }
    if switched(&i.pod_annotations, &w.annotations) || switched(&i.pod_labels, &w.labels) {
        return Some(None);
    }
    let by_namespace = w.namespace_meta.as_ref().is_some_and(|ns| {
        switched(&i.namespace_labels, &ns.labels)
            || switched(&i.namespace_annotations, &ns.annotations)
    });
    if by_namespace {
        return Some(None);
    }
    let default = opts.injected_by_default.get(&i.id)?;
    default
        .covers(w.namespace.as_deref())
        .then(|| Some(default.source.clone()))
}

/// The pod's own answer to "native?": its native annotation (or an alias), or the
/// injected container already in initContainers with restartPolicy: Always.
fn pod_says_native(i: &Injector, w: &Workload) -> Option<bool> {
    if w.info.role(&i.container) == Some(Role::NativeSidecar) {
        return Some(true);
    }
    let n = &i.native;
    let want = n.value.as_deref()?;
    n.annotation
        .iter()
        .chain(&n.annotation_aliases)
        .find_map(|key| w.annotation(key))
        .map(|v| v == want)
}

/// The injectors that add a sidecar to `w`'s pods, and how.
pub fn injections(w: &Workload, opts: &Options) -> Vec<Injection> {
    CATALOG
        .injectors
        .iter()
        .filter_map(|i| Some((i, injects(i, w, opts)?)))
        .map(|(i, by_default)| {
            let mode = match (pod_says_native(i, w), opts.mesh_defaults.get(&i.id)) {
                (Some(true), _) => Mode::NativeByPod,
                (Some(false), _) => Mode::ClassicByPod,
                (None, None) => Mode::ClassicAssumed,
                (None, Some(d)) if d.native => Mode::NativeByDefault(d.source.clone()),
                (None, Some(d)) => Mode::ClassicByDefault(d.source.clone()),
            };
            Injection {
                injector: i,
                mode,
                by_default,
            }
        })
        .collect()
}

/// `--assume-native-mesh` values: the injectors that can inject native sidecars.
pub fn assumable_meshes() -> Vec<&'static str> {
    CATALOG
        .injectors
        .iter()
        .filter(|i| i.native.supported)
        .map(|i| i.id.as_str())
        .collect()
}
