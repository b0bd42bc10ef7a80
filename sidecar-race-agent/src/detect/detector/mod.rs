//! The detector: pure logic over timestamped facts and pod metadata. No I/O, no clock
//! of its own: time advances only with the facts and `advance(now)`.
//!
//! It decides *when* refusals happened relative to the serving listener (the phase) and
//! keeps one incident per client container and port. *Who* serves whom (roles, and so
//! the incident's kind) is read from the pod metadata when the incident is shown, so
//! names and roles that arrive late still count.

mod change;
mod config;
mod held;
mod hidden;
mod in_place;
mod incidents;
mod instances;
mod last_socket;
mod lifecycle;
mod listener;
mod observe;
mod refusal;
mod rekey;
mod restart;
mod snapshot;
mod state;
mod timeline_feed;
mod unix;
mod unix_wait;

pub use self::{
    change::{Change, NotARace},
    config::DetectorConfig,
    snapshot::DetectorSnapshot,
    state::Detector,
};
