//! Names the kernel hands us and every layer above shows: a task's `comm` and a Unix
//! socket's name. They sit below `ingest` (which decodes them) and `detect` (which keys
//! by them), so neither has to import the other for them.

pub mod c_string;
pub mod comm;
pub mod unix_name;

pub use comm::Comm;
pub use unix_name::UnixName;
