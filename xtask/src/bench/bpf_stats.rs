//! The agent's eBPF programs' own cost, from `kernel.bpf_stats_enabled`: the kernel
//! then sums each program's run time and run count, shown in the `fdinfo` of its fd.
//! Unlike a throughput ratio, this hardly moves with the machine's other load.

use std::{collections::BTreeMap, path::Path, process::Command};

use anyhow::Context;

const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Sets the statistics on or off for its lifetime and restores the old setting after.
/// Off for throughput runs: with statistics on, the kernel reads the clock twice per
/// program run, which on this VM's paravirtual clock costs about as much as the
/// program itself.
pub struct Stats {
    before: String,
}

impl Stats {
    pub fn set(on: bool) -> anyhow::Result<Self> {
        let before = std::fs::read_to_string(SYSCTL).context("read bpf_stats_enabled")?;
        std::fs::write(SYSCTL, if on { "1" } else { "0" }).context("set bpf_stats_enabled")?;
        Ok(Stats { before })
    }
}

impl Drop for Stats {
    fn drop(&mut self) {
        let _ = std::fs::write(SYSCTL, self.before.trim());
    }
}

/// Run time and run count summed over a process's programs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProgStats {
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

impl ProgStats {
    /// The sum of `stats`.
    pub fn total<'a>(stats: impl IntoIterator<Item = &'a ProgStats>) -> ProgStats {
        stats
            .into_iter()
            .fold(ProgStats::default(), |a, s| a.plus(*s))
    }

    /// Each program `pid` holds an fd of, by name (as `bpftool` shows it: 15
    /// characters at most) and type (`tracepoint`, `tracing`).
    pub fn by_program(pid: u32) -> anyhow::Result<BTreeMap<(String, String), ProgStats>> {
        let ids = ProgStats::by_id(pid)?;
        let out = Command::new("bpftool")
            .args(["prog", "show", "--json"])
            .output()
            .context("run bpftool (cargo xtask setup installs it)")?;
        let progs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
        let mut by_name = BTreeMap::new();
        for p in progs {
            let Some(stats) = p["id"].as_u64().and_then(|id| ids.get(&id)) else {
                continue;
            };
            let key = (
                p["name"].as_str().unwrap_or("?").to_string(),
                p["type"].as_str().unwrap_or("?").to_string(),
            );
            let entry: &mut ProgStats = by_name.entry(key).or_default();
            *entry = entry.plus(*stats);
        }
        Ok(by_name)
    }

    pub fn plus(self, o: ProgStats) -> ProgStats {
        ProgStats {
            run_time_ns: self.run_time_ns + o.run_time_ns,
            run_cnt: self.run_cnt + o.run_cnt,
        }
    }

    fn by_id(pid: u32) -> anyhow::Result<BTreeMap<u64, ProgStats>> {
        let fds = Path::new("/proc").join(pid.to_string()).join("fd");
        let mut by_id = BTreeMap::new();
        for entry in std::fs::read_dir(&fds).with_context(|| format!("{}", fds.display()))? {
            let entry = entry?;
            let Ok(link) = std::fs::read_link(entry.path()) else {
                continue;
            };
            if link.to_string_lossy() != "anon_inode:bpf-prog" {
                continue;
            }
            let info = fds.with_file_name("fdinfo").join(entry.file_name());
            if let Ok(text) = std::fs::read_to_string(info)
                && let Some((id, stats)) = parse_fdinfo(&text)
            {
                by_id.insert(id, stats);
            }
        }
        Ok(by_id)
    }

    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: ProgStats) -> ProgStats {
        ProgStats {
            run_time_ns: self.run_time_ns.saturating_sub(earlier.run_time_ns),
            run_cnt: self.run_cnt.saturating_sub(earlier.run_cnt),
        }
    }
}

/// `prog_id`, `run_time_ns` and `run_cnt` of a program fd's `fdinfo`.
/// Programs other processes hold on the tracepoint `name` now (`bpftool perf show`):
/// during a bare run, the noise of another agent (a test's) attached beside the bench.
pub fn attached_to(name: &str) -> usize {
    Command::new("bpftool")
        .args(["-j", "perf", "show"])
        .output()
        .map_or(0, |o| count_on(&String::from_utf8_lossy(&o.stdout), name))
}

fn count_on(json: &str, name: &str) -> usize {
    json.matches(&format!("\"tracepoint\":\"{name}\"")).count()
}

pub(super) fn parse_fdinfo(text: &str) -> Option<(u64, ProgStats)> {
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
    };
    Some((
        value("prog_id:")?,
        ProgStats {
            run_time_ns: value("run_time_ns:")?,
            run_cnt: value("run_cnt:")?,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_on_a_tracepoint_are_counted_by_its_exact_name() {
        let json = r#"[{"pid":1,"fd":3,"prog_id":5,"fd_type":"tracepoint","tracepoint":"kfree_skb"},{"pid":2,"fd":4,"prog_id":6,"fd_type":"raw_tracepoint","tracepoint":"kfree_skb_reason"}]"#;
        assert_eq!(count_on(json, "kfree_skb"), 1);
        assert_eq!(count_on("[]", "kfree_skb"), 0);
    }

    #[test]
    fn fdinfo_of_a_program() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nprog_type:\t5\n\
                    prog_jited:\t1\nprog_tag:\t3b185187f1855c4c\nmemlock:\t4096\n\
                    prog_id:\t42\nrun_time_ns:\t123456\nrun_cnt:\t789\nrecursion_misses:\t0\n";
        assert_eq!(
            parse_fdinfo(text),
            Some((
                42,
                ProgStats {
                    run_time_ns: 123456,
                    run_cnt: 789
                }
            ))
        );
        assert_eq!(parse_fdinfo("pos:\t0\n"), None);
    }
}
