//! What the detector may know of pods beyond the kernel (names and intent), as a
//! trait: the pod store answers it, tests answer it with fixtures, and without a pod
//! source `NoMeta` answers nothing.

use jiff::Timestamp;

use super::pod_info::PodInfo;

/// What the detector knows of pods beyond the kernel (names and intent).
pub trait PodMeta {
    fn pod(&self, uid: &str) -> Option<&PodInfo>;
    /// The pod source reports the pod deleted.
    fn is_deleted(&self, uid: &str) -> bool;
    /// Name of a runtime container id.
    fn container_name(&self, container_id: &str) -> Option<&str>;
    /// A wall-clock time of the pod source in the kernel's boot clock.
    fn boot_ns(&self, t: Timestamp) -> Option<u64>;
    /// Every pod the source reports (for findings that need no kernel event).
    fn each_pod(&self, f: &mut dyn FnMut(&PodInfo));
    /// Whether a pod source feeds it: what is unknown now may still be told.
    fn has_source(&self) -> bool {
        true
    }
    /// A number that changes whenever an answer may have (`None`: not tracked, so
    /// nothing derived from the answers may be kept).
    fn generation(&self) -> Option<u64> {
        None
    }
}

/// No pod source: detection from the kernel alone.
pub struct NoMeta;

impl PodMeta for NoMeta {
    fn pod(&self, _: &str) -> Option<&PodInfo> {
        None
    }
    fn is_deleted(&self, _: &str) -> bool {
        false
    }
    fn container_name(&self, _: &str) -> Option<&str> {
        None
    }
    fn boot_ns(&self, _: Timestamp) -> Option<u64> {
        None
    }
    fn each_pod(&self, _: &mut dyn FnMut(&PodInfo)) {}
    fn has_source(&self) -> bool {
        false
    }
    fn generation(&self) -> Option<u64> {
        Some(0)
    }
}
