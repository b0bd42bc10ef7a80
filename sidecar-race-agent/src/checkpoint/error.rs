//! Why a checkpoint was not restored or not written. None of these stops the agent:
//! it starts clean, or stops without leaving a checkpoint.

use std::{io, path::PathBuf};

use super::format::FORMAT;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("no checkpoint at {0}")]
    Missing(PathBuf),
    #[error("cannot read the checkpoint {path}: {source}")]
    Unreadable { path: PathBuf, source: io::Error },
    #[error("the checkpoint {path} is corrupt: {why}")]
    Corrupt { path: PathBuf, why: String },
    #[error("the checkpoint {path} is stale: {why}")]
    Stale { path: PathBuf, why: Stale },
}

/// A checkpoint that is whole but not for this agent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Stale {
    /// Its times are another boot's clock.
    #[error("written in another boot ({written}; this boot is {current})")]
    OtherBoot { written: String, current: String },
    #[error("format {found}, this agent reads format {FORMAT}")]
    OtherFormat { found: u32 },
    #[error("written at boot time {written_ns} ns, later than now ({now_ns} ns)")]
    FromTheFuture { written_ns: u64, now_ns: u64 },
}

#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// Even without published incidents the state is over the cap: nothing is
    /// written (a cut file would restore a state that never was).
    #[error("the state takes {bytes} bytes, over the checkpoint's cap of {cap}")]
    TooLarge { bytes: usize, cap: usize },
    #[error("cannot encode the state: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("cannot write the checkpoint {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    /// Neither written nor removed: the next agent restores the earlier one, and
    /// may count again what this one published since.
    #[error(
        "{error}, and the earlier checkpoint {path} cannot be removed ({remove}): the next \
         agent restores it and may count again what this one published since"
    )]
    EarlierKept {
        error: Box<SaveError>,
        path: PathBuf,
        remove: io::Error,
    },
}
