//! `sidecar-race-agent lint`: race-prone pod templates found before they race. Each
//! workload's pod template is analysed with the agent's own role logic
//! ([`crate::inventory::pod_info::PodInfo`]); [`rules`] turns what it finds into
//! findings with stable IDs, [`fix`] writes the native-sidecar migration.

pub mod cluster;
pub mod fix;
pub mod injection;
pub mod input;
pub mod known;
pub mod mesh_config;
pub mod node;
pub mod refs;
pub mod render;
pub mod rewrite;
pub mod rules;
pub mod sockets;
pub mod workload;

use std::collections::BTreeMap;

use serde::Serialize;

pub use input::Location;
pub use rules::{Finding, Rule, Severity};
pub use workload::Workload;

/// The annotation (on the workload or its pod template) that suppresses findings:
/// IDs or rule names, comma-separated; `all` suppresses every finding.
pub const IGNORE_ANNOTATION: &str = "sidecar-race.io/ignore";

/// A Kubernetes minor version (`1.29`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct KubeVersion {
    pub major: u32,
    pub minor: u32,
}

impl std::str::FromStr for KubeVersion {
    type Err = String;
    /// `1.29`, `v1.29.3`, `1.29.3-gke.100`, or the API's `minor: "29+"`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a Kubernetes version like 1.29");
        let mut parts = s.trim().trim_start_matches('v').split('.');
        let number = |p: Option<&str>| -> Result<u32, String> {
            let p = p.ok_or_else(bad)?;
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().map_err(|_| bad())
        };
        Ok(KubeVersion {
            major: number(parts.next())?,
            minor: number(parts.next())?,
        })
    }
}

impl std::fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What lint is told besides the manifests.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The target cluster's version (`--kube-version`, or read from the cluster).
    pub kube_version: Option<KubeVersion>,
    /// Ports clients were seen dialing, per sidecar container name (runtime evidence:
    /// `--probe-port NAME=PORT`, or `report`'s incidents): the startupProbe's port.
    pub probe_ports: BTreeMap<String, u16>,
    /// Site-wide classic sidecar names (`--sidecar-names`).
    pub site_sidecars: Vec<String>,
    /// Mesh-wide native-injection defaults per injector id: read from the cluster
    /// (`--cluster`) or assumed (`--assume-native-mesh`); absent: classic, assumed.
    pub mesh_defaults: BTreeMap<String, injection::MeshDefault>,
    /// Injectors that inject every pod unless it opts out, per injector id, read
    /// from the cluster (`--cluster`; Consul's `connectInject.default`).
    pub injected_by_default: BTreeMap<String, injection::DefaultInjection>,
    /// Namespaces' labels and annotations by name (Namespace objects in the input),
    /// for `--fix`, which analyses one object at a time.
    pub namespaces: BTreeMap<String, injection::NamespaceMeta>,
}

impl Options {
    /// `--assume-native-mesh` ids: each mesh is assumed to inject native sidecars.
    pub fn assume_native(&mut self, meshes: &[String]) {
        for id in meshes {
            self.mesh_defaults.insert(
                id.clone(),
                injection::MeshDefault {
                    native: true,
                    source: format!("--assume-native-mesh={id}"),
                },
            );
        }
    }
}

/// Every finding of a run, after suppression.
#[derive(Debug, Default, Serialize)]
pub struct Outcome {
    pub workloads: usize,
    pub findings: Vec<Finding>,
    pub suppressed: usize,
    /// Inputs that could not be read or analysed (each also fails the run).
    pub errors: Vec<String>,
}

impl Outcome {
    /// The most severe finding's severity.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }
}

/// The labels and annotations of the Namespace objects in `sources`.
pub fn namespaces(sources: &[input::Source]) -> BTreeMap<String, injection::NamespaceMeta> {
    sources
        .iter()
        .filter_map(|s| input::objects(s).ok())
        .flatten()
        .filter_map(|o| workload::namespace(&o.node))
        .collect()
}

/// The workloads of `sources` (with the labels of Namespace objects among them),
/// and what could not be read.
pub fn load(sources: &[input::Source], opts: &Options) -> (Vec<Workload>, Vec<String>) {
    let mut workloads = Vec::new();
    let mut errors = Vec::new();
    let mut namespaces = BTreeMap::new();
    for source in sources {
        match input::objects(source) {
            Ok(objects) => {
                for o in objects {
                    namespaces.extend(workload::namespace(&o.node));
                    match workload::analyse(o.node, Some(o.location), &opts.site_sidecars) {
                        Ok(Some(w)) => workloads.push(w),
                        Ok(None) => {}
                        Err(e) => errors.push(e.to_string()),
                    }
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    workload::attach_namespaces(&mut workloads, &namespaces);
    (workloads, errors)
}

/// The workload's `sidecar-race.io/ignore` annotation names `rule` (its ID or
/// name, any case) or `all`.
pub fn ignores(w: &Workload, rule: Rule) -> bool {
    w.annotation(IGNORE_ANNOTATION).is_some_and(|v| {
        crate::inventory::sidecars::split_names(v).any(|i| {
            i.eq_ignore_ascii_case("all")
                || i.eq_ignore_ascii_case(rule.id())
                || i.eq_ignore_ascii_case(rule.name())
        })
    })
}

/// The findings of every workload, suppressed ones counted and dropped.
pub fn lint(workloads: &[Workload], opts: &Options) -> Outcome {
    let mut out = Outcome {
        workloads: workloads.len(),
        ..Outcome::default()
    };
    for w in workloads {
        for f in rules::check(w, opts) {
            if ignores(w, f.rule) {
                out.suppressed += 1;
            } else {
                out.findings.push(f);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_versions() {
        let v = |s: &str| s.parse::<KubeVersion>();
        assert_eq!(
            v("1.29"),
            Ok(KubeVersion {
                major: 1,
                minor: 29
            })
        );
        assert_eq!(
            v("v1.33.2-gke.1"),
            Ok(KubeVersion {
                major: 1,
                minor: 33
            })
        );
        assert!(v("1.30") > v("1.29"));
        assert!(v("latest").is_err());
    }
}
