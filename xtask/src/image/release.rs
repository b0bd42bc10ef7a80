//! What the agent's release is called: the image repository, the version the image,
//! its SBOM, the krew archive and the local cluster's tag carry, and the binary's name.

pub const REPOSITORY: &str = "ghcr.io/sidecar-race/sidecar-race-agent";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The agent's binary, and its path (`/sidecar-race-agent`) in the image.
pub const BINARY: &str = "sidecar-race-agent";
