//! What an agent that pinned its kernel state leaves beside it in the state directory,
//! for the next agent to adopt it: the pins, each map's shape, and what was attached
//! (adoption loads nothing, so it cannot find that out again). bpffs holds only
//! kernel objects, so this lives in the state directory; the pins are complete only
//! when it is written (the directory is renamed into place after it).

use std::{
    io,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::{
    kernel::{
        globals::ProcessNames, layout::TRACEPOINTS, layout::Tracepoint, tcp_hooks::TcpCoverage,
        tracepoints::Degraded, tracepoints::SetStateHook, unix_hooks::UnixCoverage,
    },
    state_file::{self, StateFileError},
};

/// Bumped when the manifest's meaning changes: an older one is not adopted.
pub const VERSION: u32 = 1;

/// The maps the agent reads and writes: what a new agent must find again (a
/// manifest that lists fewer is not adopted).
pub const MAPS: [&str; 9] = [
    "EVENTS",
    "CONTROL",
    "COUNTERS",
    "SUPPRESSED",
    "CHARGE_POINTS",
    "BUDGET",
    "CONTROL_BUDGET",
    "LOCAL_REFUSALS",
    "UNIX_KPROBE_CALLS",
];

/// The most a manifest is read of (one is a few KiB: a line per link and map).
const MAX_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub version: u32,
    pub key: String,
    /// SHA-256 of the eBPF object.
    pub object: String,
    /// The records' layout ([`super::key::abi_digest`]): a new build with the same one
    /// reads what is left in this load's rings.
    pub abi: String,
    pub agent_version: String,
    pub links: Vec<LinkPin>,
    pub maps: Vec<MapPin>,
    pub coverage: Coverage,
}

/// A pinned link, by its file under `links/`, and its program's name in the object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LinkPin {
    pub file: String,
    pub program: String,
}

/// A pinned map under `maps/`, with the shape it had when pinned.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MapPin {
    pub name: String,
    pub map_type: String,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
}

/// What was attached and how, as the loading agent found it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Coverage {
    /// `category:name` of each attached tracepoint.
    pub attached: Vec<String>,
    /// `category:name` and why, of each that could not be.
    pub degraded: Vec<(String, String)>,
    pub set_state_hook: SetStateHook,
    /// Absent from the manifests of builds before the listen hooks, which always
    /// attached the state-transition tracepoint.
    #[serde(default = "Coverage::before_listen_hooks")]
    pub tcp: TcpCoverage,
    pub unix: UnixCoverage,
    pub process_names: ProcessNames,
    pub per_cgroup_budgets: Option<String>,
}

impl Coverage {
    pub fn of(
        attached: &[Tracepoint],
        degraded: &[Degraded],
        set_state_hook: &SetStateHook,
        tcp: &TcpCoverage,
        unix: &UnixCoverage,
        process_names: &ProcessNames,
        per_cgroup_budgets: &Option<String>,
    ) -> Self {
        Self {
            attached: attached.iter().map(full_name).collect(),
            degraded: degraded
                .iter()
                .map(|d| (full_name(&d.tracepoint), d.reason.clone()))
                .collect(),
            set_state_hook: set_state_hook.clone(),
            tcp: tcp.clone(),
            unix: unix.clone(),
            process_names: process_names.clone(),
            per_cgroup_budgets: per_cgroup_budgets.clone(),
        }
    }

    fn before_listen_hooks() -> TcpCoverage {
        TcpCoverage::SetState {
            why: "pinned by a build without the listen hooks".into(),
        }
    }

    /// The attached tracepoints, as this build names them.
    pub fn attached(&self) -> Vec<Tracepoint> {
        self.attached.iter().filter_map(|n| by_name(n)).collect()
    }

    pub fn degraded(&self) -> Vec<Degraded> {
        self.degraded
            .iter()
            .filter_map(|(n, reason)| {
                Some(Degraded {
                    tracepoint: by_name(n)?,
                    reason: reason.clone(),
                })
            })
            .collect()
    }
}

fn full_name(tp: &Tracepoint) -> String {
    format!("{}:{}", tp.category, tp.name)
}

fn by_name(name: &str) -> Option<Tracepoint> {
    TRACEPOINTS.into_iter().find(|tp| full_name(tp) == name)
}

/// `<state dir>/pinned-<key>.json`.
pub fn path(state_dir: &Path, key: &str) -> PathBuf {
    state_dir.join(format!("pinned-{key}.json"))
}

/// Writes the manifest whole or not at all (a temporary file renamed into place).
pub fn write(path: &Path, manifest: &Manifest) -> io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(manifest).map_err(io::Error::other)?;
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// The manifest at `path`: `Ok(None)` when there is none.
pub fn read(path: &Path) -> Result<Option<Manifest>, String> {
    let bytes = match state_file::read(path, MAX_BYTES) {
        Ok(b) => b,
        Err(StateFileError::Missing(_)) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let m: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} is not a manifest of pins: {e}", path.display()))?;
    if m.version != VERSION {
        return Err(format!(
            "{} has version {}, this agent reads {VERSION}",
            path.display(),
            m.version
        ));
    }
    Ok(Some(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_round_trips_and_names_tracepoints_as_this_build_does() {
        let dir = crate::test_facts::temp_dir("manifest");
        let m = Manifest {
            version: VERSION,
            key: "0123456789abcdef".into(),
            object: "ab".into(),
            abi: "cd".into(),
            agent_version: "0.0.0".into(),
            links: vec![LinkPin {
                file: "inet_sock_set_state".into(),
                program: "inet_sock_set_state".into(),
            }],
            maps: vec![MapPin {
                name: "EVENTS".into(),
                map_type: "RingBuf".into(),
                key_size: 0,
                value_size: 0,
                max_entries: 1 << 20,
            }],
            coverage: Coverage {
                attached: vec!["sock:inet_sock_set_state".into(), "gone:tracepoint".into()],
                degraded: vec![],
                set_state_hook: SetStateHook::TpBtf,
                tcp: TcpCoverage::Kprobes {
                    why_not_fentry: "refused".into(),
                },
                unix: UnixCoverage::Syscalls {
                    why_not_fexit: "refused".into(),
                },
                process_names: ProcessNames::Leader,
                per_cgroup_budgets: None,
            },
        };
        let p = path(dir.as_path(), &m.key);
        write(&p, &m).unwrap();
        let back = read(&p).unwrap().unwrap();
        assert_eq!(back, m);
        assert_eq!(
            back.coverage
                .attached()
                .iter()
                .map(|t| t.name)
                .collect::<Vec<_>>(),
            ["inet_sock_set_state"],
            "a tracepoint this build does not know is left out"
        );
        assert_eq!(read(&dir.as_path().join("none.json")).unwrap(), None);
        std::fs::write(&p, b"{").unwrap();
        assert!(read(&p).unwrap_err().contains("is not a manifest"));
        let older = serde_json::to_vec(&Manifest { version: 0, ..m }).unwrap();
        std::fs::write(&p, older).unwrap();
        assert!(read(&p).unwrap_err().contains("version 0"));
    }

    #[test]
    fn a_manifest_that_is_no_regular_file_is_refused_without_reading_it() {
        let dir = crate::test_facts::temp_dir("manifest-zero");
        let p = path(dir.as_path(), "0123456789abcdef");
        std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
        let err = read(&p).unwrap_err();
        assert!(
            err.contains("a character device, not a regular file"),
            "{err}"
        );
    }
}
