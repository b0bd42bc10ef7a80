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

/// Who exports: `service.name`, `service.version`, `k8s.node.name` (the `NODE_NAME`
/// the DaemonSet sets from `spec.nodeName`) and `k8s.cluster.name` (`--cluster-name`).
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub node: Option<String>,
    pub cluster: Option<String>,
}

impl Origin {
    /// The node from the environment, the cluster as given.
    pub fn from_env(cluster: Option<String>) -> Origin {
        Origin {
            node: std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()),
            cluster: cluster.filter(|c| !c.is_empty()),
        }
    }

    pub fn resource(&self) -> Resource {
        let mut attributes = vec![
            string("service.name", "sidecar-race-agent"),
            string("service.version", env!("CARGO_PKG_VERSION")),
        ];
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
