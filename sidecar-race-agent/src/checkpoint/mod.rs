//! The agent's state across its restarts: on SIGTERM it writes what it derived from
//! the records it had taken from the ring (open and recent incidents, listener
//! tables, facts waiting for metadata, what the sinks were told) to a file, and the
//! next agent restores it before it reads the ring, so the two agents count as one.
//! Written atomically, bounded in size, versioned and tied to the boot.

mod atomic;
mod encode;
pub mod error;
pub mod format;

use std::{
    io,
    path::{Path, PathBuf},
};

use self::format::{FORMAT, Header, Incoming, MAGIC};
pub use self::{
    error::{LoadError, SaveError, Stale},
    format::BootIdError,
};
use crate::pipeline::{PipelineSnapshot, SnapshotSummary};

/// The most a checkpoint may take on disk.
pub const MAX_BYTES: usize = 64 << 20;

pub struct CheckpointFile {
    path: PathBuf,
    boot_id: String,
    cap: usize,
}

/// A checkpoint written.
#[derive(Debug)]
pub struct Saved {
    pub bytes: usize,
    /// Published incidents left out to stay within the cap.
    pub dropped_incidents: usize,
    pub summary: SnapshotSummary,
}

/// A checkpoint read.
pub struct Loaded {
    pub header: Header,
    pub state: PipelineSnapshot,
}

impl CheckpointFile {
    /// The checkpoint at `path`, for this boot.
    pub fn new(path: impl Into<PathBuf>) -> Result<Self, BootIdError> {
        Ok(Self::with_boot_id(path, &format::boot_id()?))
    }

    /// The checkpoint at `path`, for the boot `boot_id`.
    pub fn with_boot_id(path: impl Into<PathBuf>, boot_id: &str) -> Self {
        Self {
            path: path.into(),
            boot_id: boot_id.to_string(),
            cap: MAX_BYTES,
        }
    }

    /// At most `cap` bytes instead of [`MAX_BYTES`].
    pub fn with_cap(mut self, cap: usize) -> Self {
        self.cap = cap;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `state` (less its oldest published incidents when over the cap), at
    /// boot ns `now`, as the agent's `last` (at its stop) or a periodic one; replaces
    /// the file whole or leaves it as it was.
    pub fn save(
        &self,
        state: &mut PipelineSnapshot,
        now: u64,
        last: bool,
    ) -> Result<Saved, SaveError> {
        let header = Header::now(&self.boot_id, now, last);
        let (bytes, dropped_incidents) = encode::within_cap(&header, state, self.cap)?;
        atomic::write(&self.path, &bytes).map_err(|source| SaveError::Write {
            path: self.path.clone(),
            source,
        })?;
        Ok(Saved {
            bytes: bytes.len(),
            dropped_incidents,
            summary: state.summary(),
        })
    }

    /// Reads the checkpoint, at boot ns `now`: it must be whole, of this format and
    /// of this boot.
    pub fn load(&self, now: u64) -> Result<Loaded, LoadError> {
        let corrupt = |why: String| LoadError::Corrupt {
            path: self.path.clone(),
            why,
        };
        let stale = |why| LoadError::Stale {
            path: self.path.clone(),
            why,
        };
        let bytes = match std::fs::metadata(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(LoadError::Missing(self.path.clone()));
            }
            Ok(m) if m.len() > self.cap as u64 => {
                return Err(corrupt(format!(
                    "{} bytes, over the cap of {}",
                    m.len(),
                    self.cap
                )));
            }
            _ => std::fs::read(&self.path).map_err(|source| LoadError::Unreadable {
                path: self.path.clone(),
                source,
            })?,
        };
        let header: Header = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if header.magic != MAGIC {
            return Err(corrupt(format!(
                "not a checkpoint (magic {:?})",
                header.magic
            )));
        }
        if header.format != FORMAT {
            return Err(stale(Stale::OtherFormat {
                found: header.format,
            }));
        }
        if header.boot_id != self.boot_id {
            return Err(stale(Stale::OtherBoot {
                written: header.boot_id,
                current: self.boot_id.clone(),
            }));
        }
        if header.written_at_boot_ns > now {
            return Err(stale(Stale::FromTheFuture {
                written_ns: header.written_at_boot_ns,
                now_ns: now,
            }));
        }
        let Incoming { state } =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        Ok(Loaded { header, state })
    }

    /// Removes the file (a missing one is fine): read once, it is not read again by an
    /// agent that crashes after the restore.
    pub fn remove(&self) -> io::Result<()> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
