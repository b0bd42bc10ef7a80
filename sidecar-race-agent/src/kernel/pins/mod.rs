//! Kernel state that outlives the agent: the maps, ring buffers and links of a load,
//! pinned under `<bpffs>/sidecar-race/<layout key>/`, with a manifest in the state
//! directory. A new agent of the same build adopts them and loads nothing, so the
//! kernel records through a restart and the new reader resumes where the old one
//! stopped (the ring's consumer position lives in the kernel). A new build loads its
//! own, then removes the old ones.

pub mod adopt;
pub mod bpffs;
pub mod error;
pub mod handover;
pub mod key;
pub mod manifest;
pub mod pin;
pub mod place;

pub use self::{error::PinError, place::Pins};
