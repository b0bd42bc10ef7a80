//! What a pod source sends: a change to this node's pods.

use crate::pods::pod_info::PodInfo;

/// A change to this node's pods.
#[derive(Debug, Clone, PartialEq)]
pub enum PodUpdate {
    Apply(Box<PodInfo>),
    Delete {
        uid: String,
    },
    /// A complete list: pods not in it are gone, except the `unparsable` ones (uids
    /// of listed objects that could not be read), which keep their last good version.
    Replace {
        pods: Vec<PodInfo>,
        unparsable: Vec<String>,
    },
}
