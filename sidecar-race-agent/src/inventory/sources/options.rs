//! Options of the network sources: the node, the kubelet's address and credentials,
//! the poll interval and the handle that asks for a read at once.

use std::{path::PathBuf, sync::Arc};

use tokio::sync::Notify;

/// Options of the network sources.
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// `spec.nodeName` to watch (`NODE_NAME` from the downward API).
    pub node_name: Option<String>,
    /// The kubelet's address (`NODE_IP`).
    pub node_ip: Option<String>,
    pub kubelet_port: u16,
    /// CA bundle for the kubelet's serving certificate.
    pub kubelet_ca: Option<PathBuf>,
    pub kubelet_insecure: bool,
    /// Bearer token file for the kubelet (the pod's service-account token).
    pub token_file: Option<PathBuf>,
    pub poll_interval: std::time::Duration,
    /// Notified when the agent sees a pod the source has not reported: polling
    /// sources (kubelet, file) read again at once.
    pub refresh: Arc<Notify>,
}
