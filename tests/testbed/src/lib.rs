//! The test bed that the CRI test tier (tests/src/cri.rs) and the local cluster
//! (`cargo xtask cluster up`, xtask/src/cluster/) both set up, written once: containerd's
//! configuration, the CNI bridge network, the busybox-static and glibc images their pods
//! run (and the program trees the glibc image and the arm64 guest are made of), a child
//! process started in a cgroup, and the names of the agent deploy/ installs. Each caller
//! says only what differs (paths, the network's addresses); the rest is the same for
//! both. No dependency on the agent, so xtask can use it before the eBPF toolchain is
//! installed.

pub mod agent;
pub mod cgroup;
pub mod cni;
pub mod containerd;
pub mod images;
pub mod program_tree;
