//! The pods' CNI network: the bridge plugin with host-local addresses. `isGateway`
//! gives the host an address on the bridge (so that the host reaches pod IPs, as the
//! kubelet's probes do); no masquerade, so nothing a pod sends is forwarded out of the
//! host.

use std::path::Path;

use serde_json::json;

/// A bridge network for one runtime's pods.
pub struct BridgeNetwork<'a> {
    pub name: &'a str,
    pub bridge: &'a str,
    /// The pods' subnet, e.g. `10.237.42.0/24`.
    pub subnet: &'a str,
    /// host-local's allocation state.
    pub ipam_dir: &'a Path,
    /// The bridge's address, when pods route everything through it (the cluster:
    /// Services go through kube-proxy's DNAT on the node). `None`: no default route,
    /// pods reach nothing but each other and the host.
    pub default_gateway: Option<&'a str>,
    /// The loopback plugin after the bridge.
    pub loopback: bool,
}

impl BridgeNetwork<'_> {
    /// The `.conflist` (CNI 0.4.0).
    pub fn conflist(&self) -> String {
        let mut range = json!({"subnet": self.subnet});
        let mut bridge = json!({
            "type": "bridge",
            "bridge": self.bridge,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
        });
        if let Some(gateway) = self.default_gateway {
            range["gateway"] = json!(gateway);
            bridge["isDefaultGateway"] = json!(true);
        }
        bridge["ipam"] = json!({
            "type": "host-local",
            "dataDir": self.ipam_dir.display().to_string(),
            "ranges": [[range]],
        });
        let mut plugins = vec![bridge];
        if self.loopback {
            plugins.push(json!({"type": "loopback"}));
        }
        json!({
            "cniVersion": "0.4.0",
            "name": self.name,
            "plugins": plugins,
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn isolated_network_has_no_default_route() {
        let n: Value = serde_json::from_str(
            &BridgeNetwork {
                name: "sr-cri-7",
                bridge: "srcri7",
                subnet: "10.237.8.0/24",
                ipam_dir: Path::new("/tmp/sr-cri-7/ipam"),
                default_gateway: None,
                loopback: false,
            }
            .conflist(),
        )
        .unwrap();
        assert_eq!(n["plugins"].as_array().unwrap().len(), 1);
        let b = &n["plugins"][0];
        assert_eq!(b["bridge"], "srcri7");
        assert_eq!(b["isGateway"], true);
        assert_eq!(b["ipMasq"], false);
        assert!(b.get("isDefaultGateway").is_none());
        assert_eq!(
            b["ipam"],
            json!({"type": "host-local", "dataDir": "/tmp/sr-cri-7/ipam",
                   "ranges": [[{"subnet": "10.237.8.0/24"}]]})
        );
    }

    #[test]
    fn node_network_routes_through_the_bridge() {
        let n: Value = serde_json::from_str(
            &BridgeNetwork {
                name: "sidecar-race-cluster",
                bridge: "srk8s0",
                subnet: "10.238.0.0/24",
                ipam_dir: Path::new("/x/ipam"),
                default_gateway: Some("10.238.0.1"),
                loopback: true,
            }
            .conflist(),
        )
        .unwrap();
        let b = &n["plugins"][0];
        assert_eq!(b["isDefaultGateway"], true);
        assert_eq!(b["ipam"]["ranges"][0][0]["gateway"], "10.238.0.1");
        assert_eq!(n["plugins"][1], json!({"type": "loopback"}));
    }
}
