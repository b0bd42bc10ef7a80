//! A Unix socket's name as bound or dialed: what the kernel's records carry, the
//! detector keys sockets by and incidents show.

use std::sync::Arc;

use super::c_string::until_nul;

/// A Unix socket's name as bound or dialed.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum UnixName {
    /// A path in the filesystem, as the process gave it.
    Path(Arc<str>),
    /// An abstract name (Linux), without its leading NUL; shown as `@name`.
    Abstract(Arc<str>),
    /// No name (an unbound socket, or the path could not be read).
    Unnamed,
}

impl UnixName {
    /// From `sun_path`'s used bytes: a leading NUL makes it abstract (every byte after
    /// it is the name); a path ends at its first NUL.
    pub fn from_sun_path(bytes: &[u8]) -> UnixName {
        match bytes.split_first() {
            None => UnixName::Unnamed,
            Some((0, name)) => UnixName::Abstract(String::from_utf8_lossy(name).into()),
            Some(_) => UnixName::Path(String::from_utf8_lossy(until_nul(bytes)).into()),
        }
    }

    pub fn is_abstract(&self) -> bool {
        matches!(self, UnixName::Abstract(_))
    }
}

impl std::fmt::Display for UnixName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnixName::Path(p) => f.write_str(p),
            UnixName::Abstract(n) => write!(f, "@{n}"),
            UnixName::Unnamed => f.write_str("(unnamed)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_end_at_their_nul_and_abstract_names_keep_every_byte() {
        assert_eq!(
            UnixName::from_sun_path(b"/var/run/dapr/app.sock\0\0garbage"),
            UnixName::Path("/var/run/dapr/app.sock".into())
        );
        let abs = UnixName::from_sun_path(b"\0otel\0x");
        assert_eq!(abs, UnixName::Abstract("otel\0x".into()));
        assert!(abs.is_abstract());
        assert_eq!(UnixName::Abstract("otel".into()).to_string(), "@otel");
        assert_eq!(UnixName::from_sun_path(b""), UnixName::Unnamed);
    }
}
