//! containerd 2 and runc for the Kubernetes 1.36 node (`cluster up --kubernetes 1.36`):
//! built once per machine by `build`, configured by `config` (containerd's version 3
//! format) to keep what it writes in the state directory and to run the built runc.
//! Started, fed images and emptied as Debian's containerd is (`super::containerd`).

pub mod build;
pub mod config;
