//! Host paths a runtime makes outside the state directory although every configured
//! path is in it: which of them were absent at `start` is recorded in a file, and
//! `stop` removes those only.

use std::{fs, path::Path};

/// Records which of `paths` are absent now, in `record`.
pub fn record_absent(paths: &[&str], record: &Path) -> std::io::Result<()> {
    let absent: Vec<&str> = paths
        .iter()
        .copied()
        .filter(|p| !Path::new(p).exists())
        .collect();
    fs::write(record, absent.join("\n"))
}

/// Removes those of `paths` that `record` says were absent.
pub fn remove_made(paths: &[&str], record: &Path) {
    let made = fs::read_to_string(record).unwrap_or_default();
    for path in made.lines().filter(|p| paths.contains(p)) {
        let _ = fs::remove_dir_all(path);
    }
}
