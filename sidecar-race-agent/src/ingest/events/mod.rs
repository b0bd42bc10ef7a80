//! Ring-buffer records as typed kernel facts: the one place that knows the byte
//! layout, with length checks. Split by job: the leaves (the owning task, the kinds,
//! and from [`crate::names`] a C string's bytes, the task name and a Unix socket's
//! name) are used by the facts of each record family (socket, cgroup, Unix), which
//! [`kernel_event`] gathers and [`decode`] fills.

pub mod cgroup;
pub mod decode;
pub mod kernel_event;
pub mod kind;
pub mod sender;
pub mod socket;
pub mod unix;

pub use cgroup::CgroupFact;
pub use decode::{DecodeError, Decoder, decode};
pub use kernel_event::KernelEvent;
pub use kind::Kind;
pub use sender::Sender;
pub use socket::SocketFact;
pub use unix::{UnixFact, UnixHook, UnixRefusal};
// Decoded here, defined below both ingest and the detector.
pub use crate::names::{Comm, UnixName};
