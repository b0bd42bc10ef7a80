//! Reads the targets table of a BENCHMARKS.md and recomputes each verdict from the
//! figures printed in its own row, so a report whose verdict does not follow from its
//! numbers is caught without asserting what the numbers are (that would be timing).

/// A number as printed, with half a unit of its last digit: the rounding it hides.
#[derive(Debug, Clone, Copy)]
struct Printed {
    value: f64,
    half_unit: f64,
}

/// The numbers standing alone in `text` ("p99" and "3/3"'s slash are no numbers'
/// part: 99 is a name, 3 and 3 are two numbers).
fn numbers(text: &str) -> Vec<Printed> {
    let chars: Vec<char> = text.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit() && (i == 0 || !chars[i - 1].is_alphanumeric());
        if !starts {
            i += 1;
            continue;
        }
        let from = i;
        while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
            i += 1;
        }
        let token: String = chars[from..i].iter().collect();
        let token = token.trim_end_matches('.');
        let decimals = token.split_once('.').map_or(0, |(_, d)| d.len());
        if let Ok(value) = token.parse() {
            found.push(Printed {
                value,
                half_unit: 0.5 / 10f64.powi(decimals as i32),
            });
        }
    }
    found
}

/// `Some(v ≤ limit)`, or `None` when the printed rounding hides which side it is on.
fn at_most(v: Printed, limit: f64) -> Option<bool> {
    ((v.value - limit).abs() > v.half_unit).then_some(v.value <= limit)
}

fn at_least(v: Printed, limit: f64) -> Option<bool> {
    ((v.value - limit).abs() > v.half_unit).then_some(v.value >= limit)
}

/// All hold; `None` when one is undecidable and none fails.
fn all(parts: &[Option<bool>]) -> Option<bool> {
    if parts.contains(&Some(false)) {
        Some(false)
    } else if parts.iter().all(|p| *p == Some(true)) {
        Some(true)
    } else {
        None
    }
}

/// What the row's own figures say the verdict must be (`None`: either, the rounding
/// hides it), or why the row cannot be read.
pub fn expected_verdict(target: &str, measured: &str) -> Result<Option<bool>, String> {
    let t = numbers(target);
    let m = numbers(measured);
    let need = |n: usize, of: &[Printed], what: &str| {
        if of.len() < n {
            Err(format!("{what} has fewer than {n} figures"))
        } else {
            Ok(())
        }
    };
    need(1, &m, measured)?;
    let whole = |p: Printed| p.value as u64;
    if [
        "successful connects ≥",
        "unrelated syscalls ≥",
        "delivered UDP datagrams ≥",
        "unrelated drops ≥",
    ]
    .iter()
    .any(|p| target.starts_with(p))
    {
        need(1, &t, target)?;
        Ok(at_least(m[0], t[0].value))
    } else if target.starts_with("refusals ≤") || target.contains(" refusals in a pod ≤") {
        // median µs, exact rounds / rounds
        need(1, &t, target)?;
        need(3, &m, measured)?;
        Ok(all(&[
            at_most(m[0], t[0].value),
            Some(whole(m[1]) == whole(m[2])),
        ]))
    } else if target.starts_with("node scale:") {
        // CPU %, peak RSS MiB
        need(2, &t, target)?;
        need(2, &m, measured)?;
        Ok(all(&[at_most(m[0], t[0].value), at_most(m[1], t[1].value)]))
    } else if target.starts_with("detection latency p99 ≤") {
        // p99 ≤ window + slack; races not resolved
        need(2, &t, target)?;
        need(2, &m, measured)?;
        Ok(all(&[
            at_most(m[0], t[0].value + t[1].value),
            Some(whole(m[1]) == 0),
        ]))
    } else if target.starts_with("storm:") {
        // accounted of refused, lost, missed, then the races' latency (or none resolved)
        need(4, &m, measured)?;
        Ok(Some(
            whole(m[0]) == whole(m[1])
                && whole(m[2]) == 0
                && whole(m[3]) == 0
                && !measured.contains("none resolved"),
        ))
    } else {
        Err(format!("no rule to recompute the verdict of `{target}`"))
    }
}

/// The rows of the `## Targets` table: target, measured, verdict.
pub fn target_rows(report: &str) -> Vec<[String; 3]> {
    report
        .split_once("\n## Targets")
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the head and its rule
        .filter_map(|l| {
            let cells: Vec<String> = l
                .trim()
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect();
            cells.try_into().ok()
        })
        .collect()
}

/// Every target row's verdict is `holds` or `missed` as its own figures say; the
/// complaints, one per row that is not.
pub fn inconsistent_verdicts(report: &str) -> Vec<String> {
    let mut complaints = Vec::new();
    for [target, measured, verdict] in target_rows(report) {
        let said = match verdict.as_str() {
            "holds" => true,
            "missed" => false,
            other => {
                complaints.push(format!(
                    "`{target}`: verdict `{other}`, not holds or missed"
                ));
                continue;
            }
        };
        match expected_verdict(&target, &measured) {
            Ok(Some(expected)) if expected != said => complaints.push(format!(
                "`{target}`: `{measured}` means {}, the report says {verdict}",
                if expected { "holds" } else { "missed" }
            )),
            Ok(_) => {}
            Err(e) => complaints.push(format!("`{target}`: {e}")),
        }
    }
    complaints
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMITTED: &str = include_str!("../../BENCHMARKS.md");

    #[test]
    fn the_committed_report_has_verdicts_that_follow_from_its_figures() {
        assert!(!target_rows(COMMITTED).is_empty());
        assert_eq!(inconsistent_verdicts(COMMITTED), Vec::<String>::new());
    }

    /// The targets of a full run (BENCHMARKS.md of 2026-11-30), fixed here so the test
    /// does not depend on the next run's figures.
    const SAMPLE: &str = "## Targets (issue #12)

| target | measured | verdict |
|---|---|---|
| successful connects ≥ 0.97× bare (throughput) | median 1.011 | holds |
| successful connects ≥ 0.97× bare (the programs' own cost, bpf_stats) | median 0.961 | missed |
| refusals ≤ 2 µs of agent CPU each, counts exact | median 1.00 µs, exact in 7/7 rounds | holds |
| node scale: CPU ≤ 0.5 %, peak RSS ≤ 40 MiB | 0.27 %, 34.2 MiB | holds |
| detection latency p99 ≤ reorder window (200 ms) + 100 ms | p99 236 ms, 0 races not resolved within 10 s | holds |
| storm: the flooder's refusals exact in `/metrics`, no record lost, every race resolved | 5350538 of 5350538 accounted, 0 lost, 0 missed, p50 225 ms, p99 252 ms | holds |
";

    #[test]
    fn a_verdict_its_figures_contradict_is_caught() {
        let sample = format!("# Benchmarks\n\n{SAMPLE}");
        assert_eq!(target_rows(&sample).len(), 6);
        assert_eq!(inconsistent_verdicts(&sample), Vec::<String>::new());
        let flipped = sample
            .replace("| median 1.011 | holds |", "| median 1.011 | missed |")
            .replace("34.2 MiB | holds |", "41.2 MiB | holds |")
            .replace(
                "0 races not resolved within 10 s | holds |",
                "2 races not resolved within 10 s | holds |",
            );
        assert_eq!(
            inconsistent_verdicts(&flipped).len(),
            3,
            "{:#?}",
            inconsistent_verdicts(&flipped)
        );
        let storm = sample.replace("5350538 of 5350538", "5350537 of 5350538");
        assert_eq!(inconsistent_verdicts(&storm).len(), 1);
        let unknown = sample.replace("| node scale: CPU", "| node size: CPU");
        assert_eq!(inconsistent_verdicts(&unknown).len(), 1);
    }

    /// The `kfree_skb` rows (issue #49) are held to their ratio as the connects are.
    #[test]
    fn the_datagram_rows_are_held_to_their_ratio() {
        let udp = "delivered UDP datagrams ≥ 0.98× bare, UDP send + receive (delivered) (bpf_stats bound)";
        assert_eq!(
            expected_verdict(
                udp,
                "median 1.000 (statistics' cost of 60 ns per run taken out)"
            ),
            Ok(Some(true))
        );
        let drops = "unrelated drops ≥ 0.98× bare, drop storm (frames of an unhandled EtherType on loopback) (loop CPU measured directly, agent as shipped)";
        assert_eq!(
            expected_verdict(
                drops,
                "median 0.950 (control, bare / bare: 0.9 / 1.0 / 1.1)"
            ),
            Ok(Some(false))
        );
    }

    #[test]
    fn a_pod_refusal_row_holds_only_under_the_target_with_every_round_exact() {
        let target = "UDS refusals in a pod ≤ 1 µs of agent CPU each, all in its incidents";
        let verdict = |measured| expected_verdict(target, measured);
        assert_eq!(
            verdict("median 0.812 µs, exact in 7/7 rounds"),
            Ok(Some(true))
        );
        assert_eq!(
            verdict("median 0.812 µs, exact in 6/7 rounds"),
            Ok(Some(false))
        );
        assert_eq!(
            verdict("median 1.047 µs, exact in 7/7 rounds"),
            Ok(Some(false))
        );
    }

    #[test]
    fn figures_too_close_to_the_target_for_their_rounding_accept_either_verdict() {
        assert_eq!(
            expected_verdict(
                "successful connects ≥ 0.97× bare (throughput)",
                "median 0.970"
            ),
            Ok(None)
        );
        assert_eq!(
            expected_verdict(
                "successful connects ≥ 0.97× bare (throughput)",
                "median 0.969"
            ),
            Ok(Some(false))
        );
        assert_eq!(
            expected_verdict(
                "detection latency p99 ≤ reorder window (200 ms) + 100 ms",
                "p99 236 ms, 0 races not resolved within 10 s"
            ),
            Ok(Some(true))
        );
    }
}
