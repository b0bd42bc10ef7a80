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
        "| TCP connect + FIN close: **bare CPU / (bare CPU + the programs' run time)** per connection",
        "| TCP connect + RST close: **bare CPU / (bare CPU + the programs' run time)** per connection",
        "| UDS connect + close: **bare CPU / (bare CPU + the programs' run time)** per connection",
        "| TCP connect + RST close: the statistics' own cost per program run (ns;",
        "| TCP connect + FIN close: throughput with the agent / bare |",
        "| UDS connect + close: **CPU per connection, bare / with the agent** (the loop's threads, measured directly; `--unix-hooks=syscalls`) |",
        "| TCP connect + FIN close: **CPU per connection, bare / with the agent** (the loop's threads, measured directly; `--unix-hooks=auto`:",
        "| TCP connect + RST close: control, CPU per connection, bare / bare",
        "| unrelated syscalls: **CPU per getppid, bare / beside the agent as shipped** (`--unix-hooks=auto`:",
        "| unrelated syscalls: CPU per getppid, bare / beside the agent with `--unix-hooks=syscalls` |",
        "| unrelated syscalls: CPU per getppid, bare / beside the agent with `--unix-hooks=off` |",
        "| unrelated syscalls: control, CPU per getppid, bare / bare",
        "| TCP connect + RST close: per program, runs per connection × ns per run",
        "| UDP send + receive (delivered): **CPU per datagram, bare / with the agent** (the loop's threads, measured directly; `--unix-hooks=auto`",
        "| UDP send + receive (delivered): control, CPU per datagram, bare / bare",
        "| UDP send + receive (delivered): the agent's program runs per datagram |",
        "| UDP send + receive (delivered): **bare CPU / (bare CPU + the programs' run time)** per datagram",
        "| drop storm (frames of an unhandled EtherType on loopback): **CPU per drop, bare / with the agent** (the loop's threads, measured directly; `--unix-hooks=auto`",
        "| drop storm (frames of an unhandled EtherType on loopback): control, CPU per drop, bare / bare",
        "| drop storm (frames of an unhandled EtherType on loopback): **bare CPU / (bare CPU + the programs' run time)** per drop",
        "| drop storm (frames of an unhandled EtherType on loopback): the statistics' own cost per program run (ns;",
        "| drop storm (frames of an unhandled EtherType on loopback): the agent's program runs per drop |",
        "| drop storm (frames of an unhandled EtherType on loopback): per program, runs per drop × ns per run",
        "| drop storm (frames of an unhandled EtherType on loopback): CPU per drop, bare / with a null program (`r0 = 0; exit`) alone on the tracefs tracepoint `skb:kfree_skb`, `--udp-hook=kfree-skb`'s fallback: the hook's own cost |",
        "| drop storm (frames of an unhandled EtherType on loopback): rounds whose bare runs had another process's program on `kfree_skb`",
        "peer bpftrace",
        "| refused TCP connects: throughput with the agent / bare |",
        "| refused TCP connects: agent CPU per refusal (ns, schedstat) |",
        "| refused TCP connects: the pod's incidents hold every refusal |",
        "| refused UDS connects (absent path and stale socket file, half each): agent CPU per refusal (ns, schedstat) |",
        "| refused UDS connects: the pod's incidents hold every refusal |",
        "| node scale: 5 pods (cgroups + pods file)",
        "| node scale: agent RSS now / peak |",
        "| agent start to ready with 20 more cgroups",
        "| detection latency, listener up → incident resolved in the API (3 races) |",
        "| storm: one pod refusing as fast as it can for 2 s: refusals, lost records |",
        "| storm: agent CPU |",
        "| storm: detection latency of the neighbour's races (",
        "## Targets (issues #12, #23, #38 and #49)",
        "## Fleet arithmetic (on paper)",
        "Smoke run",
    ] {
        assert!(text.contains(row), "no `{row}` in the report:\n{text}");
    }
    // The headline is what users pay, measured directly: the direct CPU ratios come
    // before the bpf_stats bound that explains them.
    let first_figure = text
        .lines()
        .skip_while(|l| !l.starts_with("| figure |"))
        .nth(2)
        .unwrap_or_default();
    assert!(
        first_figure.starts_with(
            "| unrelated syscalls: **CPU per getppid, bare / beside the agent as shipped**"
        ),
        "the first figure is `{first_figure}`"
    );
    let at = |needle: &str| text.find(needle).unwrap_or(usize::MAX);
    assert!(
        at("TCP connect + FIN close: **CPU per connection") < at("**bare CPU / (bare CPU"),
        "the bpf_stats bound comes before the direct CPU ratios:\n{text}"
    );
    assert!(
        !text.contains("no samples"),
        "a figure had no samples:\n{text}"
    );
    let targets: Vec<String> = bench_verdicts::target_rows(&text)
        .into_iter()
        .map(|[target, ..]| target)
        .collect();
    for target in [
        "unrelated syscalls ≥ 0.98× bare, agent as shipped",
        "successful connects ≥ 0.98× bare, TCP connect + FIN close (loop CPU measured directly, agent as shipped)",
        "successful connects ≥ 0.98× bare, TCP connect + RST close (loop CPU measured directly, agent as shipped)",
        "successful connects ≥ 0.98× bare, TCP connect + FIN close (bpf_stats bound)",
        "successful connects ≥ 0.98× bare, TCP connect + RST close (bpf_stats bound)",
        "successful connects ≥ 0.98× bare, UDS connect + close (bpf_stats bound)",
        "delivered UDP datagrams ≥ 0.98× bare, UDP send + receive (delivered) (loop CPU measured directly, agent as shipped)",
        "delivered UDP datagrams ≥ 0.98× bare, UDP send + receive (delivered) (bpf_stats bound)",
        "unrelated drops ≥ 0.98× bare, drop storm (frames of an unhandled EtherType on loopback) (loop CPU measured directly, agent as shipped)",
        "unrelated drops ≥ 0.98× bare, drop storm (frames of an unhandled EtherType on loopback) (bpf_stats bound)",
        "TCP refusals in a pod ≤",
        "UDS refusals in a pod ≤",
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
