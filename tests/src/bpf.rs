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
    bpftool_show(object)
        .iter()
        .filter_map(|o| o["id"].as_u64())
        .collect()
}

/// The links attached now whose program is one of `programs`, by id.
pub fn links_of_programs(programs: &[u64]) -> Vec<u64> {
    let mut ids: Vec<u64> = bpftool_show("link")
        .iter()
        .filter(|l| l["prog_id"].as_u64().is_some_and(|p| programs.contains(&p)))
        .filter_map(|l| l["id"].as_u64())
        .collect();
    ids.sort_unstable();
    ids
}

/// `bpftool <object> show --json`.
fn bpftool_show(object: &str) -> Vec<Value> {
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
    v.as_array().cloned().unwrap_or_default()
}

/// The entries of `pid`'s hash map `name` with u64 keys and u64 values (native byte
/// order), as `bpftool map dump` reads them.
pub fn u64_map_of(pid: u32, name: &str) -> Vec<(u64, u64)> {
    let word = |b: Vec<u8>| u64::from_ne_bytes(b.try_into().expect("8 bytes"));
    map_of(pid, name)
        .into_iter()
        .map(|(k, v)| (word(k), word(v)))
        .collect()
}

/// Waits until the agent `pid` has marked every cgroup of `cgroup_ids` as a container
/// or pod that budgets are charged to (its `CHARGE_POINTS` map holds them): from then
/// on the kernel charges their records to them.
pub fn wait_charge_points(pid: u32, cgroup_ids: &[u64], timeout: std::time::Duration) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let marked: std::collections::BTreeSet<u64> = map_of(pid, "CHARGE_POINTS")
            .into_iter()
            .map(|(k, _)| u64::from_ne_bytes(k.try_into().expect("8-byte keys")))
            .collect();
        let missing: Vec<&u64> = cgroup_ids.iter().filter(|c| !marked.contains(c)).collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent did not mark cgroups {missing:?} within {timeout:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The entries of `pid`'s map `name` as bytes, as `bpftool map dump` reads them. The
/// kernel keeps 15 characters of a map's name; `name` is matched on those.
pub fn map_of(pid: u32, name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let short: String = name.chars().take(15).collect();
    let id = map_ids_of(pid)
        .into_iter()
        .find(|id| {
            bpftool_json(&["map", "show", "id", &id.to_string()])["name"].as_str()
                == Some(short.as_str())
        })
        .unwrap_or_else(|| panic!("process {pid} holds no map {name}"));
    let dump = bpftool_json(&["map", "dump", "id", &id.to_string()]);
    let bytes = |v: &Value| -> Vec<u8> {
        v.as_array()
            .expect("bytes")
            .iter()
            .map(|x| u8::from_str_radix(x.as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
            .collect()
    };
    dump.as_array()
        .expect("a list of entries")
        .iter()
        .map(|e| (bytes(&e["key"]), bytes(&e["value"])))
        .collect()
}

/// Map ids `pid` holds file descriptors for.
fn map_ids_of(pid: u32) -> Vec<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
        .filter_map(|fd| {
            let info = std::fs::read_to_string(fd.path()).ok()?;
            info.lines()
                .find_map(|l| l.strip_prefix("map_id:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .collect()
}

fn bpftool_json(args: &[&str]) -> Value {
    let out = Command::new("bpftool")
        .args(args)
        .arg("--json")
        .output()
        .expect("bpftool (cargo xtask setup installs it)");
    assert!(out.status.success(), "bpftool {args:?}: {out:?}");
    serde_json::from_slice(&out.stdout).expect("bpftool's JSON")
}
