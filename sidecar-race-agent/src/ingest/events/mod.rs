//! Ring-buffer records as typed kernel facts: the one place that knows the byte
//! layout, with length checks. Split by job: the leaves (a C string's bytes, the task
//! name, the owning task, the kinds) are used by the facts of each record family
//! (socket, cgroup, Unix), which [`kernel_event`] gathers and [`decode`] fills.

pub mod c_string;
pub mod cgroup;
pub mod comm;
pub mod decode;
pub mod kernel_event;
pub mod kind;
pub mod sender;
pub mod socket;
pub mod unix;

pub use cgroup::CgroupFact;
pub use comm::Comm;
pub use decode::{DecodeError, Decoder, decode};
pub use kernel_event::KernelEvent;
pub use kind::Kind;
pub use sender::Sender;
pub use socket::SocketFact;
pub use unix::{UnixFact, UnixHook, UnixName, UnixRefusal};
