//! Which containers in a pod's `containers[]` are classic sidecars rather than the
//! pod's application: a sidecar race needs to know who serves whom. A container listed
//! in `containers[]` is a classic sidecar when any of these says so (first match is
//! the evidence shown to users):
//!
//! 1. the pod annotation `sidecar-race.io/sidecars: "a,b"` names it;
//! 2. the mesh injected it: Istio's `sidecar.istio.io/status` lists it, or Linkerd's
//!    `linkerd.io/proxy-version` is set and it is `linkerd-proxy`;
//! 3. its name is a well-known sidecar's (a container name in the known-sidecars
//!    table, [`crate::pods::catalog`]), or is `proxy`/`sidecar` or ends in `-proxy`/`-sidecar`;
//! 4. its image is a well-known sidecar's (an image in that table: the repository's
//!    last path segment, without tag or digest);
//! 5. the site-wide list (`--sidecar-names`) names it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::pods::catalog::{CATALOG, repository_name};

/// The pod annotation that declares classic sidecars explicitly.
pub const ANNOTATION: &str = "sidecar-race.io/sidecars";
const ISTIO_STATUS: &str = "sidecar.istio.io/status";
const LINKERD_VERSION: &str = "linkerd.io/proxy-version";

/// Why a container counts as a classic sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Evidence {
    Annotation,
    IstioInjection,
    LinkerdInjection,
    Name,
    Image,
    SiteName,
}

impl Evidence {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What the pod's annotations say about its sidecars, read once per pod.
#[derive(Debug, Default)]
pub struct PodSidecarHints {
    annotated: Vec<String>,
    istio: Vec<String>,
    linkerd: bool,
}

impl PodSidecarHints {
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Self {
        let Some(a) = annotations else {
            return Self::default();
        };
        let annotated = a
            .get(ANNOTATION)
            .map(|v| split_names(v).map(str::to_string).collect())
            .unwrap_or_default();
        // {"initContainers":["istio-init"],"containers":["istio-proxy"],...}
        let istio = a
            .get(ISTIO_STATUS)
            .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
            .and_then(|v| {
                v.get("containers")?.as_array().map(|names| {
                    names
                        .iter()
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect()
                })
            })
            .unwrap_or_default();
        Self {
            annotated,
            istio,
            linkerd: a.contains_key(LINKERD_VERSION),
        }
    }

    /// The evidence that container `name` (image `image`) in `containers[]` is a
    /// classic sidecar, if any.
    pub fn recognise(&self, name: &str, image: Option<&str>) -> Option<Evidence> {
        if self.annotated.iter().any(|n| n == name) {
            Some(Evidence::Annotation)
        } else if self.istio.iter().any(|n| n == name) {
            Some(Evidence::IstioInjection)
        } else if self.linkerd && name == "linkerd-proxy" {
            Some(Evidence::LinkerdInjection)
        } else if known_name(name) {
            Some(Evidence::Name)
        } else if image.is_some_and(known_image) {
            Some(Evidence::Image)
        } else {
            None
        }
    }
}

/// `a, b,c` → `a`, `b`, `c` (empty entries skipped).
pub fn split_names(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|n| !n.is_empty())
}

fn known_name(name: &str) -> bool {
    CATALOG.container_names().any(|n| n == name)
        || matches!(name, "proxy" | "sidecar")
        || name.ends_with("-proxy")
        || name.ends_with("-sidecar")
}

fn known_image(image: &str) -> bool {
    let repo = repository_name(image);
    CATALOG.image_names().any(|n| n == repo)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints(pairs: &[(&str, &str)]) -> PodSidecarHints {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PodSidecarHints::from_annotations(Some(&map))
    }

    #[test]
    fn well_known_names_and_images() {
        let none = PodSidecarHints::default();
        for name in [
            "istio-proxy",
            "linkerd-proxy",
            "daprd",
            "cloud-sql-proxy",
            "vault-agent",
            "consul-dataplane",
            "otc-container",
        ] {
            assert_eq!(none.recognise(name, None), Some(Evidence::Name), "{name}");
        }
        for name in CATALOG.container_names() {
            assert_eq!(none.recognise(name, None), Some(Evidence::Name), "{name}");
        }
        assert_eq!(none.recognise("auth-proxy", None), Some(Evidence::Name));
        assert_eq!(none.recognise("proxy", None), Some(Evidence::Name));
        assert_eq!(none.recognise("log-sidecar", None), Some(Evidence::Name));
        assert_eq!(none.recognise("app", None), None);
        assert_eq!(none.recognise("proxyless", None), None);
        assert_eq!(
            none.recognise(
                "db",
                Some("gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.8.0")
            ),
            Some(Evidence::Image)
        );
        assert_eq!(
            none.recognise("mesh", Some("docker.io/istio/proxyv2:1.24.0@sha256:abc")),
            Some(Evidence::Image)
        );
        assert_eq!(
            none.recognise("web", Some("registry.example.com/envoy-admin-ui:1")),
            None
        );
        assert_eq!(none.recognise("web", Some("nginx:1.27")), None);
    }

    #[test]
    fn annotations_name_sidecars() {
        let h = hints(&[(ANNOTATION, " authz , log-shipper,")]);
        assert_eq!(h.recognise("authz", None), Some(Evidence::Annotation));
        assert_eq!(h.recognise("log-shipper", None), Some(Evidence::Annotation));
        assert_eq!(h.recognise("app", None), None);
        let istio = hints(&[(
            ISTIO_STATUS,
            r#"{"initContainers":["istio-init"],"containers":["mesh-proxy"],"volumes":[]}"#,
        )]);
        assert_eq!(
            istio.recognise("mesh-proxy", None),
            Some(Evidence::IstioInjection)
        );
        assert_eq!(istio.recognise("istio-init", None), None);
        let l5d = hints(&[(LINKERD_VERSION, "edge-24.11.8")]);
        assert_eq!(
            l5d.recognise("linkerd-proxy", None),
            Some(Evidence::LinkerdInjection)
        );
        let broken = hints(&[(ISTIO_STATUS, "not json")]);
        assert_eq!(broken.recognise("app", None), None);
    }
}
