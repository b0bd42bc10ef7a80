//! The checkpoint's bytes within its cap: over it, the oldest incidents the sinks
//! already had are left out first (they are history, nothing waits for them), never
//! a cut file.

use super::{
    error::SaveError,
    format::{Header, Outgoing},
};
use crate::pipeline::PipelineSnapshot;

/// Rounds of leaving incidents out before giving up (each frees at least the excess
/// as measured, so one or two normally do).
const ROUNDS: usize = 8;

/// The file's bytes, at most `cap`, and how many published incidents were left out.
pub fn within_cap(
    header: &Header,
    state: &mut PipelineSnapshot,
    cap: usize,
) -> Result<(Vec<u8>, usize), SaveError> {
    let mut dropped = 0;
    for _ in 0..ROUNDS {
        let bytes = serde_json::to_vec(&Outgoing { header, state })?;
        if bytes.len() <= cap {
            return Ok((bytes, dropped));
        }
        let left_out = state.drop_oldest_published(bytes.len() - cap);
        if left_out == 0 {
            return Err(SaveError::TooLarge {
                bytes: bytes.len(),
                cap,
            });
        }
        dropped += left_out;
    }
    let bytes = serde_json::to_vec(&Outgoing { header, state })?.len();
    Err(SaveError::TooLarge { bytes, cap })
}
