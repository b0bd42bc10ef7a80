//! The images the test bed's pods run, made here (no registry is reachable): the
//! sandbox image containerd's CRI plugin uses, a busybox image (`sh`, `nc`, `httpd`,
//! `sleep`, ...), both from Debian's busybox-static, and a glibc image with the host's
//! own `getent`, `logger`, `curl`, `perl`, `psql` and `socat`, written as OCI archives
//! for `ctr images import`; and the real sidecars `cargo xtask setup` builds (the
//! OpenTelemetry Collector, the Cloud SQL Auth Proxy, oauth2-proxy, the statsd
//! exporter), each packaged as its vendor packages it. One uncompressed layer, uid/gid 0, mtime 0, entries sorted.

use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::program_tree::{Item, Source, TreeError};

/// busybox-static's binary (Debian).
pub const BUSYBOX: &str = "/bin/busybox";
/// The CRI plugin's sandbox image: sleeps until SIGTERM/SIGKILL, which the kubelet
/// sends at teardown. Never pulled: the plugin finds it imported.
pub const PAUSE_IMAGE: &str = "sr-test.local/pause:1";
pub const BUSYBOX_IMAGE: &str = "sr-test.local/busybox:1";
/// Ordinary glibc programs, as a fleet's pods run them: busybox's applets, and the
/// host's Debian `getent` (glibc's resolver: the nscd socket, then DNS), `logger`
/// (syslog on `/dev/log`), `curl` (also `--unix-socket`), `perl` with perl-base's
/// modules (`IO::Socket::UNIX`), `psql` (libpq, the Cloud SQL proxy's client) and
/// `socat` (a Unix datagram log relay). No `/dev/log` and no nscd socket: they are
/// what the programs try and are refused on.
pub const GLIBC_IMAGE: &str = "sr-test.local/glibc:1";
/// A real sidecar's image as its vendor makes it: its static binary alone (no shell:
/// an exec probe cannot run in it) as the entrypoint, run as a non-root user.
pub struct VendorImage {
    pub reference: &'static str,
    /// The archive's file name.
    archive: &'static str,
    /// The binary's path in the image, at its root.
    entrypoint: &'static str,
    user: &'static str,
    cmd: &'static [&'static str],
}

/// The OpenTelemetry Collector `cargo xtask setup` builds (xtask/otelcol, v0.161.0), as
/// `otel/opentelemetry-collector` is made (FROM scratch, user 10001).
pub const COLLECTOR: VendorImage = VendorImage {
    reference: "sr-test.local/opentelemetry-collector:0.161.0",
    archive: "opentelemetry-collector.oci.tar",
    entrypoint: "otelcol",
    user: "10001",
    cmd: &["--config", "/etc/otelcol/config.yaml"],
};
/// The Cloud SQL Auth Proxy (xtask/src/cluster/sidecars.rs), as its distroless image is made
/// (user nonroot, 65532).
pub const CLOUD_SQL_PROXY: VendorImage = VendorImage {
    reference: "sr-test.local/cloud-sql-proxy:2.27.0",
    archive: "cloud-sql-proxy.oci.tar",
    entrypoint: "cloud-sql-proxy",
    user: "65532",
    cmd: &[],
};
/// oauth2-proxy (xtask/src/cluster/sidecars.rs), as its distroless image is made.
pub const OAUTH2_PROXY: VendorImage = VendorImage {
    reference: "sr-test.local/oauth2-proxy:7.15.6",
    archive: "oauth2-proxy.oci.tar",
    entrypoint: "oauth2-proxy",
    user: "65532",
    cmd: &[],
};
/// The Prometheus statsd exporter (xtask/src/cluster/sidecars.rs) as `prom/statsd-exporter`
/// runs it: user nobody, the binary the entrypoint. Its image adds the binary to
/// Prometheus' busybox base; only the binary here, since nothing runs a shell in it.
pub const STATSD_EXPORTER: VendorImage = VendorImage {
    reference: "sr-test.local/statsd-exporter:0.31.0",
    archive: "statsd-exporter.oci.tar",
    entrypoint: "statsd_exporter",
    user: "65534",
    cmd: &[],
};
const APPLETS: [&str; 9] = [
    "sh", "nc", "httpd", "sleep", "true", "cat", "wget", "kill", "date",
];
/// Where Debian's loader looks for the build architecture's libraries (the image has
/// no `ld.so.cache`): `lib/<multiarch>`, `usr/lib/<multiarch>`.
pub const HOST_LIB_DIRS: [&str; 2] = if cfg!(target_arch = "aarch64") {
    ["lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu"]
} else {
    ["lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"]
};
/// perl-base's modules (`IO::Socket::UNIX` among them), copied whole.
const PERL_BASE: &str = if cfg!(target_arch = "aarch64") {
    "usr/lib/aarch64-linux-gnu/perl-base"
} else {
    "usr/lib/x86_64-linux-gnu/perl-base"
};
/// The glibc image's programs: (path in the image, path on the host).
const GLIBC_PROGRAMS: [(&str, &str); 5] = [
    ("usr/bin/getent", "/usr/bin/getent"),
    ("usr/bin/logger", "/usr/bin/logger"),
    ("usr/bin/curl", "/usr/bin/curl"),
    ("usr/bin/perl", "/usr/bin/perl"),
    ("usr/bin/socat", "/usr/bin/socat"),
];
/// Where Debian's postgresql-client puts `psql` (`/usr/bin/psql` is a perl wrapper
/// choosing among versions): the newest is the image's `usr/bin/psql`.
const POSTGRESQL_LIB: &str = "/usr/lib/postgresql";

/// The host's newest `psql` binary, if postgresql-client is installed.
fn host_psql() -> Option<String> {
    let mut versions: Vec<(u32, String)> = fs::read_dir(POSTGRESQL_LIB)
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let psql = format!("{POSTGRESQL_LIB}/{name}/bin/psql");
            Some((name.parse().ok()?, psql)).filter(|(_, p)| Path::new(p).exists())
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, psql)| psql)
}
/// Files of the glibc image that come from no package: name lookups in files, then
/// DNS; root and nobody.
const GLIBC_ETC: [(&str, &str); 3] = [
    (
        "etc/nsswitch.conf",
        "passwd: files\ngroup: files\nhosts: files dns\n",
    ),
    (
        "etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    ),
    ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
];

#[derive(Debug, Error)]
pub enum ImageError {
    #[error("cannot read {BUSYBOX} (busybox-static; `cargo xtask setup` installs it): {0}")]
    Busybox(io::Error),
    #[error(
        "the glibc image's programs (getent, logger, curl, perl, psql, socat; `cargo xtask setup` installs them): {0}"
    )]
    Glibc(#[from] TreeError),
    #[error(
        "the glibc image's psql: no {POSTGRESQL_LIB}/<version>/bin/psql (postgresql-client; `cargo xtask setup` installs it)"
    )]
    Psql,
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error(
        "cannot read the sidecar's binary at {} (`cargo xtask setup` builds it): {source}",
        path.display()
    )]
    Sidecar { path: PathBuf, source: io::Error },
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
    let links = applet_links();
    tar(&busybox_entries(busybox, &links))
}

fn applet_links() -> Vec<String> {
    APPLETS.iter().map(|a| format!("bin/{a}")).collect()
}

fn busybox_entries<'a>(busybox: &'a [u8], links: &'a [String]) -> Vec<Entry<'a>> {
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
    entries
}

/// An entry of the glibc layer, owning its bytes.
enum Node {
    Dir(u32),
    File(u32, Vec<u8>),
    Link(String),
}

/// The glibc layer: the busybox layer's entries, the host's `GLIBC_PROGRAMS` with
/// their loader and libraries (`program_tree`), perl-base's directory, `GLIBC_ETC`, and
/// every parent directory, sorted by path.
fn glibc_layer(busybox: &[u8]) -> Result<Vec<u8>, ImageError> {
    let host = Source {
        root: Path::new("/"),
        lib_dirs: &HOST_LIB_DIRS,
    };
    let psql = host_psql().ok_or(ImageError::Psql)?;
    let mut programs = GLIBC_PROGRAMS.to_vec();
    programs.push(("usr/bin/psql", &psql));
    let tree = host.collect(&programs, &[PERL_BASE])?;
    let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
    let links = applet_links();
    for entry in busybox_entries(busybox, &links) {
        let (path, node) = match entry {
            Entry::Dir(p, mode) => (p, Node::Dir(mode)),
            Entry::File(p, mode, data) => (p, Node::File(mode, data.to_vec())),
            Entry::Link(p, target) => (p, Node::Link(target.to_string())),
        };
        nodes.insert(path.to_string(), node);
    }
    for (path, text) in GLIBC_ETC {
        nodes.insert(
            path.to_string(),
            Node::File(0o644, text.as_bytes().to_vec()),
        );
    }
    for (path, item) in tree {
        let node = match item {
            Item::File { from, mode } => {
                let data = fs::read(&from).map_err(|source| ImageError::Read {
                    path: from.clone(),
                    source,
                })?;
                Node::File(mode & 0o755, data)
            }
            Item::Link(target) => Node::Link(target.to_string_lossy().into_owned()),
        };
        nodes.insert(path, node);
    }
    let parents: Vec<String> = nodes
        .keys()
        .flat_map(|p| {
            let p = p.trim_end_matches('/');
            p.match_indices('/')
                .map(|(i, _)| p[..=i].to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    for dir in parents {
        nodes.entry(dir).or_insert(Node::Dir(0o755));
    }
    let entries: Vec<Entry> = nodes
        .iter()
        .map(|(p, n)| match n {
            Node::Dir(mode) => Entry::Dir(p, *mode),
            Node::File(mode, data) => Entry::File(p, *mode, data),
            Node::Link(target) => Entry::Link(p, target),
        })
        .collect();
    tar(&entries).map_err(|source| ImageError::Write {
        path: PathBuf::from("the glibc layer"),
        source,
    })
}

/// Writes the busybox, pause and glibc archives into `dir` (made if missing):
/// (archive, reference) pairs, for `ctr images import`.
pub fn write(dir: &Path) -> Result<Vec<(PathBuf, &'static str)>, ImageError> {
    let busybox = fs::read(BUSYBOX).map_err(ImageError::Busybox)?;
    let layer = busybox_layer(&busybox).map_err(|source| ImageError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let glibc = glibc_layer(&busybox)?;
    let write = |path: PathBuf, reference: &'static str, layer: &[u8], config: Value| {
        let archive = oci_archive(reference, layer, config).and_then(|bytes| {
            fs::create_dir_all(dir)?;
            fs::write(&path, bytes)
        });
        match archive {
            Ok(()) => Ok((path, reference)),
            Err(source) => Err(ImageError::Write { path, source }),
        }
    };
    Ok(vec![
        write(
            dir.join("busybox.oci.tar"),
            BUSYBOX_IMAGE,
            &layer,
            json!({"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]}),
        )?,
        write(
            dir.join("pause.oci.tar"),
            PAUSE_IMAGE,
            &layer,
            json!({"Env": ["PATH=/bin"], "Entrypoint": ["/bin/sleep", "2147483647"]}),
        )?,
        write(
            dir.join("glibc.oci.tar"),
            GLIBC_IMAGE,
            &glibc,
            json!({"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"]}),
        )?,
    ])
}

/// A vendor image's layer: its binary at `entrypoint`, and the directories runc
/// mounts over.
fn vendor_layer(entrypoint: &str, binary: &[u8]) -> io::Result<Vec<u8>> {
    let mut entries = vec![
        Entry::Dir("dev/", 0o755),
        Entry::Dir("etc/", 0o755),
        Entry::File("etc/hostname", 0o644, b""),
        Entry::File("etc/hosts", 0o644, b""),
        Entry::File("etc/resolv.conf", 0o644, b""),
        Entry::File(entrypoint, 0o755, binary),
        Entry::Dir("proc/", 0o555),
        Entry::Dir("sys/", 0o555),
        Entry::Dir("tmp/", 0o1777),
        Entry::Dir("var/", 0o755),
        Entry::Dir("var/run/", 0o755),
        Entry::Dir("var/run/secrets/", 0o755),
    ];
    entries.sort_by_key(|e| match e {
        Entry::Dir(p, _) | Entry::File(p, ..) | Entry::Link(p, _) => *p,
    });
    tar(&entries)
}

/// Writes `image`'s archive into `dir` from the binary at `binary`: (archive,
/// reference), for `ctr images import`.
pub fn write_vendor(
    dir: &Path,
    image: &VendorImage,
    binary: &Path,
) -> Result<(PathBuf, &'static str), ImageError> {
    let bytes = fs::read(binary).map_err(|source| ImageError::Sidecar {
        path: binary.to_path_buf(),
        source,
    })?;
    let path = dir.join(image.archive);
    let mut config = json!({
        "User": image.user,
        "Entrypoint": [format!("/{}", image.entrypoint)],
    });
    if !image.cmd.is_empty() {
        config["Cmd"] = json!(image.cmd);
    }
    vendor_layer(image.entrypoint, &bytes)
        .and_then(|layer| oci_archive(image.reference, &layer, config))
        .and_then(|archive| {
            fs::create_dir_all(dir)?;
            fs::write(&path, archive)
        })
        .map_err(|source| ImageError::Write {
            path: path.clone(),
            source,
        })?;
    Ok((path, image.reference))
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
    fn a_vendor_image_is_the_binary_alone_with_no_shell() {
        let dir = std::env::temp_dir().join(format!("sr-vendor-image-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let binary = dir.join("cloud-sql-proxy");
        fs::write(&binary, b"\x7fELF proxy").unwrap();
        let (archive, reference) = write_vendor(&dir, &CLOUD_SQL_PROXY, &binary).unwrap();
        assert_eq!(reference, CLOUD_SQL_PROXY.reference);
        let files = names(&vendor_layer(CLOUD_SQL_PROXY.entrypoint, b"\x7fELF proxy").unwrap());
        assert!(files.contains(&"cloud-sql-proxy".to_string()), "{files:?}");
        assert!(files.windows(2).all(|w| w[0] < w[1]), "sorted: {files:?}");
        assert!(
            !files
                .iter()
                .any(|f| f.ends_with("/sh") || f.ends_with("busybox")),
            "no shell, as the vendor's image: {files:?}"
        );
        assert!(names(&fs::read(&archive).unwrap()).contains(&"index.json".to_string()));
        let missing = write_vendor(&dir, &COLLECTOR, &dir.join("absent")).unwrap_err();
        assert!(
            missing.to_string().contains("cargo xtask setup"),
            "{missing}"
        );
        fs::remove_dir_all(&dir).unwrap();
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

    #[test]
    fn the_glibc_image_has_the_programs_their_libraries_and_no_socket() {
        let layer = glibc_layer(b"\x7fELF").unwrap();
        let names = names(&layer);
        for wanted in [
            "usr/bin/getent",
            "usr/bin/logger",
            "usr/bin/curl",
            "usr/bin/perl",
            "usr/bin/psql",
            "usr/bin/socat",
            "bin/busybox",
            "bin/nc",
            "etc/nsswitch.conf",
            "etc/passwd",
            "etc/group",
            "var/run/secrets/",
            "tmp/",
        ] {
            assert!(names.iter().any(|n| n == wanted), "no {wanted}: {names:?}");
        }
        let has = |suffix: &str| names.iter().any(|n| n.ends_with(suffix));
        assert!(has("/libc.so.6"), "{names:?}");
        assert!(has("/libcurl.so.4"), "{names:?}");
        assert!(has("/libpq.so.5"), "{names:?}");
        assert!(has("/libwrap.so.0"), "socat's: {names:?}");
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("lib") && n.contains("/ld-linux")),
            "the loader: {names:?}"
        );
        assert!(has("perl-base/IO/Socket/UNIX.pm"), "{names:?}");
        // What the programs are refused on stays missing.
        assert!(!names.iter().any(|n| n == "dev/log" || n.contains("nscd")));
        // Sorted, each directory before what it holds, and the same bytes each time.
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(layer, glibc_layer(b"\x7fELF").unwrap());
    }
}
