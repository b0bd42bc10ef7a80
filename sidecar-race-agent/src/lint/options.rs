//! What lint is told besides the manifests: the flags, and what `--cluster` reads
//! from the cluster (its version, the meshes' injection defaults).

use std::collections::BTreeMap;

use serde::Serialize;

use super::workload::NamespaceMeta;

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
    pub mesh_defaults: BTreeMap<String, MeshDefault>,
    /// Injectors that inject every pod unless it opts out, per injector id, read
    /// from the cluster (`--cluster`; Consul's `connectInject.default`).
    pub injected_by_default: BTreeMap<String, DefaultInjection>,
    /// Namespaces' labels and annotations by name (Namespace objects in the input),
    /// for `--fix`, which analyses one object at a time.
    pub namespaces: BTreeMap<String, NamespaceMeta>,
}

impl Options {
    /// `--assume-native-mesh` ids: each mesh is assumed to inject native sidecars.
    pub fn assume_native(&mut self, meshes: &[String]) {
        for id in meshes {
            self.mesh_defaults.insert(
                id.clone(),
                MeshDefault {
                    native: true,
                    source: format!("--assume-native-mesh={id}"),
                },
            );
        }
    }
}

/// A mesh-wide default for native injection, and where it was learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshDefault {
    pub native: bool,
    /// `istiod 1.27.2 (ENABLE_NATIVE_SIDECARS unset)`, `--assume-native-mesh` …
    pub source: String,
}

/// An injector that injects every pod of the namespaces it covers unless the pod
/// opts out (its `disable` switch), and where that was learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultInjection {
    /// `consul/consul-connect-injector: -default-inject=true`.
    pub source: String,
    /// Namespaces it covers (`*`: all) and those it leaves out.
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

impl DefaultInjection {
    pub fn covers(&self, namespace: Option<&str>) -> bool {
        let ns = namespace.unwrap_or("default");
        (self.allow.iter().any(|a| a == "*" || a == ns)) && !self.deny.iter().any(|d| d == ns)
    }
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
