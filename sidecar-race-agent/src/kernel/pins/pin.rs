//! Pinning what a load made: every map the agent reads and every link of its
//! programs, so that they outlive the process. aya keeps the links it made to itself:
//! they are found among the process's own fds. Before 5.15 tracepoints are attached
//! through perf events, which are no bpf_links and cannot be pinned: there nothing is
//! (see [`super::place::Pins::new`]).

use std::{collections::HashMap, path::Path};

use aya::Ebpf;

use crate::kernel::{fdinfo, layout::Tracepoint};

use super::{
    bpffs,
    error::PinError,
    manifest::{LinkPin, MAPS, MapPin},
};

/// Pins the maps of [`MAPS`] under `dir/maps`, every link of `ebpf`'s programs under
/// `dir/links` and their programs under `dir/progs` (a new agent reads their
/// skipped-run counts through them). Each tracepoint of `attached` must have a link
/// (on its program or its BTF program), or nothing is pinned that a new agent would
/// trust.
pub fn pin_all(
    ebpf: &mut Ebpf,
    dir: &Path,
    attached: &[Tracepoint],
) -> Result<(Vec<LinkPin>, Vec<MapPin>), PinError> {
    let io = |what: &str, e: std::io::Error| PinError::Io(format!("{what}: {e}"));
    let programs: HashMap<u32, String> = ebpf
        .programs()
        .filter_map(|(name, p)| Some((p.info().ok()?.id(), name.to_string())))
        .collect();
    let mut links: Vec<LinkPin> = Vec::new();
    std::fs::create_dir_all(dir.join("links")).map_err(|e| io("mkdir links", e))?;
    for (fd, prog_id) in own_links().map_err(|e| io("list the agent's links", e))? {
        let Some(program) = programs.get(&prog_id) else {
            continue;
        };
        let n = links.iter().filter(|l| &l.program == program).count();
        let file = if n == 0 {
            program.clone()
        } else {
            format!("{program}-{n}")
        };
        bpffs::pin_raw_fd(fd, &dir.join("links").join(&file))
            .map_err(|e| io(&format!("pin link {file}"), e))?;
        links.push(LinkPin {
            file,
            program: program.clone(),
        });
    }
    let linked = |p: &str| links.iter().any(|l| l.program == p);
    let unlinked: Vec<&str> = attached
        .iter()
        .filter(|tp| !linked(tp.program) && !tp.btf_program.is_some_and(linked))
        .map(|tp| tp.name)
        .collect();
    if links.is_empty() || !unlinked.is_empty() {
        return Err(PinError::Io(format!(
            "no bpf_link found for the attached tracepoint(s) {unlinked:?}"
        )));
    }
    std::fs::create_dir_all(dir.join("progs")).map_err(|e| io("mkdir progs", e))?;
    let mut pinned_programs = Vec::new();
    for l in &links {
        if pinned_programs.contains(&l.program) {
            continue;
        }
        let p = ebpf
            .program_mut(&l.program)
            .ok_or_else(|| PinError::Io(format!("no program {}", l.program)))?;
        p.pin(dir.join("progs").join(&l.program))
            .map_err(|e| PinError::Io(format!("pin program {}: {e}", l.program)))?;
        pinned_programs.push(l.program.clone());
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

/// The bpf_links this process holds open (aya holds one fd per link it made), with
/// their programs' ids, from `/proc/self/fd` and their fdinfo. Asking the kernel for
/// links by id would need CAP_SYS_ADMIN, which the agent does not have.
fn own_links() -> std::io::Result<Vec<(i32, u32)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")?.flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let is_link =
            std::fs::read_link(entry.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:bpf_link");
        if !is_link {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
        if let Some(prog_id) = fdinfo::field(&info, "prog_id") {
            out.push((fd, prog_id as u32));
        }
    }
    Ok(out)
}
