//! Images the cluster's pods run, made here (no registry is reachable): the sandbox
//! image containerd's CRI plugin uses, and the CRI tier's busybox test image
//! (`sr-test.local/busybox:1`: sh, nc, httpd, sleep, ...), both from Debian's
//! busybox-static, written as OCI archives for `ctr images import`.

use std::{fs, path::Path};

use anyhow::Context;
use serde_json::{Value, json};

use crate::image::sha256;

pub const SANDBOX_IMAGE: &str = "sr-test.local/pause:1";
pub const BUSYBOX_IMAGE: &str = "sr-test.local/busybox:1";
const BUSYBOX: &str = "/bin/busybox";
const APPLETS: [&str; 9] = [
    "sh", "nc", "httpd", "sleep", "true", "cat", "wget", "kill", "date",
];

enum Entry<'a> {
    Dir(&'a str, u32),
    File(&'a str, u32, &'a [u8]),
    Link(&'a str, &'a str),
}

fn tar(entries: &[Entry]) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_ustar();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        match e {
            Entry::Dir(p, mode) => {
                h.set_path(p)?;
                h.set_mode(*mode);
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                h.set_cksum();
                b.append(&h, std::io::empty())?;
            }
            Entry::File(p, mode, data) => {
                h.set_path(p)?;
                h.set_mode(*mode);
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(data.len() as u64);
                h.set_cksum();
                b.append(&h, *data)?;
            }
            Entry::Link(p, target) => {
                h.set_path(p)?;
                h.set_mode(0o777);
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_link_name(target)?;
                h.set_size(0);
                h.set_cksum();
                b.append(&h, std::io::empty())?;
            }
        }
    }
    Ok(b.into_inner()?)
}

/// An OCI archive of one uncompressed layer and the image config's `config`.
fn oci_archive(path: &Path, reference: &str, layer: &[u8], config: Value) -> anyhow::Result<()> {
    let layer_digest = sha256(layer);
    let config = serde_json::to_vec(&json!({
        "architecture": if cfg!(target_arch = "aarch64") { "arm64" } else { "amd64" },
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
    }))?;
    let config_digest = sha256(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{config_digest}"), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": format!("sha256:{layer_digest}"), "size": layer.len()}],
    }))?;
    let manifest_digest = sha256(&manifest);
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"), "size": manifest.len(),
            "annotations": {"io.containerd.image.name": reference,
                            "org.opencontainers.image.ref.name": reference}}],
    }))?;
    let blobs = [
        (format!("blobs/sha256/{layer_digest}"), layer),
        (format!("blobs/sha256/{config_digest}"), config.as_slice()),
        (
            format!("blobs/sha256/{manifest_digest}"),
            manifest.as_slice(),
        ),
    ];
    let mut entries = vec![
        Entry::File("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#),
        Entry::File("index.json", 0o644, &index),
        Entry::Dir("blobs/", 0o755),
        Entry::Dir("blobs/sha256/", 0o755),
    ];
    entries.extend(blobs.iter().map(|(p, d)| Entry::File(p, 0o644, d)));
    fs::write(path, tar(&entries)?)?;
    Ok(())
}

/// Writes both archives into `dir`: (archive, reference) pairs.
pub fn write(dir: &Path) -> anyhow::Result<Vec<(std::path::PathBuf, &'static str)>> {
    let busybox = fs::read(BUSYBOX)
        .context("busybox-static is missing (/bin/busybox; `cargo xtask setup` installs it)")?;
    let links: Vec<String> = APPLETS.iter().map(|a| format!("bin/{a}")).collect();
    let mut entries = vec![
        Entry::Dir("bin/", 0o755),
        Entry::File("bin/busybox", 0o755, &busybox),
        // Mount points: runc cannot create them in the sandbox's read-only root.
        Entry::Dir("dev/", 0o755),
        Entry::Dir("proc/", 0o555),
        Entry::Dir("sys/", 0o555),
        Entry::Dir("etc/", 0o755),
        Entry::File("etc/hostname", 0o644, b""),
        Entry::File("etc/hosts", 0o644, b""),
        Entry::File("etc/resolv.conf", 0o644, b""),
        Entry::Dir("tmp/", 0o1777),
        Entry::Dir("var/", 0o755),
        Entry::Dir("var/run/", 0o755),
        Entry::Dir("var/run/secrets/", 0o755),
    ];
    entries.extend(links.iter().map(|l| Entry::Link(l, "busybox")));
    let layer = tar(&entries)?;
    fs::create_dir_all(dir)?;
    let bb = dir.join("busybox.oci.tar");
    oci_archive(
        &bb,
        BUSYBOX_IMAGE,
        &layer,
        json!({"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]}),
    )?;
    // The sandbox: sleeps until SIGTERM/SIGKILL, which the kubelet sends at teardown.
    let pause = dir.join("pause.oci.tar");
    oci_archive(
        &pause,
        SANDBOX_IMAGE,
        &layer,
        json!({"Env": ["PATH=/bin"], "Entrypoint": ["/bin/sleep", "2147483647"]}),
    )?;
    Ok(vec![(bb, BUSYBOX_IMAGE), (pause, SANDBOX_IMAGE)])
}
