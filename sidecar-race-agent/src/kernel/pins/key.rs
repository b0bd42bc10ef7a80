//! The layout key: what must be equal for a new agent to adopt what an old one left
//! pinned. The same object loaded with the same options on the same kernel makes the
//! same programs, maps and record layout; anything else is a new build.

use sha2::{Digest, Sha256};

use crate::kernel::options::ProbeOptions;

/// A short hex digest of the object's bytes, every load option and the kernel release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutKey(String);

impl LayoutKey {
    pub fn new(object: &[u8], opts: &ProbeOptions, hooks: &str, kernel_release: &str) -> Self {
        let mut h = Sha256::new();
        h.update(Sha256::digest(object));
        // `Debug` of the options names every field: a new option changes the key.
        h.update(format!("{opts:?}").as_bytes());
        // Without tracefs, other programs are attached (BTF tracepoints), and under
        // lockdown they read otherwise (`KernelLayout::hooks`).
        h.update(hooks.as_bytes());
        h.update([0]);
        h.update(kernel_release.as_bytes());
        let digest = h.finalize();
        Self(hex(&digest[..8]))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for LayoutKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The object's own digest, kept in the manifest: two keys with the same object differ
/// only in options or kernel.
pub fn object_digest(object: &[u8]) -> String {
    hex(&Sha256::digest(object))
}

/// The records' layout as this build writes and reads them: a digest of the source
/// that defines it. Any edit there (a comment too) makes another build's ring
/// unreadable to this one, which is the safe side.
pub fn abi_digest() -> String {
    hex(&Sha256::digest(include_str!(
        "../../../../sidecar-race-ebpf/src/abi.rs"
    )))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_changes_with_the_object_an_option_and_the_kernel() {
        let opts = ProbeOptions::default();
        let base = LayoutKey::new(b"object", &opts, "tracefs", "6.1.0");
        assert_eq!(base, LayoutKey::new(b"object", &opts, "tracefs", "6.1.0"));
        assert_eq!(base.as_str().len(), 16);
        assert_ne!(base, LayoutKey::new(b"object2", &opts, "tracefs", "6.1.0"));
        assert_ne!(base, LayoutKey::new(b"object", &opts, "tracefs", "6.12.0"));
        assert_ne!(
            base,
            LayoutKey::new(b"object", &opts, "btf", "6.1.0"),
            "no tracefs"
        );
        assert_ne!(
            LayoutKey::new(b"object", &opts, "btf", "6.1.0"),
            LayoutKey::new(b"object", &opts, "btf-direct", "6.1.0"),
            "locked down"
        );
        let bigger = ProbeOptions {
            ring_buffer_bytes: 1 << 22,
            ..opts
        };
        assert_ne!(base, LayoutKey::new(b"object", &bigger, "tracefs", "6.1.0"));
        let no_btf = ProbeOptions {
            set_state_btf: false,
            ..opts
        };
        assert_ne!(base, LayoutKey::new(b"object", &no_btf, "tracefs", "6.1.0"));
    }
}
