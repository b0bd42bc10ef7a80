//! The kernel's view of a process's eBPF objects: the programs and links it holds
//! (from `/proc/<pid>/fdinfo`) and what `bpftool` lists, to prove none leak.

use std::process::Command;

use serde_json::Value;

/// (program ids, link ids) that `pid` holds file descriptors for.
pub fn bpf_ids_of(pid: u32) -> (Vec<u64>, Vec<u64>) {
    let (mut progs, mut links) = (Vec::new(), Vec::new());
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        let Ok(info) = std::fs::read_to_string(fd.path()) else {
            continue;
        };
        let field = |key: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let Some(link) = field("link_id:") {
            links.push(link);
        } else if let Some(prog) = field("prog_id:") {
            progs.push(prog);
        }
    }
    progs.sort();
    progs.dedup();
    (progs, links)
}

/// Ids `bpftool <object> show` lists now.
pub fn bpftool_ids(object: &str) -> Vec<u64> {
    let out = Command::new("bpftool")
        .args([object, "show", "--json"])
        .output()
        .expect("bpftool (cargo xtask setup installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["id"].as_u64())
        .collect()
}
