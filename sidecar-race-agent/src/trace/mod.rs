//! The `trace` output: each kernel event as a JSON record, or as a filtered table for
//! a person at a terminal.

pub(crate) mod record;
pub mod view;
