//! The checkpoint's envelope: a magic string and a format version, the agent that
//! wrote it, the boot it was written in (every time in the state is that boot's
//! `CLOCK_BOOTTIME`) and when.

use serde::{Deserialize, Serialize};

use crate::pipeline::PipelineSnapshot;

pub const MAGIC: &str = "sidecar-race-checkpoint";
/// Bumped whenever the serialized shape of the state changes so that one side cannot
/// read the other's: a checkpoint of another format is stale, never half-read. A field
/// added with a default (an incident's `timeline`, `pod_start`) reads both ways (an
/// older checkpoint gets the default, an older agent ignores it) and keeps it.
pub const FORMAT: u32 = 1;

const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

#[derive(Debug, thiserror::Error)]
#[error("cannot read this boot's id from {path}: {source}")]
pub struct BootIdError {
    pub path: &'static str,
    pub source: std::io::Error,
}

/// This boot's id.
pub fn boot_id() -> Result<String, BootIdError> {
    std::fs::read_to_string(BOOT_ID)
        .map(|s| s.trim().to_string())
        .map_err(|source| BootIdError {
            path: BOOT_ID,
            source,
        })
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub magic: String,
    pub format: u32,
    pub agent_version: String,
    pub boot_id: String,
    pub written_at_boot_ns: u64,
    /// The same instant as RFC 3339, for a person reading the file.
    pub written_at: String,
    /// Written at the agent's stop, after its last read: nothing it read is missing.
    /// The periodic ones in between are not (a killed agent leaves one of those).
    #[serde(default)]
    pub last: bool,
}

impl Header {
    pub fn now(boot_id: &str, now_boot_ns: u64, last: bool) -> Self {
        Header {
            last,
            magic: MAGIC.into(),
            format: FORMAT,
            agent_version: env!("CARGO_PKG_VERSION").into(),
            boot_id: boot_id.into(),
            written_at_boot_ns: now_boot_ns,
            written_at: crate::clock::rfc3339_nanos(crate::clock::boot_to_unix_ns(now_boot_ns)),
        }
    }
}

/// The file as written: the header's fields, then the state.
#[derive(Serialize)]
pub struct Outgoing<'a> {
    #[serde(flatten)]
    pub header: &'a Header,
    pub state: &'a PipelineSnapshot,
}

/// The file's state, read once its header was checked.
#[derive(Deserialize)]
pub struct Incoming {
    pub state: PipelineSnapshot,
}
