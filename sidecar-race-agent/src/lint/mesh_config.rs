//! `lint --cluster`: the meshes' own native-injection defaults, read-only. Istio:
//! istiod's `ENABLE_NATIVE_SIDECARS` env and its version (native by default from
//! 1.27); Linkerd: `proxy.nativeSidecar` in the `linkerd-config` ConfigMap's values.
//! A mesh whose configuration cannot be read keeps the classic assumption.
//!
//! Consul injects by default when its connect injector runs with
//! `-default-inject=true` (the Helm value `connectInject.default`): that flag, and the
//! namespaces it covers, are read from the injector's Deployment, read-only.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Container},
};
use kube::{Api, Client, api::ListParams};

use super::options::{DefaultInjection, MeshDefault};

/// Namespaces consul-k8s never injects, whatever its flags.
const CONSUL_NEVER_INJECTS: [&str; 2] = ["kube-system", "kube-public"];

/// Consul's default injection, from its connect injector's Deployment: the
/// `sidecar-injector` container's command line (the chart runs it through
/// `/bin/sh -ec "consul-k8s-control-plane inject-connect ... -default-inject=true"`).
/// `None` unless it injects by default.
pub fn consul_default_inject(injector: &Deployment) -> Option<DefaultInjection> {
    let c = container(injector, "sidecar-injector")?;
    let words: Vec<String> = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .flat_map(|w| w.split_whitespace())
        .map(|w| w.trim_matches(['"', '\\', '\'']).to_string())
        .collect();
    // Go's flag package: -flag, --flag, -flag=value.
    let value = |w: &str, flag: &str| -> Option<String> {
        let w = w.strip_prefix("--").or_else(|| w.strip_prefix('-'))?;
        let rest = w.strip_prefix(flag)?;
        match rest.strip_prefix('=') {
            Some(v) => Some(v.trim_matches('"').to_string()),
            None => rest.is_empty().then(|| "true".to_string()),
        }
    };
    let on = words.iter().find_map(|w| value(w, "default-inject"))?;
    if on != "true" {
        return None;
    }
    let mut allow: Vec<String> = words
        .iter()
        .filter_map(|w| value(w, "allow-k8s-namespace"))
        .collect();
    if allow.is_empty() {
        allow.push("*".into());
    }
    let mut deny: Vec<String> = words
        .iter()
        .filter_map(|w| value(w, "deny-k8s-namespace"))
        .collect();
    deny.extend(CONSUL_NEVER_INJECTS.map(String::from));
    let meta = &injector.metadata;
    Some(DefaultInjection {
        source: format!(
            "{}/{}: -default-inject=true",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        ),
        allow,
        deny,
    })
}

/// The injectors that inject by default, per the cluster (read-only; what cannot be
/// read is left out: injection by annotation only).
pub async fn read_default_injection(client: &Client) -> BTreeMap<String, DefaultInjection> {
    let mut out = BTreeMap::new();
    let deployments: Api<Deployment> = Api::all(client.clone());
    if let Ok(list) = deployments
        .list(&ListParams::default().labels("app=consul,component=connect-injector"))
        .await
        && let Some(d) = list.items.iter().find_map(consul_default_inject)
    {
        out.insert("consul".into(), d);
    }
    out
}

/// Container `name` of Deployment `d`'s pod template.
fn container<'a>(d: &'a Deployment, name: &str) -> Option<&'a Container> {
    d.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)
}

/// Istio's default, from istiod's Deployment.
pub fn istio_default(istiod: &Deployment) -> Option<MeshDefault> {
    let c = container(istiod, "discovery")?;
    let tag = c
        .image
        .as_deref()
        .and_then(|i| i.rsplit_once(':'))
        .map(|(_, t)| t.to_string())
        .unwrap_or_default();
    let env = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "ENABLE_NATIVE_SIDECARS")
        .and_then(|e| e.value.clone());
    let (native, why) = match env.as_deref() {
        Some(v) => (v == "true", format!("ENABLE_NATIVE_SIDECARS={v}")),
        None => {
            let minor = tag
                .strip_prefix("1.")
                .and_then(|r| r.split(['.', '-']).next())
                .and_then(|m| m.parse::<u32>().ok());
            let native = minor.is_some_and(|m| m >= 27);
            let default = if native { "on" } else { "off" };
            (
                native,
                format!("ENABLE_NATIVE_SIDECARS unset: {default} by default"),
            )
        }
    };
    Some(MeshDefault {
        native,
        source: format!("istiod {tag}, {why}"),
    })
}

/// Linkerd's default, from the `values` of its `linkerd-config` ConfigMap.
pub fn linkerd_default(config: &ConfigMap) -> Option<MeshDefault> {
    let values = config.data.as_ref()?.get("values")?;
    let v: serde_json::Value = serde_saphyr::from_str(values).ok()?;
    let native = v.pointer("/proxy/nativeSidecar").and_then(|n| n.as_bool());
    let version = v
        .get("linkerdVersion")
        .and_then(|n| n.as_str())
        .unwrap_or("(version unknown)");
    Some(MeshDefault {
        native: native == Some(true),
        source: format!(
            "Linkerd {version}, proxy.nativeSidecar={}",
            native.map_or("unset".into(), |n| n.to_string())
        ),
    })
}

/// The meshes' defaults the cluster shows (read-only; what cannot be read is left
/// out, so lint keeps assuming classic injection for it).
pub async fn read(client: &Client) -> BTreeMap<String, MeshDefault> {
    let mut out = BTreeMap::new();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "istio-system");
    if let Ok(list) = deployments
        .list(&ListParams::default().labels("app=istiod"))
        .await
        && let Some(d) = list.items.iter().find_map(istio_default)
    {
        out.insert("istio".into(), d);
    }
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "linkerd");
    if let Ok(Some(cm)) = maps.get_opt("linkerd-config").await
        && let Some(d) = linkerd_default(&cm)
    {
        out.insert("linkerd".into(), d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn istiod(image: &str, env: serde_json::Value) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "istiod", "namespace": "istio-system"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "discovery", "image": image, "env": env}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn istio_native_by_env_or_by_version() {
        let d = istio_default(&istiod(
            "docker.io/istio/pilot:1.27.1",
            serde_json::json!([]),
        ))
        .unwrap();
        assert!(d.native, "{d:?}");
        assert_eq!(
            d.source,
            "istiod 1.27.1, ENABLE_NATIVE_SIDECARS unset: on by default"
        );
        let old = istio_default(&istiod(
            "docker.io/istio/pilot:1.24.2",
            serde_json::json!([]),
        ))
        .unwrap();
        assert!(!old.native);
        let on = istio_default(&istiod(
            "docker.io/istio/pilot:1.24.2",
            serde_json::json!([{"name": "ENABLE_NATIVE_SIDECARS", "value": "true"}]),
        ))
        .unwrap();
        assert!(on.native);
        let off = istio_default(&istiod(
            "docker.io/istio/pilot:1.28.0",
            serde_json::json!([{"name": "ENABLE_NATIVE_SIDECARS", "value": "false"}]),
        ))
        .unwrap();
        assert!(!off.native);
    }

    #[test]
    fn consul_injects_by_default_where_its_injector_says() {
        let injector = |script: &str| -> Deployment {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "consul-connect-injector", "namespace": "consul"},
                "spec": {"selector": {}, "template": {"spec": {"containers": [
                    {"name": "sidecar-injector", "image": "hashicorp/consul-k8s-control-plane:1.8.0",
                     "command": ["/bin/sh", "-ec", script]}]}}}
            }))
            .unwrap()
        };
        let on = consul_default_inject(&injector(
            "consul-k8s-control-plane inject-connect \\\n  -log-level=info \\\n  -default-inject=true \\\n  -allow-k8s-namespace=\"*\" \\\n  -deny-k8s-namespace=\"legacy\" \\\n  -listen=:8080\n",
        ))
        .unwrap();
        assert_eq!(
            on.source,
            "consul/consul-connect-injector: -default-inject=true"
        );
        assert_eq!(on.allow, ["*"]);
        assert_eq!(on.deny, ["legacy", "kube-system", "kube-public"]);
        assert!(on.covers(Some("shop")));
        assert!(!on.covers(Some("legacy")) && !on.covers(Some("kube-system")));
        let only = consul_default_inject(&injector(
            "consul-k8s-control-plane inject-connect -default-inject -allow-k8s-namespace=\"shop\"",
        ))
        .unwrap();
        assert!(only.covers(Some("shop")) && !only.covers(Some("ops")));
        assert_eq!(
            consul_default_inject(&injector(
                "consul-k8s-control-plane inject-connect -default-inject=false"
            )),
            None
        );
    }

    #[test]
    fn linkerd_native_from_its_values() {
        let cm = |values: &str| -> ConfigMap {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "linkerd-config"},
                "data": {"values": values}}))
            .unwrap()
        };
        let on = linkerd_default(&cm(
            "linkerdVersion: edge-26.5.2\nproxy:\n  nativeSidecar: true\n",
        ))
        .unwrap();
        assert!(on.native);
        assert_eq!(on.source, "Linkerd edge-26.5.2, proxy.nativeSidecar=true");
        let off = linkerd_default(&cm(
            "linkerdVersion: stable-2.14.10\nproxy:\n  logLevel: warn\n",
        ))
        .unwrap();
        assert!(!off.native);
    }
}
