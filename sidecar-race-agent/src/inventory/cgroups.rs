//! The cgroup v2 hierarchy's index: cgroup id → path, built by walking it (from the
//! mount [`crate::kernel::cgroup2`] finds) and kept current from the kernel's
//! mkdir/rmdir events.

use std::{
    collections::{HashMap, HashSet},
    io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// Identity of a cgroup: its path relative to the cgroup2 mount (`/` for the root).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    path: String,
    /// Boot ns when the kernel removed it; it stays resolvable for the grace period.
    removed_at: Option<u64>,
}

/// cgroup id → path. The id of a cgroup v2 directory is its inode number.
#[derive(Debug)]
pub struct CgroupIndex {
    mount: PathBuf,
    entries: HashMap<u64, Entry>,
    grace_ns: u64,
    last_rescan: Option<Instant>,
    /// The highest id the last walk found: ids are handed out in increasing order, so
    /// an unknown id above it is a cgroup made since, which a walk now will find.
    newest_walked: u64,
    last_prune: Option<Instant>,
    /// Bumped whenever a cgroup is added, removed or forgotten.
    generation: u64,
}

/// Unknown ids trigger at most one rescan per this interval...
const RESCAN_INTERVAL: Duration = Duration::from_secs(1);
/// ... or per this one for an id newer than the last walk's newest (a cgroup made
/// since): without creation events a new container's first refusals would otherwise
/// wait out the interval that another cgroup's unknown id just started, and be lost.
const NEW_ID_RESCAN_INTERVAL: Duration = Duration::from_millis(50);
/// The whole hierarchy is walked again this often to prune lost removals.
const PRUNE_INTERVAL: Duration = Duration::from_secs(60);

impl CgroupIndex {
    pub fn new(mount: impl Into<PathBuf>, grace_ns: u64) -> Self {
        Self {
            mount: mount.into(),
            entries: HashMap::new(),
            grace_ns,
            last_rescan: None,
            newest_walked: 0,
            last_prune: None,
            generation: 0,
        }
    }

    /// Changes whenever the set of cgroups or their removal state changes.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Ids and paths of cgroups not removed.
    pub fn live(&self) -> impl Iterator<Item = (u64, &str)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.removed_at.is_none())
            .map(|(id, e)| (*id, e.path.as_str()))
    }

    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// Walks the hierarchy and records every directory. Returns how many there are.
    /// Directories gone since (their removal event lost) are marked removed now.
    pub fn scan(&mut self) -> io::Result<usize> {
        self.scan_at(crate::clock::boot_now_ns())
    }

    /// [`CgroupIndex::scan`] at boot time `now_boot_ns`: entries no longer on disk are
    /// marked removed then, and expire after the grace period like removed ones.
    pub fn scan_at(&mut self, now_boot_ns: u64) -> io::Result<usize> {
        self.generation += 1;
        let mut stack = vec![self.mount.clone()];
        let mut found = 0;
        let mut seen = HashSet::new();
        while let Some(dir) = stack.pop() {
            let meta = match std::fs::symlink_metadata(&dir) {
                Ok(m) => m,
                Err(e) if dir == self.mount => return Err(e),
                Err(_) => continue, // removed while walking
            };
            let rel = relative(&self.mount, &dir);
            seen.insert(meta.ino());
            self.newest_walked = self.newest_walked.max(meta.ino());
            self.entries.insert(
                meta.ino(),
                Entry {
                    path: rel,
                    removed_at: None,
                },
            );
            found += 1;
            let Ok(children) = std::fs::read_dir(&dir) else {
                continue;
            };
            for child in children.flatten() {
                if child.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(child.path());
                }
            }
        }
        for (id, e) in self.entries.iter_mut() {
            if !seen.contains(id) && e.removed_at.is_none() {
                e.removed_at = Some(now_boot_ns);
            }
        }
        self.expire(now_boot_ns);
        self.last_prune = Some(Instant::now());
        Ok(found)
    }

    /// Walks the hierarchy again when the last walk is older than the prune interval,
    /// so entries whose removal event was lost do not stay forever.
    pub fn prune_if_due(&mut self, now_boot_ns: u64) -> bool {
        if self
            .last_prune
            .is_some_and(|t| t.elapsed() < PRUNE_INTERVAL)
        {
            return false;
        }
        self.scan_at(now_boot_ns).is_ok()
    }

    pub fn created(&mut self, id: u64, path: &str) {
        self.generation += 1;
        self.entries.insert(
            id,
            Entry {
                path: path.to_string(),
                removed_at: None,
            },
        );
    }

    /// Marks a cgroup removed at `at_boot_ns`; it resolves until the grace period ends.
    pub fn removed(&mut self, id: u64, path: &str, at_boot_ns: u64) {
        self.generation += 1;
        self.entries
            .entry(id)
            .or_insert_with(|| Entry {
                path: path.to_string(),
                removed_at: None,
            })
            .removed_at = Some(at_boot_ns);
    }

    /// Forgets cgroups removed longer than the grace period before `now_boot_ns`.
    pub fn expire(&mut self, now_boot_ns: u64) {
        let grace = self.grace_ns;
        self.entries.retain(|_, e| {
            e.removed_at
                .is_none_or(|at| now_boot_ns.saturating_sub(at) <= grace)
        });
    }

    /// Paths of cgroups not removed.
    pub fn live_paths(&self) -> impl Iterator<Item = &str> {
        self.entries
            .values()
            .filter(|e| e.removed_at.is_none())
            .map(|e| e.path.as_str())
    }

    /// Whether the kernel removed cgroup `id` (and the index still remembers it).
    pub fn is_removed(&self, id: u64) -> bool {
        self.entries
            .get(&id)
            .is_some_and(|e| e.removed_at.is_some())
    }

    /// Whether cgroup `id` is gone from the node: removed, or unknown although a walk
    /// found a newer one (ids are handed out in increasing order, so that walk would
    /// have found it): removed while no agent watched.
    pub fn is_gone(&self, id: u64) -> bool {
        match self.entries.get(&id) {
            Some(e) => e.removed_at.is_some(),
            None => id < self.newest_walked,
        }
    }

    pub fn path(&self, id: u64) -> Option<&str> {
        self.entries.get(&id).map(|e| e.path.as_str())
    }

    /// Resolves `id`, walking the hierarchy once more when it is unknown (a cgroup
    /// whose creation event was lost or came before the agent).
    pub fn resolve(&mut self, id: u64) -> Option<&str> {
        let interval = if id > self.newest_walked {
            NEW_ID_RESCAN_INTERVAL
        } else {
            RESCAN_INTERVAL
        };
        let due = self.last_rescan.is_none_or(|t| t.elapsed() >= interval);
        if !self.entries.contains_key(&id) && due {
            self.last_rescan = Some(Instant::now());
            let _ = self.scan();
        }
        self.path(id)
    }

    /// The path of cgroup `id`, just made, whose creation event came without one:
    /// walks the hierarchy at once unless a walk already found it.
    pub fn name_new(&mut self, id: u64) -> Option<&str> {
        if !self.entries.contains_key(&id) {
            self.last_rescan = Some(Instant::now());
            let _ = self.scan();
        }
        self.path(id)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn relative(mount: &Path, dir: &Path) -> String {
    match dir.strip_prefix(mount) {
        Ok(rel) if rel.as_os_str().is_empty() => "/".into(),
        Ok(rel) => format!("/{}", rel.display()),
        Err(_) => dir.display().to_string(),
    }
}

/// The cgroup id of a directory in the hierarchy.
pub fn id_of(dir: &Path) -> io::Result<u64> {
    Ok(std::fs::metadata(dir)?.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_walks_directories_and_expires_removed_ones() {
        // A plain directory tree stands in for cgroupfs: ids are inode numbers either way.
        let root = std::env::temp_dir().join(format!("sr-cgidx-{}", std::process::id()));
        let pod = root.join("kubepods.slice/kubepods-pod1.slice");
        std::fs::create_dir_all(&pod).unwrap();
        let mut idx = CgroupIndex::new(&root, 1_000);
        assert_eq!(idx.scan().unwrap(), 3);
        let id = id_of(&pod).unwrap();
        assert_eq!(idx.path(id), Some("/kubepods.slice/kubepods-pod1.slice"));
        assert_eq!(idx.path(id_of(&root).unwrap()), Some("/"));
        idx.removed(id, "/kubepods.slice/kubepods-pod1.slice", 5_000);
        idx.expire(5_900);
        assert!(idx.path(id).is_some(), "still within grace");
        idx.expire(6_001);
        assert!(idx.path(id).is_none());
        idx.created(7, "/a");
        assert_eq!(idx.path(7), Some("/a"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_rescan_prunes_directories_whose_removal_was_never_seen() {
        let root = std::env::temp_dir().join(format!("sr-cgprune-{}", std::process::id()));
        let pod = root.join("kubepods.slice/kubepods-pod2.slice");
        std::fs::create_dir_all(&pod).unwrap();
        let mut idx = CgroupIndex::new(&root, 1_000);
        idx.scan_at(1_000).unwrap();
        let id = id_of(&pod).unwrap();
        // The pod's cgroup goes away and its rmdir event is lost.
        std::fs::remove_dir(&pod).unwrap();
        assert_eq!(idx.scan_at(2_000).unwrap(), 2);
        assert!(idx.path(id).is_some(), "resolvable for the grace period");
        idx.scan_at(3_001).unwrap();
        assert!(idx.path(id).is_none(), "pruned after the grace period");
        assert_eq!(idx.len(), 2);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_cgroup_made_since_the_last_walk_does_not_wait_out_another_ids_rescan() {
        let root = std::env::temp_dir().join(format!("sr-cgnew-{}", std::process::id()));
        std::fs::create_dir_all(root.join("kubepods.slice")).unwrap();
        let mut idx = CgroupIndex::new(&root, 1_000);
        idx.scan().unwrap();
        // Another cgroup's unknown id has just walked the hierarchy.
        assert_eq!(idx.resolve(u64::MAX), None);
        let pod = root.join("kubepods.slice/kubepods-pod3.slice");
        std::fs::create_dir(&pod).unwrap();
        let id = id_of(&pod).unwrap();
        std::thread::sleep(NEW_ID_RESCAN_INTERVAL);
        // cgroupfs hands out increasing ids; this test's directories may not, so the
        // walk's newest id is set as cgroupfs would have it.
        idx.newest_walked = id - 1;
        assert_eq!(idx.resolve(id), Some("/kubepods.slice/kubepods-pod3.slice"));
        // An unknown id older than the walk's newest waits out the long interval.
        let gone = root.join("kubepods.slice/kubepods-pod4.slice");
        std::fs::create_dir(&gone).unwrap();
        let older = id_of(&gone).unwrap();
        idx.newest_walked = u64::MAX - 1;
        std::thread::sleep(NEW_ID_RESCAN_INTERVAL);
        assert_eq!(idx.resolve(older), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
