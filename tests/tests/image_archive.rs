//! The image archive `cargo xtask image` writes
//! (`target/image/sidecar-race-agent-<version>.oci.tar`), read as the tools that load
//! it read it: an OCI image layout whose digests and sizes match its blobs, an image
//! config with the entrypoint, command, user, labels and version, one layer holding
//! only the statically linked agent (root-owned, 0755), docker's `manifest.json`
//! naming the same config and layer, and `skopeo inspect` of it both as
//! `oci-archive:` and as `docker-archive:` (what `podman load` / `docker load` read).
//!
//! The agent's SBOM rides along as an OCI 1.1 referrer of the image manifest: it
//! lists the crates Cargo.lock pins (aya, tokio, kube) with their versions and
//! checksums, leaves the dev-dependencies out, and two builds give the same bytes.
//!
//! No root needed. `cargo xtask test` builds the archive first; without it this test
//! fails under CI and is skipped elsewhere with a message.

use std::{collections::BTreeMap, io::Read, path::PathBuf, process::Command};

use serde_json::Value;
use sha2::{Digest, Sha256};
use sidecar_race_tests::{cri::is_static_elf, root::have};

const VERSION: &str = env!("CARGO_PKG_VERSION");

const CYCLONEDX: &str = "application/vnd.cyclonedx+json";

fn target_image(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../target/image/{file}"))
}

/// The SBOM `cargo xtask image` writes beside the archive for `arch`.
fn sbom_file(arch: &str) -> PathBuf {
    target_image(&format!(
        "sidecar-race-agent-{VERSION}-linux-{arch}.cdx.json"
    ))
}

fn archive() -> Option<PathBuf> {
    let p = std::env::var_os("SIDECAR_RACE_IMAGE_ARCHIVE")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_image(&format!("sidecar-race-agent-{VERSION}.oci.tar")));
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing: `cargo xtask test` builds it (`cargo xtask image`)",
        p.display()
    );
    sidecar_race_tests::root::skip(
        "the_image_archive_is_an_oci_layout_with_only_the_static_agent",
        &format!("{} is missing; run `cargo xtask image`", p.display()),
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
    // index.json names one image index: the image and what refers to it.
    let named = index["manifests"].as_array().unwrap();
    assert_eq!(named.len(), 1, "one entry, so that tools need no reference");
    let named = &named[0];
    assert_eq!(
        named["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let reference = named["annotations"]["io.containerd.image.name"]
        .as_str()
        .unwrap();
    assert_eq!(
        named["annotations"]["org.opencontainers.image.ref.name"],
        reference
    );
    let image_index: Value = serde_json::from_slice(blob(&files, named)).unwrap();
    let desc = host_image(&image_index);
    assert_eq!(
        desc["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
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
    assert_eq!(desc["platform"]["os"], "linux");
    assert_eq!(desc["platform"]["architecture"], config["architecture"]);

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

/// The host architecture's image in the image index (an entry that is not an artifact).
fn host_image(index: &Value) -> &Value {
    let arch = match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "amd64",
    };
    let images: Vec<&Value> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d.get("artifactType").is_none() && d["platform"]["architecture"] == arch)
        .collect();
    assert_eq!(images.len(), 1, "one {arch} image in {index:#}");
    images[0]
}

/// `name` → (version, checksum) of the crates.io packages in Cargo.lock that appear
/// once (Cargo.lock is TOML; its package blocks are regular enough to read by line).
fn locked() -> BTreeMap<String, (String, String)> {
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
    let mut seen: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for block in lock.split("[[package]]").skip(1) {
        let field = |k: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{k} = \"")))
                .map(|v| v.trim_end_matches('"').to_string())
        };
        if let (Some(name), Some(version), Some(sum)) =
            (field("name"), field("version"), field("checksum"))
        {
            seen.entry(name).or_default().push((version, sum));
        }
    }
    seen.into_iter()
        .filter(|(_, v)| v.len() == 1)
        .map(|(k, mut v)| (k, v.remove(0)))
        .collect()
}

#[test]
fn each_image_has_an_sbom_referrer_listing_the_locked_crates() {
    let Some(path) = archive() else {
        return;
    };
    let files = entries(std::fs::File::open(&path).unwrap());
    let top: Value = serde_json::from_slice(&files["index.json"].3).unwrap();
    let index: Value = serde_json::from_slice(blob(&files, &top["manifests"][0])).unwrap();
    let all = index["manifests"].as_array().unwrap();
    let images: Vec<&Value> = all
        .iter()
        .filter(|d| d.get("artifactType").is_none())
        .collect();
    let referrers: Vec<&Value> = all
        .iter()
        .filter(|d| d["artifactType"] == CYCLONEDX)
        .collect();
    assert_eq!(
        referrers.len(),
        images.len(),
        "one SBOM referrer per image in {index:#}"
    );
    for image in images {
        let arch = image["platform"]["architecture"].as_str().unwrap();
        let of_image: Vec<Value> = referrers
            .iter()
            .map(|r| serde_json::from_slice::<Value>(blob(&files, r)).unwrap())
            .filter(|r| r["subject"]["digest"] == image["digest"])
            .collect();
        assert_eq!(
            of_image.len(),
            1,
            "one referrer's subject is the {arch} manifest"
        );
        check_sbom_referrer(&files, image, &of_image[0], arch);
    }
}

fn check_sbom_referrer(
    files: &BTreeMap<String, (u32, u64, u64, Vec<u8>)>,
    image: &Value,
    referrer: &Value,
    arch: &str,
) {
    assert_eq!(referrer["artifactType"], CYCLONEDX);
    assert_eq!(referrer["subject"]["size"], image["size"]);
    assert_eq!(referrer["subject"]["mediaType"], image["mediaType"]);
    // OCI 1.1's empty config for an artifact without one.
    assert_eq!(
        referrer["config"]["mediaType"],
        "application/vnd.oci.empty.v1+json"
    );
    assert_eq!(blob(files, &referrer["config"]), b"{}");
    let layers = referrer["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], CYCLONEDX);
    let sbom_bytes = blob(files, &layers[0]);
    assert_eq!(
        sbom_bytes,
        std::fs::read(sbom_file(arch)).unwrap(),
        "the attached SBOM is the one written beside the archive"
    );

    let sbom: Value = serde_json::from_slice(sbom_bytes).unwrap();
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    assert_eq!(sbom["specVersion"], "1.6");
    assert!(sbom["metadata"].get("timestamp").is_none(), "no timestamp");
    let serial = sbom["serialNumber"].as_str().unwrap();
    let uuid = serial.strip_prefix("urn:uuid:").expect(serial);
    assert_eq!(
        &uuid[14..15],
        "5",
        "a name-based UUID, not a random one: {uuid}"
    );
    let agent = &sbom["metadata"]["component"];
    assert_eq!(agent["name"], "sidecar-race-agent");
    assert_eq!(agent["version"], VERSION);
    let triple = sbom["metadata"]["properties"][0]["value"].as_str().unwrap();
    let cpu = match arch {
        "amd64" => "x86_64",
        "arm64" => "aarch64",
        other => other,
    };
    assert!(triple.starts_with(cpu), "{triple} is the image's {arch}");

    let components = sbom["components"].as_array().unwrap();
    let component = |name: &str| {
        let all: Vec<&Value> = components.iter().filter(|c| c["name"] == name).collect();
        assert_eq!(all.len(), 1, "{name} once in the SBOM");
        all[0]
    };
    let lock = locked();
    for name in ["aya", "tokio", "kube"] {
        let (version, checksum) = &lock[name];
        let c = component(name);
        assert_eq!(c["version"], version.as_str(), "{name}");
        assert_eq!(c["purl"], format!("pkg:cargo/{name}@{version}"), "{name}");
        assert_eq!(c["hashes"][0]["alg"], "SHA-256");
        assert_eq!(c["hashes"][0]["content"], checksum.as_str(), "{name}");
        assert_eq!(c["scope"], "required", "{name} is linked into the agent");
    }
    // What the embedded eBPF object is built from, and what runs only at compile time.
    assert_eq!(
        component("aya-ebpf")["version"],
        lock["aya-ebpf"].0.as_str()
    );
    assert_eq!(component("tokio-macros")["scope"], "excluded");
    // The agent's dev-dependencies are not in it.
    for dev in ["proptest", "rcgen"] {
        assert!(
            components.iter().all(|c| c["name"] != dev),
            "{dev} is a dev-dependency"
        );
    }
    // Every dependency edge names a listed component.
    let refs: std::collections::BTreeSet<&str> = components
        .iter()
        .chain([agent])
        .map(|c| c["bom-ref"].as_str().unwrap())
        .collect();
    for d in sbom["dependencies"].as_array().unwrap() {
        for on in d["dependsOn"].as_array().unwrap() {
            assert!(refs.contains(on.as_str().unwrap()), "{on} is listed");
        }
    }
}

/// Two `cargo xtask image` runs give the same archive and SBOM, byte for byte.
#[test]
fn two_image_builds_give_identical_bytes() {
    if archive().is_none() {
        return;
    }
    let path = target_image(&format!("sidecar-race-agent-{VERSION}.oci.tar"));
    let sbom = sbom_file(match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "amd64",
    });
    let build = || {
        let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .args(["xtask", "image"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo xtask image: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (std::fs::read(&path).unwrap(), std::fs::read(&sbom).unwrap())
    };
    let (archive_a, sbom_a) = build();
    let (archive_b, sbom_b) = build();
    assert!(sbom_a == sbom_b, "the SBOM differs between two builds");
    assert!(
        archive_a == archive_b,
        "the archive differs between two builds"
    );
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
