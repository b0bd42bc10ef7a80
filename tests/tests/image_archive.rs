//! The image archive `cargo xtask image` writes
//! (`target/image/sidecar-race-agent-<version>.oci.tar`), read as the tools that load
//! it read it: an OCI image layout whose digests and sizes match its blobs, an image
//! config with the entrypoint, command, user, labels and version, one layer holding
//! only the statically linked agent (root-owned, 0755), docker's `manifest.json`
//! naming the same config and layer, and `skopeo inspect` of it both as
//! `oci-archive:` and as `docker-archive:` (what `podman load` / `docker load` read).
//!
//! No root needed. `cargo xtask test` builds the archive first; without it this test
//! fails under CI and is skipped elsewhere with a message.

use std::{collections::BTreeMap, io::Read, path::PathBuf, process::Command};

use serde_json::Value;
use sha2::{Digest, Sha256};
use sidecar_race_tests::{cri::is_static_elf, root::have};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn archive() -> Option<PathBuf> {
    let p = std::env::var_os("SIDECAR_RACE_IMAGE_ARCHIVE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
                "../target/image/sidecar-race-agent-{VERSION}.oci.tar"
            ))
        });
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing: `cargo xtask test` builds it (`cargo xtask image`)",
        p.display()
    );
    eprintln!(
        "SKIPPED the image archive test: {} is missing; run `cargo xtask image`",
        p.display()
    );
    None
}

fn hex(d: &[u8]) -> String {
    Sha256::digest(d)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// path → (mode, uid, gid, contents) of every regular file in a tar.
fn entries(tar_bytes: impl Read) -> BTreeMap<String, (u32, u64, u64, Vec<u8>)> {
    let mut a = tar::Archive::new(tar_bytes);
    let mut out = BTreeMap::new();
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        if e.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = e.path().unwrap().display().to_string();
        let h = e.header().clone();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        out.insert(
            path,
            (h.mode().unwrap(), h.uid().unwrap(), h.gid().unwrap(), data),
        );
    }
    out
}

fn blob<'a>(files: &'a BTreeMap<String, (u32, u64, u64, Vec<u8>)>, desc: &Value) -> &'a [u8] {
    let digest = desc["digest"].as_str().unwrap();
    let hexd = digest.strip_prefix("sha256:").expect("sha256 digests");
    let data = &files
        .get(&format!("blobs/sha256/{hexd}"))
        .unwrap_or_else(|| panic!("blob {digest} missing"))
        .3;
    assert_eq!(hex(data), hexd, "blob content matches its digest");
    assert_eq!(desc["size"].as_u64().unwrap(), data.len() as u64, "size");
    data
}

#[test]
fn the_image_archive_is_an_oci_layout_with_only_the_static_agent() {
    let Some(path) = archive() else {
        return;
    };
    let files = entries(std::fs::File::open(&path).unwrap());
    let layout: Value = serde_json::from_slice(&files["oci-layout"].3).unwrap();
    assert_eq!(layout["imageLayoutVersion"], "1.0.0");
    let index: Value = serde_json::from_slice(&files["index.json"].3).unwrap();
    let desc = &index["manifests"][0];
    assert_eq!(
        desc["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let reference = desc["annotations"]["io.containerd.image.name"]
        .as_str()
        .unwrap();
    assert_eq!(
        desc["annotations"]["org.opencontainers.image.ref.name"],
        reference
    );
    let manifest: Value = serde_json::from_slice(blob(&files, desc)).unwrap();
    let config: Value = serde_json::from_slice(blob(&files, &manifest["config"])).unwrap();
    let c = &config["config"];
    assert_eq!(c["Entrypoint"], serde_json::json!(["/sidecar-race-agent"]));
    assert_eq!(c["Cmd"], serde_json::json!(["run"]));
    assert_eq!(c["User"], "0:0");
    assert_eq!(c["Labels"]["org.opencontainers.image.version"], VERSION);
    assert_eq!(
        c["Labels"]["org.opencontainers.image.title"],
        "sidecar-race-agent"
    );
    assert_eq!(config["os"], "linux");

    // One gzip layer: exactly /sidecar-race-agent, static, 0755, root's.
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let gz = blob(&files, &layers[0]);
    let mut tar_bytes = Vec::new();
    gunzip(gz, &mut tar_bytes);
    assert_eq!(
        format!("sha256:{}", hex(&tar_bytes)),
        config["rootfs"]["diff_ids"][0].as_str().unwrap(),
        "diff_id is the uncompressed layer's digest"
    );
    let layer = entries(tar_bytes.as_slice());
    assert_eq!(
        layer.keys().collect::<Vec<_>>(),
        vec!["sidecar-race-agent"],
        "the layer holds the agent only"
    );
    let (mode, uid, gid, agent) = &layer["sidecar-race-agent"];
    assert_eq!((*mode & 0o7777, *uid, *gid), (0o755, 0, 0));
    let tmp = std::env::temp_dir().join(format!("sr-image-agent-{}", std::process::id()));
    std::fs::write(&tmp, agent).unwrap();
    let is_static = is_static_elf(&tmp);
    std::fs::remove_file(&tmp).unwrap();
    assert!(is_static, "the agent in the image is statically linked");

    // docker load's view: the same config and layer.
    let docker: Value = serde_json::from_slice(&files["manifest.json"].3).unwrap();
    let d = &docker[0];
    assert_eq!(d["RepoTags"], serde_json::json!([reference]));
    let digest_of = |desc: &Value| {
        desc["digest"]
            .as_str()
            .unwrap()
            .replace("sha256:", "blobs/sha256/")
    };
    assert_eq!(
        d["Config"].as_str().unwrap(),
        digest_of(&manifest["config"])
    );
    assert_eq!(d["Layers"][0].as_str().unwrap(), digest_of(&layers[0]));

    // skopeo (containers/image, what podman load uses) reads both views.
    if have("skopeo") {
        for transport in ["oci-archive", "docker-archive"] {
            let out = Command::new("skopeo")
                .args(["inspect", "--config"])
                .arg(format!("{transport}:{}", path.display()))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "skopeo inspect {transport}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(seen["config"]["Entrypoint"], c["Entrypoint"], "{transport}");
            assert_eq!(seen["config"]["User"], "0:0", "{transport}");
        }
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "skopeo missing: `cargo xtask setup` installs it"
        );
    }
}

/// gunzip with `gzip -dc` (no extra crate for the test kit).
fn gunzip(gz: &[u8], out: &mut Vec<u8>) {
    use std::io::Write;
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip");
    let mut stdin = child.stdin.take().unwrap();
    let data = gz.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data).unwrap());
    child.stdout.take().unwrap().read_to_end(out).unwrap();
    writer.join().unwrap();
    assert!(child.wait().unwrap().success(), "gzip -dc");
}
