//! Everything that touches the kernel: tracefs formats, the layout handed to the
//! programs, loading/attaching, and start-up requirements.

pub mod btf;
pub mod counters;
mod evicted;
pub mod layout;
pub mod probes;
pub mod requirements;
pub mod tracefs;
pub mod unix_hooks;
