//! Detection latency: the test kit's `sr-latency` runs startup races in simulated pods
//! against its own agent and prints one `latency_ms X` line per race.

use std::{path::Path, process::Command};

use anyhow::{Context, bail};

pub struct Latency {
    pub samples: Vec<f64>,
    pub missed: usize,
}

impl Latency {
    /// (p50, p99, max) in ms.
    pub fn percentiles(&self) -> Option<(f64, f64, f64)> {
        let mut v = self.samples.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Some((at(0.5), at(0.99), v[v.len() - 1]))
    }
}

/// What a storm of refusals next to the races cost, and how it was accounted.
#[derive(Debug, Default, PartialEq)]
pub struct Storm {
    /// Refusals the flooding pod made.
    pub refused: u64,
    /// Of which `/metrics` shows delivered (in incidents) and suppressed.
    pub delivered: u64,
    pub suppressed: u64,
    /// Records the rings could not take during the storm.
    pub lost: u64,
    pub cpu_percent: f64,
}

impl Storm {
    /// Every refusal of the flooder accounted for, none lost.
    pub fn exact(&self) -> bool {
        self.delivered + self.suppressed == self.refused && self.lost == 0
    }
}

pub fn measure(bin: &Path, races: usize) -> anyhow::Result<Latency> {
    Ok(run(bin, races, None)?.0)
}

/// Races during `secs` of a neighbour refusing as fast as it can.
pub fn measure_storm(bin: &Path, races: usize, secs: f64) -> anyhow::Result<(Latency, Storm)> {
    run(bin, races, Some(secs))
}

fn run(bin: &Path, races: usize, storm: Option<f64>) -> anyhow::Result<(Latency, Storm)> {
    let mut cmd = Command::new(bin.join("sr-latency"));
    cmd.arg(races.to_string());
    if let Some(secs) = storm {
        cmd.args(["--storm", &secs.to_string()]);
    }
    let out = cmd
        .env("SIDECAR_RACE_AGENT_BIN", bin.join("sidecar-race-agent"))
        .output()
        .context("run sr-latency")?;
    if !out.status.success() {
        bail!(
            "sr-latency failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ok((parse(&stdout), parse_storm(&stdout)))
}

fn parse_storm(stdout: &str) -> Storm {
    let mut s = Storm::default();
    for line in stdout.lines() {
        let Some((key, v)) = line.split_once(' ') else {
            continue;
        };
        let n = |v: &str| v.trim().parse::<u64>().unwrap_or(0);
        match key {
            "storm_refused" => s.refused = n(v),
            "storm_accounted" => {
                let (d, sup) = v.split_once(' ').unwrap_or((v, "0"));
                (s.delivered, s.suppressed) = (n(d), n(sup));
            }
            "storm_lost" => s.lost = n(v),
            "storm_cpu_percent" => s.cpu_percent = v.trim().parse().unwrap_or(0.0),
            _ => {}
        }
    }
    s
}

fn parse(stdout: &str) -> Latency {
    let mut l = Latency {
        samples: Vec::new(),
        missed: 0,
    };
    for line in stdout.lines() {
        if let Some(v) = line.strip_prefix("latency_ms ") {
            l.samples.extend(v.trim().parse::<f64>().ok());
        } else if let Some(v) = line.strip_prefix("missed ") {
            l.missed = v.trim().parse().unwrap_or(0);
        }
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_races_and_percentiles() {
        let l = parse("sr-proxy: x\nlatency_ms 270.5\nlatency_ms 280\nlatency_ms 300\nmissed 1\n");
        assert_eq!(l.samples, vec![270.5, 280.0, 300.0]);
        assert_eq!(l.missed, 1);
        assert_eq!(l.percentiles(), Some((280.0, 300.0, 300.0)));
    }

    #[test]
    fn parses_the_storm() {
        let s = parse_storm(
            "latency_ms 250\nmissed 0\nstorm_refused 1000\nstorm_accounted 300 700\nstorm_lost 0\nstorm_cpu_percent 12.5\n",
        );
        assert_eq!(
            s,
            Storm {
                refused: 1000,
                delivered: 300,
                suppressed: 700,
                lost: 0,
                cpu_percent: 12.5
            }
        );
        assert!(s.exact());
        assert!(!Storm { lost: 1, ..s }.exact());
    }
}
