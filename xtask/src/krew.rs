//! `cargo xtask krew`: the kubectl plugin as krew installs it. The static agent (the
//! image's binary, `image::build_static_agent`) is the plugin: kubectl runs
//! `kubectl-sidecar_race` for `kubectl sidecar-race`, and the binary answers to that
//! name (sidecar-race-agent/src/cli). Written to `target/krew/`:
//! - `kubectl-sidecar_race-<version>-linux-<arch>.tar.gz`, reproducible like the image
//!   (fixed order, owner and mtime; a gzip header with no name or time);
//! - `sidecar-race.yaml`, the krew plugin manifest, with each archive's sha256 and the
//!   release URL it will be downloaded from.
//!
//! Also builds krew itself (`sigs.k8s.io/krew`, for tests/tests/krew_plugin.rs) from its
//! Go module into the per-user cache, like the cluster's tools.

use std::{fs, path::PathBuf};

use crate::{
    cluster::go_module,
    image::{self, gzip, sha256, tar},
    run::workspace_root,
};

/// The plugin's name in krew and after `kubectl`.
pub const PLUGIN: &str = "sidecar-race";
/// The executable kubectl looks for (dashes in a plugin name become underscores).
const EXECUTABLE: &str = "kubectl-sidecar_race";
const HOMEPAGE: &str = "https://github.com/sidecar-race/sidecar-race";
/// The newest krew the Go module proxy serves (it refuses v0.4.5).
pub const KREW_VERSION: &str = "v0.4.4";

/// What `cargo xtask krew` wrote.
pub struct Built {
    pub manifest: PathBuf,
    pub archives: Vec<PathBuf>,
}

fn out_dir() -> PathBuf {
    workspace_root().join("target/krew")
}

fn archive_name(arch: &str) -> String {
    format!("{EXECUTABLE}-v{}-linux-{arch}.tar.gz", image::VERSION)
}

/// Builds the static agent for each of `arches` (the host's when empty) and writes
/// the archives and the manifest.
pub fn krew(arches: &[String]) -> anyhow::Result<Built> {
    let arches = match arches {
        [] => vec![image::target()?.1.to_string()],
        some => some.to_vec(),
    };
    let epoch = image::source_date_epoch();
    let dir = out_dir();
    let mut archives = Vec::new();
    let mut digests = Vec::new();
    for arch in &arches {
        let agent = fs::read(image::build_static_agent(arch)?)?;
        let archive = gzip(&tar(&[(EXECUTABLE, 0o755, Some(&agent))], epoch)?)?;
        let path = dir.join(archive_name(arch));
        image::write_atomically(&path, &archive)?;
        digests.push((arch.as_str(), sha256(&archive)));
        archives.push(path);
    }
    let manifest = dir.join(format!("{PLUGIN}.yaml"));
    image::write_atomically(&manifest, plugin_manifest(&digests).as_bytes())?;
    eprintln!(
        "xtask: wrote {} for {}",
        manifest.display(),
        arches.join(", ")
    );
    Ok(Built { manifest, archives })
}

/// The krew manifest (`krew.googlecontainertools.github.com/v1alpha2` Plugin) for
/// archives of `(arch, sha256)`.
fn plugin_manifest(archives: &[(&str, String)]) -> String {
    let version = image::VERSION;
    let platforms: String = archives
        .iter()
        .map(|(arch, sha)| {
            format!(
                "  - selector:\n      matchLabels:\n        os: linux\n        arch: {arch}\n    \
                 uri: {HOMEPAGE}/releases/download/v{version}/{}\n    \
                 sha256: {sha}\n    bin: {EXECUTABLE}\n    files:\n    - from: {EXECUTABLE}\n      to: .\n",
                archive_name(arch)
            )
        })
        .collect();
    format!(
        "apiVersion: krew.googlecontainertools.github.com/v1alpha2\n\
         kind: Plugin\n\
         metadata:\n  name: {PLUGIN}\n\
         spec:\n  version: v{version}\n  homepage: {HOMEPAGE}\n  \
         shortDescription: Find pods whose app races its sidecar\n  \
         description: |\n    \
         Finds the pod templates where an app container can start before, or outlive,\n    \
         the sidecar it talks to (lint, lint --fix), and ranks the workloads that the\n    \
         sidecar-race node agent saw refused by a sidecar (report).\n  \
         platforms:\n{platforms}"
    )
}

/// krew, which tests/tests/krew_plugin.rs installs the plugin with (it finds it
/// through `SIDECAR_RACE_KREW` or `KREW.binary()`'s path).
const KREW: go_module::GoCommand = go_module::GoCommand {
    name: "krew",
    module: "sigs.k8s.io/krew",
    package: "sigs.k8s.io/krew/cmd/krew",
    version: KREW_VERSION,
    // As krew's hack/make-binary.sh stamps it: `kubectl krew version` reports it.
    version_var: Some("sigs.k8s.io/krew/internal/version.gitTag"),
};

/// Builds krew from its Go module when it is not cached yet.
pub fn ensure_tool() -> anyhow::Result<()> {
    KREW.ensure()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_manifest_names_each_archive_with_its_digest() {
        let m = super::plugin_manifest(&[("amd64", "ab".repeat(32))]);
        assert!(m.contains("  name: sidecar-race\n"), "{m}");
        assert!(m.contains("        arch: amd64\n"), "{m}");
        assert!(
            m.contains(&format!("    sha256: {}\n", "ab".repeat(32))),
            "{m}"
        );
        assert!(
            m.contains(
                "/releases/download/v0.1.0/kubectl-sidecar_race-v0.1.0-linux-amd64.tar.gz\n"
            ),
            "{m}"
        );
        assert!(m.contains("    bin: kubectl-sidecar_race\n"), "{m}");
    }
}
