//! Refusals the kernel counted instead of sending, because their container went over
//! its refusal budget. The kernel keeps one monotonic count per cgroup; every second
//! (and at the final flush) the agent reads them, turns them into deltas, attributes
//! each to its pod and container, and remembers the totals per incident client so an
//! incident can say its count is a lower bound.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use super::outcome::Outcome;
use crate::{
    detect::{Client, incident_log::IncidentLog},
    inventory::{
        Attribution, Inventory, PodOwner,
        cgroup_path::{self, PathInfo},
    },
    kernel::counters::SuppressedCounts,
};

/// What one reading adds: counts per pod and container, as outcomes for the sinks,
/// and the cgroups whose kernel entries may now be deleted (removed cgroups whose
/// final value was just read).
#[derive(Debug, Default)]
pub struct Reading {
    pub outcomes: Vec<Outcome>,
    pub forget: Vec<u64>,
}

struct Tracked {
    /// The kernel's value at the last reading.
    read: u64,
    /// Read but not yet attributed: waiting for the pod source to name the container.
    held: u64,
    first_seen: Instant,
}

#[derive(Default)]
pub struct Suppressed {
    cgroups: HashMap<u64, Tracked>,
    /// Totals per incident client (pod uid, client), for the incident view, and when
    /// they last grew.
    by_client: HashMap<(String, Client), (u64, Instant)>,
    unkeyed: u64,
    /// The next reading is taken as the baseline (see [`Suppressed::count_from_next_reading`]).
    baseline: bool,
}

/// Suppressed counts of a pod without incidents are kept this long.
const SUPPRESSED_MEMORY: Duration = Duration::from_secs(600);

impl Suppressed {
    /// Takes a reading of the kernel's counts (see [`Self::read`]), then forgets the
    /// totals of pods with no incident in `log` that have not grown for a while.
    pub(super) fn take_reading(
        &mut self,
        counts: &SuppressedCounts,
        inventory: &mut Inventory,
        log: &IncidentLog,
        wait: Duration,
        last: bool,
    ) -> Reading {
        let now = Instant::now();
        let reading = self.read(counts, inventory, now, wait, last);
        let pods: HashSet<&str> = log.newest_first().map(|i| i.pod_uid.as_str()).collect();
        self.retain_pods(&pods, now, SUPPRESSED_MEMORY);
        reading
    }

    /// Counts only what the kernel adds after the next reading: the map was adopted
    /// without the values an earlier agent read of it (no checkpoint restored), so
    /// what it holds is history since the pins were made, possibly days of it.
    pub fn count_from_next_reading(&mut self) {
        self.baseline = true;
    }

    /// Takes one reading of the kernel's counts. A cgroup whose pod or container the
    /// pod source has not named yet is held up to `wait` (not when `last`).
    pub fn read(
        &mut self,
        counts: &SuppressedCounts,
        inventory: &mut Inventory,
        now: Instant,
        wait: Duration,
        last: bool,
    ) -> Reading {
        let mut out = Reading::default();
        if std::mem::take(&mut self.baseline) {
            self.unkeyed = counts.unkeyed;
            for &(cgroup_id, value) in &counts.by_cgroup {
                if inventory.cgroups.is_gone(cgroup_id) {
                    out.forget.push(cgroup_id);
                    continue;
                }
                self.cgroups.insert(
                    cgroup_id,
                    Tracked {
                        read: value,
                        held: 0,
                        first_seen: now,
                    },
                );
            }
            return out;
        }
        // A count below the last one read started again from zero (a new kernel map,
        // after a restore from a checkpoint whose pinned map was not adopted).
        if counts.unkeyed < self.unkeyed {
            self.unkeyed = 0;
        }
        let unkeyed = counts.unkeyed - self.unkeyed;
        self.unkeyed = counts.unkeyed;
        if unkeyed > 0 {
            out.outcomes.push(Outcome::Suppressed {
                who: Attribution::default(),
                refusals: unkeyed,
            });
        }
        for &(cgroup_id, value) in &counts.by_cgroup {
            let t = self.cgroups.entry(cgroup_id).or_insert(Tracked {
                read: 0,
                held: 0,
                first_seen: now,
            });
            if value < t.read {
                t.read = 0; // counting again from zero, as above
            }
            t.held += value - t.read;
            t.read = value;
            let info = inventory
                .cgroups
                .resolve(cgroup_id)
                .map_or(PathInfo::Unknown, cgroup_path::parse);
            let names = inventory.names(info.clone());
            // Named: the pod source reported the pod and, for a container's cgroup,
            // the container.
            let named = names.pod.is_some() && !names.lacks_container_name();
            let may_wait = inventory.has_pod_source
                && !last
                && now.duration_since(t.first_seen) < wait
                && !matches!(info, PathInfo::Host | PathInfo::Unknown);
            if t.held > 0 && (named || !may_wait) {
                if let Some(key) = client_key(&info, cgroup_id) {
                    let e = self.by_client.entry(key).or_insert((0, now));
                    *e = (e.0 + t.held, now);
                }
                out.outcomes.push(Outcome::Suppressed {
                    who: names,
                    refusals: t.held,
                });
                t.held = 0;
            }
            // Removed while the agent watched, or before it started (its entry would
            // otherwise hold a slot of the kernel's map for ever).
            if t.held == 0 && inventory.cgroups.is_gone(cgroup_id) {
                self.cgroups.remove(&cgroup_id);
                out.forget.push(cgroup_id);
            }
        }
        out
    }

    /// Refusals of this incident client that the kernel counted instead of sending.
    pub fn of_client(&self, pod_uid: &str, client: &Client) -> u64 {
        self.by_client
            .get(&(pod_uid.to_string(), client.clone()))
            .map_or(0, |(n, _)| *n)
    }

    /// Keeps client totals of pods that still have incidents, or that grew within
    /// `memory` before `now` (their incidents may not exist yet).
    pub fn retain_pods(&mut self, pods: &HashSet<&str>, now: Instant, memory: Duration) {
        self.by_client.retain(|(uid, _), (_, at)| {
            pods.contains(uid.as_str()) || now.duration_since(*at) < memory
        });
    }
}

/// What a checkpoint carries of [`Suppressed`]: the kernel's values already read (the
/// next agent reads the same kernel map) and the totals per incident client. Ages are
/// not carried: waits and memory start again at the restore.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SuppressedSnapshot {
    /// (cgroup id, value read, held for names).
    cgroups: Vec<(u64, u64, u64)>,
    by_client: Vec<(String, Client, u64)>,
    unkeyed: u64,
}

impl Suppressed {
    pub fn snapshot(&self) -> SuppressedSnapshot {
        SuppressedSnapshot {
            cgroups: self
                .cgroups
                .iter()
                .map(|(id, t)| (*id, t.read, t.held))
                .collect(),
            by_client: self
                .by_client
                .iter()
                .map(|((uid, client), (n, _))| (uid.clone(), client.clone(), *n))
                .collect(),
            unkeyed: self.unkeyed,
        }
    }

    pub fn restore(&mut self, snap: SuppressedSnapshot, now: Instant) {
        self.cgroups = snap
            .cgroups
            .into_iter()
            .map(|(id, read, held)| {
                let first_seen = now;
                (
                    id,
                    Tracked {
                        read,
                        held,
                        first_seen,
                    },
                )
            })
            .collect();
        self.by_client = snap
            .by_client
            .into_iter()
            .map(|(uid, client, n)| ((uid, client), (n, now)))
            .collect();
        self.unkeyed = snap.unkeyed;
    }
}

/// The incident client a cgroup's refusals belong to, as the pipeline keys them.
fn client_key(info: &PathInfo, cgroup_id: u64) -> Option<(String, Client)> {
    let owner = PodOwner::of(info)?;
    Some((
        owner.pod_uid.to_string(),
        Client::of(owner.container_id, cgroup_id),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{cgroups::CgroupIndex, store::PodStore};

    const UID: &str = "6f2c1a6e-8b0f-4d8e-9a53-3c1d2e4f5a6b";

    fn inventory() -> Inventory {
        let dir = std::env::temp_dir().join(format!("sr-suppressed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cgroups = CgroupIndex::new(&dir, u64::MAX);
        let pod = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
            UID.replace('-', "_")
        );
        cgroups.created(
            11,
            &format!("{pod}/cri-containerd-{}.scope", "a".repeat(64)),
        );
        Inventory::new(cgroups, PodStore::new(Duration::from_secs(600)), false)
    }

    /// The refusals a reading tells the sinks about.
    fn total(r: &Reading) -> u64 {
        r.outcomes
            .iter()
            .map(|o| match o {
                Outcome::Suppressed { refusals, .. } => *refusals,
                _ => 0,
            })
            .sum()
    }

    fn counts(by_cgroup: &[(u64, u64)], unkeyed: u64) -> SuppressedCounts {
        SuppressedCounts {
            by_cgroup: by_cgroup.to_vec(),
            unkeyed,
        }
    }

    #[test]
    fn deltas_add_up_to_the_kernel_counts_and_removed_cgroups_are_forgotten() {
        let mut inv = inventory();
        let mut s = Suppressed::default();
        let now = Instant::now();
        let wait = Duration::from_secs(10);
        let r = s.read(&counts(&[(11, 500)], 2), &mut inv, now, wait, false);
        assert_eq!(total(&r), 502);
        assert!(r.forget.is_empty(), "a live cgroup keeps its entry");
        let r = s.read(&counts(&[(11, 800)], 2), &mut inv, now, wait, false);
        assert_eq!(total(&r), 300);
        inv.cgroups.removed(11, "", 1);
        let r = s.read(&counts(&[(11, 801)], 2), &mut inv, now, wait, false);
        assert_eq!(total(&r), 1);
        assert_eq!(r.forget, vec![11], "read its final value, then delete");
        let client = Client::Container("a".repeat(64).into());
        assert_eq!(s.of_client(UID, &client), 801);
        // An entry the kernel makes again after the delete counts from zero.
        let r = s.read(&counts(&[(11, 3)], 2), &mut inv, now, wait, false);
        assert_eq!(total(&r), 3);
        assert_eq!(s.of_client(UID, &client), 804);
    }

    #[test]
    fn after_a_restore_only_growth_counts_and_a_new_map_counts_from_zero() {
        let mut inv = inventory();
        let (now, wait) = (Instant::now(), Duration::from_secs(10));
        let mut old = Suppressed::default();
        old.read(&counts(&[(11, 500)], 7), &mut inv, now, wait, false);
        let mut s = Suppressed::default();
        s.restore(old.snapshot(), now);
        let client = Client::Container("a".repeat(64).into());
        assert_eq!(s.of_client(UID, &client), 500);
        // The same kernel map, adopted: what the old agent read is not counted again.
        let r = s.read(&counts(&[(11, 520)], 7), &mut inv, now, wait, false);
        assert_eq!(total(&r), 20);
        // A new map (its pins were not adopted): its counts are new.
        let r = s.read(&counts(&[(11, 5)], 1), &mut inv, now, wait, false);
        assert_eq!(total(&r), 6);
    }

    /// An index that walked a real tree (so it knows which ids came before its
    /// newest), with container 11 of the pod.
    fn walked() -> Inventory {
        let dir = crate::test_facts::temp_dir("suppressed-walked");
        std::fs::create_dir_all(dir.join("child")).unwrap();
        let mut cgroups = CgroupIndex::new(&dir, u64::MAX);
        cgroups.scan().unwrap();
        let mut inv = inventory();
        inv.cgroups = cgroups;
        let pod = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
            UID.replace('-', "_")
        );
        inv.cgroups.created(
            11,
            &format!("{pod}/cri-containerd-{}.scope", "a".repeat(64)),
        );
        inv
    }

    #[test]
    fn adopted_without_a_checkpoint_the_first_reading_is_the_baseline() {
        let mut inv = walked();
        let (now, wait) = (Instant::now(), Duration::from_secs(10));
        let mut s = Suppressed::default();
        s.count_from_next_reading();
        // Cgroup 1: an id below the newest the walk found, unknown to it: removed
        // while no agent ran.
        let r = s.read(
            &counts(&[(11, 500), (1, 900)], 7),
            &mut inv,
            now,
            wait,
            false,
        );
        assert_eq!(total(&r), 0, "days of history are not counted again");
        assert_eq!(r.forget, vec![1], "a removed cgroup's entry goes");
        let r = s.read(&counts(&[(11, 520)], 9), &mut inv, now, wait, false);
        assert_eq!(total(&r), 22, "what the kernel adds from then on counts");
    }

    #[test]
    fn entries_of_cgroups_removed_while_no_agent_ran_are_deleted() {
        let mut inv = walked();
        let (now, wait) = (Instant::now(), Duration::from_secs(10));
        let mut s = Suppressed::default();
        let r = s.read(&counts(&[(11, 5), (1, 3)], 0), &mut inv, now, wait, false);
        assert_eq!(total(&r), 8);
        assert_eq!(r.forget, vec![1], "read once, then its slot is freed");
    }
}
