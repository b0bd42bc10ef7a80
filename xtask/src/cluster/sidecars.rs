//! The real sidecars the cluster tier runs (tests/tests/cluster_real_sidecars.rs), built
//! from their Go modules once per machine into the per-user cache like the cluster's
//! tools (`cluster::build`): the Cloud SQL Auth Proxy and oauth2-proxy, each in
//! `~/.cache/sidecar-race/go/<name>-<version>/bin/<name>`. `cargo xtask cluster up`
//! packages what is built as images (tests/testbed/src/images.rs). The OpenTelemetry
//! Collector, the third, is `crate::otelcol`.

use std::path::PathBuf;

use super::build;

/// A sidecar built from its Go module: the module's root package is its `main`.
pub struct Sidecar {
    pub name: &'static str,
    pub module: &'static str,
    pub version: &'static str,
    /// The variable `-X` stamps the version into, where its `--version` reads it
    /// (none: the module embeds it).
    version_var: Option<&'static str>,
}

/// The Cloud SQL Auth Proxy v2 (v2.28.0 is not served whole by the module proxy).
pub const CLOUD_SQL_PROXY: Sidecar = Sidecar {
    name: "cloud-sql-proxy",
    module: "github.com/GoogleCloudPlatform/cloud-sql-proxy/v2",
    version: "v2.27.0",
    version_var: None,
};

/// oauth2-proxy v7, the HTTP auth proxy in front of an app.
pub const OAUTH2_PROXY: Sidecar = Sidecar {
    name: "oauth2-proxy",
    module: "github.com/oauth2-proxy/oauth2-proxy/v7",
    version: "v7.15.6",
    version_var: Some("github.com/oauth2-proxy/oauth2-proxy/v7/pkg/version.VERSION"),
};

pub const SIDECARS: [Sidecar; 2] = [CLOUD_SQL_PROXY, OAUTH2_PROXY];

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
        let mut ldflags = "-s -w".to_string();
        if let Some(var) = self.version_var {
            ldflags.push_str(&format!(" -X {var}={}", self.version));
        }
        build::build_one(&go, &self.dir(), self.name, self.module, &ldflags)
    }
}

/// Builds every real sidecar that is not cached yet.
pub fn ensure() -> anyhow::Result<()> {
    SIDECARS.iter().try_for_each(Sidecar::ensure)
}
