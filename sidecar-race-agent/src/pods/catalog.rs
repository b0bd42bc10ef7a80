//! The table of known sidecars and the injectors that add them
//! (`data/known-sidecars.yaml`, embedded at compile time): the agent's role
//! recognition, `lint` and the admission policy generator all read it. The YAML file
//! documents the schema; these structs are its typed form.

use std::{collections::BTreeMap, sync::LazyLock};

use serde::Deserialize;

const TABLE_YAML: &str = include_str!("../../data/known-sidecars.yaml");

/// The parsed table (a broken table fails the first use, and the unit test below).
pub static CATALOG: LazyLock<Catalog> =
    LazyLock::new(|| serde_saphyr::from_str(TABLE_YAML).expect("data/known-sidecars.yaml parses"));

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    pub sidecars: Vec<Sidecar>,
    pub injectors: Vec<Injector>,
    /// Process names of tools that wait for a port (`guarded` incidents).
    pub wait_tools: Vec<String>,
}

/// A sidecar image the agent and lint know.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sidecar {
    pub id: String,
    #[serde(default)]
    pub containers: Vec<String>,
    #[serde(default)]
    pub images: Vec<String>,
    #[serde(default)]
    pub redirect_ports: Vec<u16>,
    #[serde(default)]
    pub ports: Vec<u16>,
    /// UDP ports it receives datagrams on by default (statsd, DogStatsD, syslog).
    #[serde(default)]
    pub udp_ports: Vec<u16>,
    /// UDP ports it receives on only when its configuration turns a receiver on.
    #[serde(default)]
    pub udp_receivers: Vec<u16>,
    /// Flags whose value is the `host:port` it receives UDP datagrams on.
    #[serde(default)]
    pub udp_flags: Vec<String>,
    #[serde(default)]
    pub port_flags: Vec<String>,
    #[serde(default)]
    pub address_flags: Vec<String>,
    pub default_port: Option<u16>,
    pub instance_port_param: Option<String>,
    pub env_prefix: Option<String>,
    /// Flags naming the directory it creates its Unix sockets in.
    #[serde(default)]
    pub socket_flags: Vec<String>,
    pub listen: Option<Listen>,
    pub ready: Option<Ready>,
    pub ready_on_serving_port: Option<String>,
    pub health: Option<Health>,
    #[serde(default)]
    pub uses_listener: bool,
    /// Its images have no shell: an exec probe cannot run in them.
    #[serde(default)]
    pub no_shell: bool,
    pub listener_port: Option<u16>,
    /// The pod annotation that moves the listener off `listener_port`.
    pub listener_port_annotation: Option<String>,
}

/// Where a sidecar listens for the app: the flag that sets it and its default.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listen {
    pub flag: String,
    pub default: String,
}

/// A fixed HTTP endpoint answering 200 once the sidecar serves.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ready {
    pub port: u16,
    pub path: String,
    /// The port is configurable: count it only when the container declares it.
    #[serde(default)]
    pub only_if_declared: bool,
    /// What makes it serve the endpoint where the kubelet reaches it, said to the user
    /// when the container does not declare the port.
    pub enable: Option<String>,
}

/// A readiness endpoint served only when flags ask for it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    pub enable_flag: String,
    pub port_flag: String,
    pub default_port: u16,
    pub address_flag: String,
    pub default_address: String,
    pub path: String,
}

/// A mutating webhook that adds a sidecar to pods.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Injector {
    pub id: String,
    pub name: String,
    pub sidecar: String,
    pub container: String,
    #[serde(default)]
    pub pod_annotations: Switches,
    #[serde(default)]
    pub pod_labels: Switches,
    #[serde(default)]
    pub namespace_labels: Switches,
    #[serde(default)]
    pub namespace_annotations: Switches,
    #[serde(default)]
    pub disable: Switches,
    #[serde(default)]
    pub injected_marks: Vec<String>,
    pub native: Native,
    pub cluster_config: Option<String>,
}

/// Keys and the values that turn something on (`*`: any value).
pub type Switches = BTreeMap<String, Vec<String>>;

/// Whether the key-value map `meta` turns on one of `switches`.
pub fn switched(switches: &Switches, meta: &BTreeMap<String, String>) -> bool {
    switches.iter().any(|(key, values)| {
        meta.get(key)
            .is_some_and(|v| values.iter().any(|want| want == "*" || want == v))
    })
}

/// Whether and how an injector injects a native sidecar.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Native {
    pub supported: bool,
    /// The pod annotation asking for it (what `lint --fix` sets).
    pub annotation: Option<String>,
    #[serde(default)]
    pub annotation_aliases: Vec<String>,
    pub value: Option<String>,
    /// The control-plane switch.
    pub setting: Option<String>,
    pub default_from: Option<String>,
    /// Why it cannot, and what to do instead.
    pub note: Option<String>,
}

/// `gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.8.0` → `cloud-sql-proxy`.
pub fn repository_name(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split(':').next().unwrap_or(last)
}

impl Catalog {
    pub fn sidecar(&self, id: &str) -> Option<&Sidecar> {
        self.sidecars.iter().find(|s| s.id == id)
    }

    /// The injector `id` (tests: every id the table names is one).
    #[cfg(test)]
    pub fn injector(&self, id: &str) -> Option<&Injector> {
        self.injectors.iter().find(|i| i.id == id)
    }

    /// Every container name of a known sidecar (the injectors' included).
    pub fn container_names(&self) -> impl Iterator<Item = &str> {
        self.sidecars
            .iter()
            .flat_map(|s| &s.containers)
            .chain(self.injectors.iter().map(|i| &i.container))
            .map(String::as_str)
    }

    /// Whether process name `name` is a known wait tool (whole name, no patterns).
    pub fn is_wait_tool(&self, name: &str) -> bool {
        self.wait_tools.iter().any(|t| t == name)
    }

    /// The known sidecar a container named `name` running `image` is, by name
    /// first, then image.
    pub fn known(&self, name: &str, image: Option<&str>) -> Option<&Sidecar> {
        self.sidecars
            .iter()
            .find(|s| s.containers.iter().any(|c| c == name))
            .or_else(|| {
                let repo = repository_name(image?);
                self.sidecars
                    .iter()
                    .find(|s| s.images.iter().any(|i| i == repo))
            })
    }

    /// Every image repository of a known sidecar.
    pub fn image_names(&self) -> impl Iterator<Item = &str> {
        self.sidecars
            .iter()
            .flat_map(|s| &s.images)
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_its_references_resolve() {
        let c: Catalog = serde_saphyr::from_str(TABLE_YAML).unwrap();
        assert!(c.sidecars.len() >= 8);
        for i in &c.injectors {
            let s = c
                .sidecar(&i.sidecar)
                .unwrap_or_else(|| panic!("{}: no sidecar {}", i.id, i.sidecar));
            assert!(
                s.containers.contains(&i.container),
                "{}: {} is not a container name of {}",
                i.id,
                i.container,
                s.id
            );
            let n = &i.native;
            assert!(
                n.supported == (n.annotation.is_some() || n.setting.is_some()),
                "{}: a supported native mode says how, an unsupported one does not",
                i.id
            );
            assert!(n.supported || n.note.is_some(), "{}: say why not", i.id);
            assert_eq!(n.annotation.is_some(), n.value.is_some(), "{}", i.id);
        }
        for id in ["istio", "linkerd", "dapr", "vault", "consul", "kuma"] {
            assert!(c.injector(id).is_some(), "{id}");
        }
        let csql = c.sidecar("cloud-sql-proxy").unwrap();
        assert_eq!(csql.health.as_ref().unwrap().default_port, 9090);
        assert_eq!(CATALOG.sidecars.len(), c.sidecars.len());
        for t in &c.wait_tools {
            assert!(
                !t.is_empty() && t.len() < sidecar_race_ebpf::abi::COMM_LEN,
                "{t}: a process name the kernel can record whole"
            );
        }
        assert!(c.is_wait_tool("pg_isready") && !c.is_wait_tool("java"));
    }
}
