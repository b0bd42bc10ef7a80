//! `cargo xtask bench --smoke`: the benchmark harness end to end in a few seconds, so
//! it does not rot. Asserts that it ran, wrote every row, and that every target's
//! verdict follows from the figures in its row; never a timing.

use std::{path::PathBuf, process::Command};

use sidecar_race_tests::{bench_verdicts, root::is_root_or_skip};

#[test]
fn bench_smoke_writes_every_row() {
    if !is_root_or_skip("bench_smoke_writes_every_row") {
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let report = root.join("target/bench-smoke/BENCHMARKS.md");
    let _ = std::fs::remove_file(&report);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(&root)
        .args(["xtask", "bench", "--smoke"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench --smoke failed:\n{stderr}");
    let text = std::fs::read_to_string(&report).unwrap();
    for row in [
        "| successful connects: throughput with the agent / bare |",
        "| peer: bpftrace",
        "| refused connects: throughput with the agent / bare |",
        "| refused connects: agent CPU per refusal (µs) |",
        "| refused connects: kernel count in `/metrics` exact |",
        "| node scale: 5 pods (cgroups + pods file)",
        "| node scale: agent RSS now / peak |",
        "| agent start to ready with 20 more cgroups",
        "| detection latency, listener up → incident resolved in the API (3 races) |",
        "| storm: one pod refusing as fast as it can for 2 s: refusals, lost records |",
        "| storm: agent CPU |",
        "| storm: detection latency of the neighbour's races (",
        "## Targets (issue #12)",
        "## Fleet arithmetic (on paper)",
        "Smoke run",
    ] {
        assert!(text.contains(row), "no `{row}` in the report:\n{text}");
    }
    assert!(
        !text.contains("no samples"),
        "a figure had no samples:\n{text}"
    );
    let targets: Vec<String> = bench_verdicts::target_rows(&text)
        .into_iter()
        .map(|[target, ..]| target)
        .collect();
    for target in [
        "successful connects ≥ 0.97× bare (throughput)",
        "successful connects ≥ 0.97× bare (the programs' own cost, bpf_stats)",
        "refusals ≤",
        "node scale:",
        "detection latency p99 ≤",
        "storm:",
    ] {
        assert!(
            targets.iter().any(|t| t.starts_with(target)),
            "no target row `{target}`: {targets:#?}"
        );
    }
    assert_eq!(
        bench_verdicts::inconsistent_verdicts(&text),
        Vec::<String>::new(),
        "verdicts that do not follow from their figures:\n{text}"
    );
}
