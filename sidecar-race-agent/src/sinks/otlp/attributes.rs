//! OTLP attributes, and the resource every export of the agent carries: one builder
//! for the metrics and the incident log records, so both name the agent, its node and
//! its cluster by the OpenTelemetry semantic conventions (`service.*`, `k8s.*`).

use opentelemetry_proto::tonic::{
    common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value},
    resource::v1::Resource,
};

pub fn string(key: &str, value: &str) -> KeyValue {
    value_of(key, any_value::Value::StringValue(value.to_string()))
}

pub fn int(key: &str, value: i64) -> KeyValue {
    value_of(key, any_value::Value::IntValue(value))
}

pub fn double(key: &str, value: f64) -> KeyValue {
    value_of(key, any_value::Value::DoubleValue(value))
}

pub fn boolean(key: &str, value: bool) -> KeyValue {
    value_of(key, any_value::Value::BoolValue(value))
}

fn value_of(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// Who exports: `service.name`, `service.version`, `service.instance.id`,
/// `k8s.node.name` (the `NODE_NAME` the DaemonSet sets from `spec.nodeName`) and
/// `k8s.cluster.name` (`--cluster-name`).
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub node: Option<String>,
    pub cluster: Option<String>,
    /// The host's name, the instance's name when no node is given (run outside a pod).
    pub host: Option<String>,
}

impl Origin {
    /// The node from the environment, the cluster as given.
    pub fn from_env(cluster: Option<String>) -> Origin {
        Origin {
            node: std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()),
            cluster: cluster.filter(|c| !c.is_empty()),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty()),
        }
    }

    /// One agent runs per node, so the node names the instance, within its cluster
    /// (`prod-eu/node-1`): unique across a fleet whose clusters are named, and the same
    /// across the agent's restarts on the node, as a Prometheus `instance` should be.
    pub fn instance(&self) -> Option<String> {
        let node = self.node.as_ref().or(self.host.as_ref())?;
        Some(match &self.cluster {
            Some(cluster) => format!("{cluster}/{node}"),
            None => node.clone(),
        })
    }

    pub fn resource(&self) -> Resource {
        let mut attributes = vec![
            string("service.name", "sidecar-race-agent"),
            string("service.version", env!("CARGO_PKG_VERSION")),
        ];
        if let Some(instance) = self.instance() {
            attributes.push(string("service.instance.id", &instance));
        }
        if let Some(node) = &self.node {
            attributes.push(string("k8s.node.name", node));
        }
        if let Some(cluster) = &self.cluster {
            attributes.push(string("k8s.cluster.name", cluster));
        }
        Resource {
            attributes,
            ..Default::default()
        }
    }
}

/// The instrumentation scope of everything the agent exports.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: "sidecar-race-agent".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attribute(resource: &Resource, key: &str) -> Option<String> {
        resource.attributes.iter().find(|a| a.key == key).map(|a| {
            match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                other => panic!("{key}: {other:?}"),
            }
        })
    }

    #[test]
    fn the_instance_is_the_node_within_its_cluster_else_the_host() {
        let origin = Origin {
            node: Some("node-7".into()),
            cluster: Some("fleet-a".into()),
            host: Some("host".into()),
        };
        let r = origin.resource();
        assert_eq!(
            attribute(&r, "service.instance.id").as_deref(),
            Some("fleet-a/node-7")
        );
        assert_eq!(attribute(&r, "k8s.node.name").as_deref(), Some("node-7"));
        assert_eq!(
            attribute(&r, "k8s.cluster.name").as_deref(),
            Some("fleet-a")
        );
        let outside = Origin {
            node: None,
            cluster: None,
            host: Some("laptop".into()),
        };
        assert_eq!(
            attribute(&outside.resource(), "service.instance.id").as_deref(),
            Some("laptop")
        );
        assert_eq!(attribute(&outside.resource(), "k8s.node.name"), None);
    }
}
