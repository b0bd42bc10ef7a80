//! The socket a client's last Unix refusal resolved to: a storm on one socket
//! resolves it through the client's mounts once.

use std::sync::Arc;

use super::incidents::Key;
use crate::{detect::service::UnixSocket, names::UnixName};

/// The socket a client's last Unix refusal resolved to, with its incident key.
pub(super) struct ResolvedSocket {
    /// The pod metadata's generation it was resolved under (`None`: not tracked).
    pub(super) generation: Option<u64>,
    pub(super) pod_uid: Arc<str>,
    pub(super) name: UnixName,
    pub(super) key: Key,
    pub(super) socket: UnixSocket,
}
