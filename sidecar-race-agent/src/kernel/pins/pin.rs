//! Pinning what a load made: every map the agent reads and every link of its
//! programs, so that they outlive the process. Links are found by their program's id
//! (aya keeps the links it made to itself). Before 5.15 tracepoints are attached
//! through perf events, which are no bpf_links and cannot be pinned: there nothing is
//! (see [`super::place::Pins::new`]).

use std::{collections::HashMap, path::Path};

use aya::{Ebpf, programs::loaded_links};

use super::{
    bpffs,
    error::PinError,
    manifest::{LinkPin, MapPin},
};

/// The maps the agent reads and writes: what a new agent must find again.
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

/// Pins the maps of [`MAPS`] under `dir/maps` and every link of `ebpf`'s programs
/// under `dir/links`.
pub fn pin_all(ebpf: &Ebpf, dir: &Path) -> Result<(Vec<LinkPin>, Vec<MapPin>), PinError> {
    let io = |what: &str, e: std::io::Error| PinError::Io(format!("{what}: {e}"));
    let programs: HashMap<u32, String> = ebpf
        .programs()
        .filter_map(|(name, p)| Some((p.info().ok()?.id(), name.to_string())))
        .collect();
    let mut links = Vec::new();
    std::fs::create_dir_all(dir.join("links")).map_err(|e| io("mkdir links", e))?;
    for info in loaded_links().flatten() {
        let Some(program) = programs.get(&info.program_id()) else {
            continue;
        };
        let fd = bpffs::link_fd_by_id(info.id()).map_err(|e| io("open a link", e))?;
        let n = links
            .iter()
            .filter(|l: &&LinkPin| &l.program == program)
            .count();
        let file = if n == 0 {
            program.clone()
        } else {
            format!("{program}-{n}")
        };
        bpffs::pin_fd(&fd, &dir.join("links").join(&file))
            .map_err(|e| io(&format!("pin link {file}"), e))?;
        links.push(LinkPin {
            file,
            program: program.clone(),
        });
    }
    std::fs::create_dir_all(dir.join("maps")).map_err(|e| io("mkdir maps", e))?;
    let mut maps = Vec::new();
    for name in MAPS {
        let map = ebpf
            .map(name)
            .ok_or_else(|| PinError::Io(format!("the object has no map {name}")))?;
        map.pin(dir.join("maps").join(name))
            .map_err(|e| PinError::Io(format!("pin map {name}: {e}")))?;
        let info = super::adopt::map_info(&dir.join("maps").join(name))?;
        maps.push(MapPin {
            name: name.to_string(),
            ..info
        });
    }
    Ok((links, maps))
}
