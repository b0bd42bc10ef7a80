//! Everything that touches the kernel: tracefs formats, the layout handed to the
//! programs, loading/attaching, and start-up requirements.
//!
//! Loading reads as its steps, each a module: the [`options`], the programs'
//! [`globals`] (from the [`layout`] and [`btf`] offsets), the [`tcp_hooks`],
//! [`tracepoints`] and [`unix_hooks`] attached (sets of programs on kernel functions
//! through `function_hooks`), then the maps [`probes`] keeps. [`attach`] holds what goes
//! wrong on the way, [`variant`] which form of a program the kernel gets; [`counters`]
//! what the kernel counts ([`recursion`]: the runs it skipped); [`cgroup2`] where the
//! cgroup v2 hierarchy is mounted. Which cgroups the kernel charges budgets to is the
//! inventory's to say (`inventory::charge_points`), through [`probes`].

pub mod attach;
pub mod btf;
pub mod cgroup2;
pub mod counters;
mod evicted;
pub mod fdinfo;
mod function_hooks;
pub mod globals;
pub mod layout;
pub mod listening;
pub mod lockdown;
pub mod options;
pub mod pins;
pub mod probes;
pub mod recursion;
pub mod requirements;
mod socket_owners;
pub mod tcp_hooks;
pub mod tracefs;
pub mod tracepoints;
pub mod udp_hook;
pub mod unix_hooks;
mod variant;
