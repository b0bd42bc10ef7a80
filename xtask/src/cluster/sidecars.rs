//! The real sidecars the cluster tier runs (tests/tests/cluster_real_sidecars.rs), built
//! from their Go modules once per machine into the per-user cache like the cluster's
//! tools (`go_module::GoCommand`): the Cloud SQL Auth Proxy and oauth2-proxy, and the
//! Prometheus statsd exporter of the datagram cases (tests/tests/cluster_datagrams.rs).
//! `cargo xtask cluster up` packages what is built as images
//! (tests/testbed/src/images.rs). The OpenTelemetry Collector is `super::otelcol`.

use super::go_module::GoCommand;

/// The Cloud SQL Auth Proxy v2 (v2.28.0 is not served whole by the module proxy).
pub const CLOUD_SQL_PROXY: GoCommand = GoCommand {
    name: "cloud-sql-proxy",
    module: "github.com/GoogleCloudPlatform/cloud-sql-proxy/v2",
    package: "github.com/GoogleCloudPlatform/cloud-sql-proxy/v2",
    version: "v2.27.0",
    version_var: None,
};

/// oauth2-proxy v7, the HTTP auth proxy in front of an app.
pub const OAUTH2_PROXY: GoCommand = GoCommand {
    name: "oauth2-proxy",
    module: "github.com/oauth2-proxy/oauth2-proxy/v7",
    package: "github.com/oauth2-proxy/oauth2-proxy/v7",
    version: "v7.15.6",
    version_var: Some("github.com/oauth2-proxy/oauth2-proxy/v7/pkg/version.VERSION"),
};

/// The Prometheus statsd exporter, a UDP sidecar: statsd lines on :9125, its /metrics
/// on :9102. v0.31.0 is the newest tag the module proxy serves here.
pub const STATSD_EXPORTER: GoCommand = GoCommand {
    name: "statsd_exporter",
    module: "github.com/prometheus/statsd_exporter",
    package: "github.com/prometheus/statsd_exporter",
    version: "v0.31.0",
    version_var: Some("github.com/prometheus/common/version.Version"),
};

/// Builds every real sidecar that is not cached yet.
pub fn ensure() -> anyhow::Result<()> {
    [CLOUD_SQL_PROXY, OAUTH2_PROXY, STATSD_EXPORTER]
        .iter()
        .try_for_each(GoCommand::ensure)
}
