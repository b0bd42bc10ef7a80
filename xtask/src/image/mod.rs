//! `cargo xtask image`: the agent's container image, built offline.
//!
//! 1. A statically linked agent (`static_build.rs`), release profile. `deploy/Containerfile`
//!    runs this same command, so both give the same binary for the same compilers. The
//!    result is checked to have no program interpreter and to run.
//! 2. A FROM-scratch image holding only `/sidecar-race-agent`, written as an OCI
//!    image archive (`layout.rs`) at `target/image/sidecar-race-agent-<version>.oci.tar`,
//!    reproducible (`reproducible.rs`).
//! 3. The agent's SBOM (CycloneDX JSON, `sbom.rs`), written beside the archive and
//!    attached in the layout as an OCI 1.1 referrer.

mod layout;
mod release;
mod reproducible;
mod sbom;
mod static_build;

pub use layout::image;
pub use release::{REPOSITORY, VERSION};
pub use reproducible::{gzip, sha256, source_date_epoch, tar, write_atomically};
pub use static_build::{Profile, build_static, build_static_agent, target};
