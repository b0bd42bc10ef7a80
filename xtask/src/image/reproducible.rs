//! Bytes that do not depend on when or where they are made: timestamps from
//! `SOURCE_DATE_EPOCH` (else the last commit's time), tars in a fixed order with uid/gid
//! 0, a gzip header without a name or time, SHA-256 digests; and atomic writes. The
//! image and the krew archive are built from these.

use std::{fs, io::Write, path::Path, process::Command};

use anyhow::Context;
use flate2::{Compression, GzBuilder};
use sha2::{Digest, Sha256};

use crate::run::{output, workspace_root};

/// Seconds since the epoch for every timestamp in the image.
pub fn source_date_epoch() -> u64 {
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

pub fn sha256(data: &[u8]) -> String {
    let d = Sha256::digest(data);
    let mut s = String::with_capacity(64);
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A tar of `(path, mode, contents)` entries (None: a directory), deterministic.
pub fn tar(entries: &[(&str, u32, Option<&[u8]>)], mtime: u64) -> anyhow::Result<Vec<u8>> {
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

/// gzip with a header that names no file and no time.
pub fn gzip(data: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut gz = GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), Compression::new(6));
    gz.write_all(data)?;
    Ok(gz.finish()?)
}

pub fn write_atomically(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, data).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
