//! The OpenTelemetry Collector the tests push OTLP metrics to (tests/kit/src/otelcol.rs)
//! and the cluster tier runs as a real Unix-socket sidecar (its image: `cargo xtask
//! cluster up` imports it when built): a distribution of our own, as the collector
//! builder (ocb) would generate it, with the OTLP receiver, the file exporter and the
//! health_check extension, at one collector release (core `COLLECTOR_VERSION` and its v1
//! modules, contrib `COLLECTOR_VERSION`). Its Go module is `xtask/otelcol/` (go.mod,
//! go.sum, main.go); `cargo xtask setup` copies it into
//! `~/.cache/sidecar-race/go/otelcol-<version>-<distribution>/` and builds `bin/otelcol`
//! there once per machine, like the cluster's Go tools (`cluster::build`). A cold build
//! takes a few minutes.

use std::{fs, path::PathBuf, time::Instant};

use anyhow::Context;

use super::go_module;
use crate::run::workspace_root;

/// The collector release: `go.opentelemetry.io/collector/*` v0.x modules and
/// `opentelemetry-collector-contrib/exporter/fileexporter` (its v1.x modules are the
/// ones this release's go.mod requires). Keep in step with xtask/otelcol/go.mod and
/// tests/kit/src/otelcol.rs.
pub const COLLECTOR_VERSION: &str = "v0.161.0";

/// The distribution's revision, in the cache directory's name so that a machine that
/// built an earlier set of components builds this one: 2 added the health_check
/// extension. Keep in step with tests/kit/src/otelcol.rs.
const DISTRIBUTION: &str = "r2";

/// What the binary's module is built from, in the checkout.
const SOURCES: [&str; 3] = ["go.mod", "go.sum", "main.go"];

fn dir() -> PathBuf {
    go_module::cache_root().join(format!("otelcol-{COLLECTOR_VERSION}-{DISTRIBUTION}"))
}

/// The cached collector (tests find it through `SIDECAR_RACE_OTELCOL_BIN` or this path).
pub fn binary() -> PathBuf {
    dir().join("bin/otelcol")
}

/// Builds the collector from `xtask/otelcol/` when it is not cached yet.
pub fn ensure() -> anyhow::Result<()> {
    if binary().exists() {
        return Ok(());
    }
    let go = go_module::go()?;
    let dir = dir();
    fs::create_dir_all(dir.join("bin"))?;
    let source = workspace_root().join("xtask/otelcol");
    for file in SOURCES {
        fs::copy(source.join(file), dir.join(file))
            .with_context(|| format!("cannot copy {}", source.join(file).display()))?;
    }
    eprintln!(
        "xtask: building the OpenTelemetry Collector {COLLECTOR_VERSION} (OTLP receiver, file \
         exporter, health_check; a cold build takes minutes)"
    );
    let started = Instant::now();
    let ldflags = format!("-s -w -X main.version={COLLECTOR_VERSION}");
    go_module::build_one(&go, &dir, "otelcol", ".", &ldflags)?;
    eprintln!(
        "xtask: otelcol built in {} s ({})",
        started.elapsed().as_secs(),
        binary().display()
    );
    Ok(())
}
