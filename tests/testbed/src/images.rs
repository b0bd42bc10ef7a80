//! The images the test bed's pods run, made here (no registry is reachable): the
//! sandbox image containerd's CRI plugin uses, and a busybox image (`sh`, `nc`, `httpd`,
//! `sleep`, ...), both from Debian's busybox-static, written as OCI archives for `ctr
//! images import`. One uncompressed layer, uid/gid 0, mtime 0.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use thiserror::Error;

/// busybox-static's binary (Debian).
pub const BUSYBOX: &str = "/bin/busybox";
/// The CRI plugin's sandbox image: sleeps until SIGTERM/SIGKILL, which the kubelet
/// sends at teardown. Never pulled: the plugin finds it imported.
pub const PAUSE_IMAGE: &str = "sr-test.local/pause:1";
pub const BUSYBOX_IMAGE: &str = "sr-test.local/busybox:1";
const APPLETS: [&str; 9] = [
    "sh", "nc", "httpd", "sleep", "true", "cat", "wget", "kill", "date",
];

#[derive(Debug, Error)]
pub enum ImageError {
    #[error("cannot read {BUSYBOX} (busybox-static; `cargo xtask setup` installs it): {0}")]
    Busybox(io::Error),
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
}

enum Entry<'a> {
    Dir(&'a str, u32),
    File(&'a str, u32, &'a [u8]),
    Link(&'a str, &'a str),
}

fn tar(entries: &[Entry]) -> io::Result<Vec<u8>> {
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
                b.append(&h, io::empty())?;
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
                b.append(&h, io::empty())?;
            }
        }
    }
    b.into_inner()
}

fn sha256(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An OCI archive of one uncompressed layer and the image config's `config`, named
/// `reference`.
fn oci_archive(reference: &str, layer: &[u8], config: Value) -> io::Result<Vec<u8>> {
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
    tar(&entries)
}

/// The busybox layer: the binary, its applets' links, and the mount points runc cannot
/// create in a sandbox's read-only root (the service account's among them).
fn busybox_layer(busybox: &[u8]) -> io::Result<Vec<u8>> {
    let links: Vec<String> = APPLETS.iter().map(|a| format!("bin/{a}")).collect();
    let mut entries = vec![
        Entry::Dir("bin/", 0o755),
        Entry::File("bin/busybox", 0o755, busybox),
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
    tar(&entries)
}

/// Writes the busybox and pause archives into `dir` (made if missing): (archive,
/// reference) pairs, for `ctr images import`.
pub fn write(dir: &Path) -> Result<[(PathBuf, &'static str); 2], ImageError> {
    let busybox = fs::read(BUSYBOX).map_err(ImageError::Busybox)?;
    let layer = busybox_layer(&busybox).map_err(|source| ImageError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let write = |path: PathBuf, reference: &'static str, config: Value| {
        let archive = oci_archive(reference, &layer, config).and_then(|bytes| {
            fs::create_dir_all(dir)?;
            fs::write(&path, bytes)
        });
        match archive {
            Ok(()) => Ok((path, reference)),
            Err(source) => Err(ImageError::Write { path, source }),
        }
    };
    Ok([
        write(
            dir.join("busybox.oci.tar"),
            BUSYBOX_IMAGE,
            json!({"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]}),
        )?,
        write(
            dir.join("pause.oci.tar"),
            PAUSE_IMAGE,
            json!({"Env": ["PATH=/bin"], "Entrypoint": ["/bin/sleep", "2147483647"]}),
        )?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(archive: &[u8]) -> Vec<String> {
        tar::Archive::new(archive)
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn an_oci_layout_naming_the_reference() {
        let layer = busybox_layer(b"\x7fELF").unwrap();
        let layer_names = names(&layer);
        assert!(layer_names.contains(&"bin/busybox".to_string()));
        assert!(layer_names.contains(&"bin/nc".to_string()));
        assert!(layer_names.contains(&"var/run/secrets/".to_string()));
        let archive = oci_archive(BUSYBOX_IMAGE, &layer, json!({"Cmd": ["/bin/sh"]})).unwrap();
        let mut entries = tar::Archive::new(archive.as_slice());
        let index: Value = entries
            .entries()
            .unwrap()
            .map(Result::unwrap)
            .find(|e| e.path().unwrap().as_os_str() == "index.json")
            .map(|e| serde_json::from_reader(e).unwrap())
            .unwrap();
        assert_eq!(
            index["manifests"][0]["annotations"]["io.containerd.image.name"],
            BUSYBOX_IMAGE
        );
        assert_eq!(names(&archive)[..2], ["oci-layout", "index.json"]);
        // Same input, same bytes: the digests are the image's identity.
        assert_eq!(
            archive,
            oci_archive(BUSYBOX_IMAGE, &layer, json!({"Cmd": ["/bin/sh"]})).unwrap()
        );
    }
}
