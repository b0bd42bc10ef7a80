//! Where pins and their manifests go, and the directory work on bpffs: staging a
//! load's pins, committing them, removing them.

use std::path::{Path, PathBuf};

use super::{bpffs, error::PinError, manifest};

/// The first release whose tracepoint attachments are bpf_links, hence pinnable.
const LINKS_FROM: (u8, u8) = (5, 15);

/// Where pins and their manifests go.
#[derive(Debug, Clone)]
pub struct Pins {
    /// `<bpffs>/sidecar-race`.
    root: PathBuf,
    state_dir: PathBuf,
}

impl Pins {
    /// Pins under `bpffs`, manifests in `state_dir`; why not, when the kernel cannot
    /// keep links or `bpffs` is no BPF filesystem.
    pub fn new(bpffs: &Path, state_dir: &Path) -> Result<Self, String> {
        let links_from = aya::util::KernelVersion::new(LINKS_FROM.0, LINKS_FROM.1, 0);
        match aya::util::KernelVersion::current() {
            Ok(v) if v >= links_from => {}
            Ok(_) => {
                return Err(format!(
                    "this kernel attaches tracepoints through perf events, which cannot be \
                     pinned (bpf_links from {}.{})",
                    LINKS_FROM.0, LINKS_FROM.1
                ));
            }
            Err(e) => return Err(format!("the kernel's release is unknown: {e}")),
        }
        match bpffs::is_bpffs(bpffs) {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "{} is not a BPF filesystem (mount one: `mount -t bpf bpf {}`)",
                    bpffs.display(),
                    bpffs.display()
                ));
            }
            Err(e) => return Err(format!("{}: {e}", bpffs.display())),
        }
        Ok(Self {
            root: bpffs.join("sidecar-race"),
            state_dir: state_dir.to_path_buf(),
        })
    }

    /// The pins of `key`.
    pub fn dir(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    pub fn manifest_path(&self, key: &str) -> PathBuf {
        manifest::path(&self.state_dir, key)
    }

    /// `key`'s manifest, if its pins are complete; why not, if it cannot be read.
    pub fn manifest(&self, key: &str) -> Result<Option<manifest::Manifest>, String> {
        if !self.dir(key).exists() {
            return Ok(None);
        }
        manifest::read(&self.manifest_path(key))
    }

    /// An empty directory to pin `key`'s load into before it is complete (`-new`:
    /// bpffs refuses names with dots).
    pub fn staging(&self, key: &str) -> Result<PathBuf, PinError> {
        let dir = self.root.join(format!("{key}-new"));
        remove_dir(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| PinError::Io(format!("mkdir {}: {e}", dir.display())))?;
        Ok(dir)
    }

    /// Makes the staged pins of `key` the adoptable ones: the manifest first, then the
    /// directory renamed into place (a half-pinned load is never adopted).
    pub fn commit(&self, key: &str, m: &manifest::Manifest) -> Result<(), PinError> {
        std::fs::create_dir_all(&self.state_dir)
            .and_then(|()| manifest::write(&self.manifest_path(key), m))
            .map_err(|e| PinError::Io(format!("write the pins' manifest: {e}")))?;
        let dir = self.dir(key);
        remove_dir(&dir);
        std::fs::rename(self.root.join(format!("{key}-new")), &dir)
            .map_err(|e| PinError::Io(format!("rename into {}: {e}", dir.display())))
    }

    /// The keys pinned now (complete or not).
    pub fn keys(&self) -> Vec<String> {
        std::fs::read_dir(&self.root)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.ends_with("-new"))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Unpins `key` (its programs detach once no agent holds them) and forgets it.
    pub fn remove(&self, key: &str) {
        remove_dir(&self.dir(key));
        remove_dir(&self.root.join(format!("{key}-new")));
        let _ = std::fs::remove_file(self.manifest_path(key));
    }

    /// Unpins every key but `keep`; the keys removed.
    pub fn remove_others(&self, keep: Option<&str>) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with("-new") {
                remove_dir(&e.path());
            } else if Some(name.as_str()) != keep {
                self.remove(&name);
                removed.push(name);
            }
        }
        if keep.is_none() {
            let _ = std::fs::remove_dir(&self.root);
        }
        removed
    }
}

fn remove_dir(dir: &Path) {
    if dir.exists()
        && let Err(e) = std::fs::remove_dir_all(dir)
    {
        tracing::warn!("cannot unpin {}: {e}", dir.display());
    }
}
