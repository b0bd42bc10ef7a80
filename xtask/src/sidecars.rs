//! The real sidecars the cluster tier runs (tests/tests/cluster_real_sidecars.rs), built
//! from their Go modules once per machine into the per-user cache like the cluster's
//! tools (`cluster::build`): the Cloud SQL Auth Proxy, in
//! `~/.cache/sidecar-race/go/<name>-<version>/bin/<name>`. `cargo xtask cluster up`
//! packages what is built as images (tests/testbed/src/images.rs). The OpenTelemetry
//! Collector, the third, is `crate::otelcol`.

use std::path::PathBuf;

use crate::cluster::build;

/// A sidecar built from its Go module: the module's root package is its `main`.
pub struct Sidecar {
    pub name: &'static str,
    pub module: &'static str,
    pub version: &'static str,
}

/// The Cloud SQL Auth Proxy v2 (v2.28.0 is not served whole by the module proxy).
pub const CLOUD_SQL_PROXY: Sidecar = Sidecar {
    name: "cloud-sql-proxy",
    module: "github.com/GoogleCloudPlatform/cloud-sql-proxy/v2",
    version: "v2.27.0",
};

pub const SIDECARS: [Sidecar; 1] = [CLOUD_SQL_PROXY];

impl Sidecar {
    fn dir(&self) -> PathBuf {
        build::cache_root().join(format!("{}-{}", self.name, self.version))
    }

    /// The cached binary (tests and `cluster up` find it here).
    pub fn binary(&self) -> PathBuf {
        self.dir().join("bin").join(self.name)
    }

    /// Builds it when it is not cached yet (a cold build takes a few minutes).
    pub fn ensure(&self) -> anyhow::Result<()> {
        if self.binary().exists() {
            return Ok(());
        }
        let go = build::go()?;
        let body = format!("require {} {}\n", self.module, self.version);
        build::wrapper(
            &go,
            &self.dir(),
            &format!("sidecar-race.local/{}", self.name),
            &body,
            &[self.module.to_string()],
        )?;
        eprintln!(
            "xtask: building {} {} (a cold build takes minutes)",
            self.name, self.version
        );
        // Its version is embedded from the module's own version.txt.
        build::build_one(&go, &self.dir(), self.name, self.module, "-s -w")
    }
}

/// Builds every real sidecar that is not cached yet.
pub fn ensure() -> anyhow::Result<()> {
    SIDECARS.iter().try_for_each(Sidecar::ensure)
}
