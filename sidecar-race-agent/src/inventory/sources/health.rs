//! Health of a pod source: its error counts, shared with logs and metrics, and its
//! errors written out with their causes.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Health of a pod source, shared with logs and metrics.
#[derive(Debug, Default)]
pub struct SourceStats {
    /// Failures to reach or read the source, and objects that could not be used.
    errors: AtomicU64,
    /// Objects skipped because they were not valid pods (part of `errors`).
    malformed: AtomicU64,
}

impl SourceStats {
    pub fn error(&self) {
        self.errors.fetch_add(1, Relaxed);
    }

    pub fn malformed(&self) {
        self.malformed.fetch_add(1, Relaxed);
        self.error();
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Relaxed)
    }

    pub fn malformed_objects(&self) -> u64 {
        self.malformed.load(Relaxed)
    }
}

/// An error followed by its causes, `: `-separated. kube's errors print only their top
/// ("client error (Connect)"), hiding what an operator needs to act on, such as a
/// kubelet certificate that does not verify.
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}
