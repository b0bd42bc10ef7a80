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
use crate::{
    pipeline::{PipelineSnapshot, SnapshotSummary},
    state_file::{self, StateFileError},
};

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
    /// the file whole, or removes it. An earlier checkpoint left in place would be
    /// restored by the next agent, which would then settle again what this one
    /// published since (a full disk at the stop, a state over the cap).
    pub fn save(
        &self,
        state: &mut PipelineSnapshot,
        now: u64,
        last: bool,
    ) -> Result<Saved, SaveError> {
        let header = Header::now(&self.boot_id, now, last);
        let written = encode::within_cap(&header, state, self.cap).and_then(|(bytes, dropped)| {
            atomic::write(&self.path, &bytes)
                .map(|()| (bytes.len(), dropped))
                .map_err(|source| SaveError::Write {
                    path: self.path.clone(),
                    source,
                })
        });
        let (bytes, dropped_incidents) = match written {
            Ok(w) => w,
            Err(error) => {
                return Err(match self.remove() {
                    Ok(()) => error,
                    Err(remove) => SaveError::EarlierKept {
                        error: Box::new(error),
                        path: self.path.clone(),
                        remove,
                    },
                });
            }
        };
        Ok(Saved {
            bytes,
            dropped_incidents,
            summary: state.summary(),
        })
    }

    /// Reads the checkpoint, at boot ns `now`: it must be whole, of this format and
    /// of this boot. The file stays.
    pub fn load(&self, now: u64) -> Result<Loaded, LoadError> {
        let mut file = self.open()?;
        let bytes = self.read(&mut file)?;
        self.parse(&bytes, now)
    }

    /// [`Self::load`], with the file taken out of the directory once it is open and
    /// before a byte of it is read: an agent killed while it restores (out of memory,
    /// by its liveness probe) leaves nothing for the next one to trip on again. A
    /// file that is not a regular one (a FIFO, a device) goes too.
    pub fn take(&self, now: u64) -> Result<Loaded, LoadError> {
        let opened = self.open();
        if !matches!(opened, Err(LoadError::Missing(_)))
            && let Err(e) = self.remove()
        {
            tracing::warn!(
                "cannot remove the checkpoint {} before reading it: {e}",
                self.path.display()
            );
        }
        let bytes = self.read(&mut opened?)?;
        self.parse(&bytes, now)
    }

    /// The file, opened without blocking, when it is a regular one.
    fn open(&self) -> Result<std::fs::File, LoadError> {
        state_file::open_regular(&self.path, std::fs::OpenOptions::new().read(true))
            .map_err(|e| self.unreadable(e))
    }

    /// Its bytes, at most the cap.
    fn read(&self, file: &mut std::fs::File) -> Result<Vec<u8>, LoadError> {
        state_file::read_bounded(file, &self.path, self.cap).map_err(|e| self.unreadable(e))
    }

    fn unreadable(&self, e: StateFileError) -> LoadError {
        let path = self.path.clone();
        match e {
            StateFileError::Missing(_) => LoadError::Missing(path),
            StateFileError::TooLarge { cap, .. } => LoadError::Corrupt {
                path,
                why: format!("over the cap of {cap} bytes"),
            },
            e @ StateFileError::NotRegular { .. } => LoadError::Corrupt {
                path,
                why: e.to_string(),
            },
            StateFileError::Io { source, .. } => LoadError::Unreadable { path, source },
        }
    }

    fn parse(&self, bytes: &[u8], now: u64) -> Result<Loaded, LoadError> {
        let corrupt = |why: String| LoadError::Corrupt {
            path: self.path.clone(),
            why,
        };
        let stale = |why| LoadError::Stale {
            path: self.path.clone(),
            why,
        };
        let header: Header = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
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
            serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
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
