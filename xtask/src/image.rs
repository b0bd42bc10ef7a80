//! `cargo xtask image`: the agent's container image, built offline.
//!
//! 1. A statically linked agent: glibc with `crt-static` for the host's
//!    `<arch>-unknown-linux-gnu` (rustup's standard library; no musl toolchain is
//!    needed), release profile, `--locked`, source paths remapped to `/src` and
//!    `/cargo` so that the bytes do not depend on where the checkout or `CARGO_HOME`
//!    live. `deploy/Containerfile` runs this same command, so both give the same
//!    binary for the same compilers. The result is checked to have no program
//!    interpreter and to run.
//! 2. A FROM-scratch image holding only `/sidecar-race-agent`, written as an OCI
//!    image archive (`oci-layout`, `index.json`, `blobs/sha256/…`, plus docker's
//!    `manifest.json` so that `docker load` of any version takes it) at
//!    `target/image/sidecar-race-agent-<version>.oci.tar`: `ctr images import`,
//!    `podman load`, `docker load` and `skopeo copy oci-archive:…` read it.
//!    Reproducible: entries in a fixed order, uid/gid 0, mtimes and `created` from
//!    `SOURCE_DATE_EPOCH` (else the last commit's time), a gzip header without a
//!    name or time.

use std::{
    fs,
    io::Write,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail, ensure};
use flate2::{Compression, GzBuilder};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::run::{cargo, checked, output, workspace_root};

pub const REPOSITORY: &str = "ghcr.io/sidecar-race/sidecar-race-agent";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
const BINARY: &str = "sidecar-race-agent";

/// What `cargo xtask image` made.
pub struct Built {
    pub archive: PathBuf,
    pub reference: String,
    pub manifest_digest: String,
}

/// `<arch>-unknown-linux-gnu` of the host, and the OCI architecture name.
fn target() -> anyhow::Result<(String, &'static str)> {
    let vv = output(Command::new("rustc").arg("-vV")).context("cannot run `rustc -vV`")?;
    let host = vv
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .context("no host in `rustc -vV`")?
        .to_string();
    let arch = match host.split('-').next() {
        Some("x86_64") => "amd64",
        Some("aarch64") => "arm64",
        _ => bail!("no image for host {host} (x86_64 and aarch64 Linux only)"),
    };
    ensure!(
        host.ends_with("-unknown-linux-gnu"),
        "the static build needs a *-unknown-linux-gnu host toolchain, not {host}"
    );
    Ok((host, arch))
}

/// Builds the static agent; its path.
pub fn build_static_agent() -> anyhow::Result<PathBuf> {
    let (triple, _) = target()?;
    let root = workspace_root();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    let remaps = [
        (root.display().to_string(), "/src"),
        (cargo_home.display().to_string(), "/cargo"),
    ];
    // Target-only flags: with `--target`, build scripts and proc macros are built
    // without them (and the agent's build.rs clears them for the nested eBPF build).
    // Debug info stripped (symbols kept, for backtraces): 25 MB → 19 MB.
    let mut rustflags = vec![
        "-C".to_string(),
        "target-feature=+crt-static".to_string(),
        "-C".to_string(),
        "strip=debuginfo".to_string(),
    ];
    let mut cflags = Vec::new();
    for (from, to) in &remaps {
        rustflags.push(format!("--remap-path-prefix={from}={to}"));
        cflags.push(format!("-ffile-prefix-map={from}={to}"));
    }
    let cflags_var = format!("CFLAGS_{}", triple.replace('-', "_"));
    checked(
        cargo()
            .args(["build", "--release", "--locked", "-p", "sidecar-race-agent"])
            .args(["--target", &triple])
            .env_remove("RUSTFLAGS")
            .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"))
            .env(cflags_var, cflags.join(" ")),
    )?;
    let bin = root
        .join("target")
        .join(&triple)
        .join("release")
        .join(BINARY);
    let elf = fs::read(&bin).with_context(|| format!("cannot read {}", bin.display()))?;
    ensure!(
        !has_interpreter(&elf)?,
        "{} is dynamically linked (it has a program interpreter)",
        bin.display()
    );
    let version = output(Command::new(&bin).arg("--version"))
        .with_context(|| format!("{} does not run", bin.display()))?;
    ensure!(
        version.contains(VERSION),
        "{} --version says {version:?}, expected {VERSION}",
        bin.display()
    );
    Ok(bin)
}

/// Whether a 64-bit little-endian ELF has a PT_INTERP program header.
fn has_interpreter(elf: &[u8]) -> anyhow::Result<bool> {
    ensure!(
        elf.len() > 64 && &elf[..4] == b"\x7fELF" && elf[4] == 2 && elf[5] == 1,
        "not a 64-bit little-endian ELF file"
    );
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[32..40].try_into()?) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    Ok((0..phnum).any(|i| {
        let o = phoff + i * phentsize;
        elf.get(o..o + 4)
            .is_some_and(|t| u32::from_le_bytes(t.try_into().unwrap()) == 3)
    }))
}

/// Seconds since the epoch for every timestamp in the image.
fn source_date_epoch() -> u64 {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .or_else(|| {
            output(Command::new("git").arg("-C").arg(workspace_root()).args([
                "log",
                "-1",
                "--format=%ct",
            ]))
            .and_then(|s| s.parse().ok())
        })
        .unwrap_or(0)
}

fn git_revision() -> Option<String> {
    output(
        Command::new("git")
            .arg("-C")
            .arg(workspace_root())
            .args(["rev-parse", "HEAD"]),
    )
}

/// RFC 3339 UTC of a Unix time.
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub(crate) fn sha256(data: &[u8]) -> String {
    let d = Sha256::digest(data);
    let mut s = String::with_capacity(64);
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A tar of `(path, mode, contents)` entries (None: a directory), deterministic.
fn tar(entries: &[(&str, u32, Option<&[u8]>)], mtime: u64) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, mode, data) in entries {
        let mut h = tar::Header::new_ustar();
        h.set_path(path)?;
        h.set_mode(*mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_username("root")?;
        h.set_groupname("root")?;
        h.set_mtime(mtime);
        match data {
            Some(d) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(d.len() as u64);
                h.set_cksum();
                b.append(&h, *d)?;
            }
            None => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                h.set_cksum();
                b.append(&h, std::io::empty())?;
            }
        }
    }
    Ok(b.into_inner()?)
}

/// Builds the static agent and writes the image archive.
pub fn image(reference: Option<String>) -> anyhow::Result<Built> {
    let (_, arch) = target()?;
    let bin = build_static_agent()?;
    let agent = fs::read(&bin)?;
    let reference = reference.unwrap_or_else(|| format!("{REPOSITORY}:{VERSION}"));
    let epoch = source_date_epoch();
    let created = rfc3339(epoch);

    // The one layer: /sidecar-race-agent.
    let layer_tar = tar(&[(BINARY, 0o755, Some(&agent))], epoch)?;
    let diff_id = format!("sha256:{}", sha256(&layer_tar));
    let mut gz = GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), Compression::new(6));
    gz.write_all(&layer_tar)?;
    let layer = gz.finish()?;
    let layer_digest = sha256(&layer);

    let mut labels = json!({
        "org.opencontainers.image.title": "sidecar-race-agent",
        "org.opencontainers.image.description": "Node agent: sees sidecar startup/drain races in the kernel (eBPF) and reports them per pod",
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.version": VERSION,
        "org.opencontainers.image.created": created,
    });
    if let Some(rev) = git_revision() {
        labels["org.opencontainers.image.revision"] = json!(rev);
    }
    let config = json!({
        "created": created,
        "architecture": arch,
        "os": "linux",
        "config": {
            // uid 0 without capabilities: the DaemonSet adds only BPF and PERFMON
            // (reading root-owned tracefs files needs uid 0; see SECURITY.md, "Privileges").
            "User": "0:0",
            "Entrypoint": [format!("/{BINARY}")],
            "Cmd": ["run"],
            "Env": ["PATH=/"],
            "ExposedPorts": {"9965/tcp": {}},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "cargo xtask image"}],
    });
    let config = serde_json::to_vec(&config)?;
    let config_digest = sha256(&config);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": format!("sha256:{layer_digest}"),
            "size": layer.len(),
        }],
        "annotations": {
            "org.opencontainers.image.version": VERSION,
            "org.opencontainers.image.created": created,
        },
    });
    let manifest = serde_json::to_vec(&manifest)?;
    let manifest_digest = sha256(&manifest);
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "platform": {"architecture": arch, "os": "linux"},
            "annotations": {
                // containerd (ctr import, docker 25+) names the image from this one ...
                "io.containerd.image.name": reference,
                // ... podman and skopeo from this one.
                "org.opencontainers.image.ref.name": reference,
            },
        }],
    });
    let index = serde_json::to_vec(&index)?;
    // docker load before 25 reads this instead of index.json.
    let docker_manifest = serde_json::to_vec(&json!([{
        "Config": format!("blobs/sha256/{config_digest}"),
        "RepoTags": [reference],
        "Layers": [format!("blobs/sha256/{layer_digest}")],
    }]))?;

    let mut blobs = [
        (config_digest.clone(), config.as_slice()),
        (layer_digest.clone(), layer.as_slice()),
        (manifest_digest.clone(), manifest.as_slice()),
    ];
    blobs.sort_by(|a, b| a.0.cmp(&b.0));
    let blob_paths: Vec<String> = blobs
        .iter()
        .map(|(d, _)| format!("blobs/sha256/{d}"))
        .collect();
    let mut entries: Vec<(&str, u32, Option<&[u8]>)> = vec![
        (
            "oci-layout",
            0o644,
            Some(br#"{"imageLayoutVersion":"1.0.0"}"#),
        ),
        ("index.json", 0o644, Some(&index)),
        ("manifest.json", 0o644, Some(&docker_manifest)),
        ("blobs/", 0o755, None),
        ("blobs/sha256/", 0o755, None),
    ];
    for (path, (_, data)) in blob_paths.iter().zip(blobs.iter()) {
        entries.push((path, 0o644, Some(data)));
    }
    let archive_bytes = tar(&entries, epoch)?;

    let dir = workspace_root().join("target/image");
    fs::create_dir_all(&dir)?;
    let archive = archive_path(&workspace_root());
    let tmp = archive.with_extension("tmp");
    fs::write(&tmp, &archive_bytes)?;
    fs::rename(&tmp, &archive)?;
    eprintln!(
        "xtask: wrote {} ({} bytes): {reference}, manifest sha256:{manifest_digest}, \
         layer {} bytes compressed, agent {} bytes",
        archive.display(),
        archive_bytes.len(),
        layer.len(),
        agent.len()
    );
    Ok(Built {
        archive,
        reference,
        manifest_digest: format!("sha256:{manifest_digest}"),
    })
}

/// Where `cargo xtask image` writes the archive (tests/tests/cri_runtime.rs reads it).
pub fn archive_path(root: &Path) -> PathBuf {
    root.join(format!("target/image/sidecar-race-agent-{VERSION}.oci.tar"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_times() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
    }

    #[test]
    fn tar_is_deterministic() {
        let a = tar(&[("x", 0o755, Some(b"abc"))], 7).unwrap();
        let b = tar(&[("x", 0o755, Some(b"abc"))], 7).unwrap();
        assert_eq!(a, b);
        let mut r = tar::Archive::new(a.as_slice());
        let e = r.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(e.header().mtime().unwrap(), 7);
        assert_eq!(e.header().uid().unwrap(), 0);
    }
}
