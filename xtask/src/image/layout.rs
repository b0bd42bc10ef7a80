//! The image as an OCI image archive: a FROM-scratch image holding only
//! `/sidecar-race-agent` per architecture (`oci-layout`, `index.json`,
//! `blobs/sha256/…`, plus docker's `manifest.json` so that `docker load` of any version
//! takes it) at `target/image/sidecar-race-agent-<version>.oci.tar`: `ctr images
//! import`, `podman load`, `docker load` and `skopeo copy oci-archive:…` read it.
//! Reproducible: entries in a fixed order, uid/gid 0, mtimes and `created` from
//! `SOURCE_DATE_EPOCH` (else the last commit's time), a gzip header without a name or
//! time.
//!
//! The agent's SBOM (`sbom.rs`) is written beside the archive as
//! `target/image/sidecar-race-agent-<version>-linux-<arch>.cdx.json` and attached in the
//! layout as an OCI 1.1 referrer: an artifact manifest whose `subject` is the image
//! manifest, listed with its `artifactType` in the image's index beside the manifest it
//! describes (index.json names that index).

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::{Value, json};

use super::{
    release::{BINARY, REPOSITORY, VERSION},
    reproducible::{gzip, sha256, source_date_epoch, tar, write_atomically},
    sbom,
    static_build::{build_static_agent, target, triple_of},
};
use crate::run::{output, workspace_root};

/// What `cargo xtask image` made.
pub struct Built {
    pub archive: PathBuf,
    pub reference: String,
    /// The image index's digest: what the reference resolves to.
    pub digest: String,
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

/// The blobs of an OCI layout, by hex digest.
#[derive(Default)]
struct Blobs(BTreeMap<String, Vec<u8>>);

impl Blobs {
    /// Stores `data`; its descriptor.
    fn add(&mut self, media_type: &str, data: Vec<u8>) -> Value {
        let digest = sha256(&data);
        let desc = json!({
            "mediaType": media_type,
            "digest": format!("sha256:{digest}"),
            "size": data.len(),
        });
        self.0.insert(digest, data);
        desc
    }
}

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// OCI 1.1's empty descriptor: the config of an artifact that has none.
const EMPTY: &str = "application/vnd.oci.empty.v1+json";

/// One platform's image in the layout.
struct PlatformImage {
    /// The image manifest's descriptor, with its platform.
    manifest: Value,
    config: Value,
    layer: Value,
    agent_size: usize,
}

/// Adds the image of the static agent `agent` (built for `arch`) to `blobs`.
fn platform_image(
    blobs: &mut Blobs,
    agent: &[u8],
    arch: &str,
    epoch: u64,
) -> anyhow::Result<PlatformImage> {
    let created = rfc3339(epoch);
    // The one layer: /sidecar-race-agent.
    let layer_tar = tar(&[(BINARY, 0o755, Some(agent))], epoch)?;
    let diff_id = format!("sha256:{}", sha256(&layer_tar));
    let layer = blobs.add(
        "application/vnd.oci.image.layer.v1.tar+gzip",
        gzip(&layer_tar)?,
    );
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
    let config = blobs.add(
        "application/vnd.oci.image.config.v1+json",
        serde_json::to_vec(&config)?,
    );
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config,
        "layers": [layer],
        "annotations": {
            "org.opencontainers.image.version": VERSION,
            "org.opencontainers.image.created": created,
        },
    });
    let mut manifest = blobs.add(MANIFEST, serde_json::to_vec(&manifest)?);
    manifest["platform"] = json!({"architecture": arch, "os": "linux"});
    Ok(PlatformImage {
        manifest,
        config,
        layer,
        agent_size: agent.len(),
    })
}

/// Builds the static agent for each of `arches` (OCI names; the host's when empty)
/// and writes the image archive: index.json names one image index, which holds each
/// platform's image manifest and, beside each, the SBOM referrer whose `subject` is
/// that manifest.
///
/// The referrers are in the image's index rather than in index.json itself: `skopeo`
/// and `podman load` refuse an `oci-archive:` whose index.json lists more than one
/// manifest unless the user names one.
pub fn image(reference: Option<String>, arches: &[String]) -> anyhow::Result<Built> {
    let arches = match arches {
        [] => vec![target()?.1.to_string()],
        some => some.to_vec(),
    };
    let reference = reference.unwrap_or_else(|| format!("{REPOSITORY}:{VERSION}"));
    let epoch = source_date_epoch();
    let created = rfc3339(epoch);
    let mut blobs = Blobs::default();
    let mut manifests = Vec::new();
    let mut images = Vec::new();
    for arch in &arches {
        let agent = fs::read(build_static_agent(arch)?)?;
        let image = platform_image(&mut blobs, &agent, arch, epoch)?;
        let sbom = sbom::cyclonedx(triple_of(arch)?)?;
        let sbom_path = sbom_path(&workspace_root(), arch);
        write_atomically(&sbom_path, &sbom)?;
        let referrer = sbom_referrer(&mut blobs, &image.manifest, sbom, &created)?;
        eprintln!(
            "xtask: {arch}: image manifest {}, agent {} bytes, SBOM {}",
            image.manifest["digest"].as_str().unwrap_or_default(),
            image.agent_size,
            sbom_path.display()
        );
        manifests.extend([image.manifest.clone(), referrer]);
        images.push(image);
    }

    let image_index = json!({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": manifests,
    });
    let mut image_index = blobs.add(INDEX, serde_json::to_vec(&image_index)?);
    let digest = image_index["digest"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    image_index["annotations"] = json!({
        // containerd (ctr import, docker 25+) names the image from this one ...
        "io.containerd.image.name": reference,
        // ... podman and skopeo from this one.
        "org.opencontainers.image.ref.name": reference,
    });
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [image_index],
    }))?;
    // docker load before 25 reads this instead of index.json; it holds one
    // platform's image, the first.
    let blob_path = |desc: &Value| {
        desc["digest"]
            .as_str()
            .unwrap_or_default()
            .replace("sha256:", "blobs/sha256/")
    };
    let docker_manifest = serde_json::to_vec(&json!([{
        "Config": blob_path(&images[0].config),
        "RepoTags": [reference],
        "Layers": [blob_path(&images[0].layer)],
    }]))?;

    let blob_paths: Vec<(String, &[u8])> = blobs
        .0
        .iter()
        .map(|(d, data)| (format!("blobs/sha256/{d}"), data.as_slice()))
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
    for (path, data) in &blob_paths {
        entries.push((path, 0o644, Some(data)));
    }
    let archive_bytes = tar(&entries, epoch)?;
    let archive = archive_path(&workspace_root());
    write_atomically(&archive, &archive_bytes)?;
    eprintln!(
        "xtask: wrote {} ({} bytes): {reference} for {}, index {digest}",
        archive.display(),
        archive_bytes.len(),
        arches.join(", "),
    );
    Ok(Built {
        archive,
        reference,
        digest,
    })
}

/// The SBOM as an OCI 1.1 referrer of the image manifest `image`: an image manifest
/// whose `artifactType` is the SBOM's media type, with the empty config and the SBOM as
/// its one layer. Its descriptor, with `artifactType` as OCI 1.1 indexes list
/// referrers.
fn sbom_referrer(
    blobs: &mut Blobs,
    image: &Value,
    sbom: Vec<u8>,
    created: &str,
) -> anyhow::Result<Value> {
    let mut empty = blobs.add(EMPTY, b"{}".to_vec());
    empty["data"] = json!("e30=");
    let mut layer = blobs.add(sbom::MEDIA_TYPE, sbom);
    layer["annotations"] = json!({"org.opencontainers.image.title": SBOM_FILE});
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "artifactType": sbom::MEDIA_TYPE,
        "config": empty,
        "layers": [layer],
        "subject": {
            "mediaType": image["mediaType"],
            "digest": image["digest"],
            "size": image["size"],
        },
        "annotations": {"org.opencontainers.image.created": created},
    });
    let mut desc = blobs.add(MANIFEST, serde_json::to_vec(&manifest)?);
    desc["artifactType"] = json!(sbom::MEDIA_TYPE);
    Ok(desc)
}

const SBOM_FILE: &str = "sidecar-race-agent.cdx.json";

/// Where `cargo xtask image` writes the SBOM it attaches for `arch` (CycloneDX JSON).
pub fn sbom_path(root: &Path, arch: &str) -> PathBuf {
    root.join(format!(
        "target/image/sidecar-race-agent-{VERSION}-linux-{arch}.cdx.json"
    ))
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
}
