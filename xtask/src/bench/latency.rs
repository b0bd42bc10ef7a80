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

pub fn measure(bin: &Path, races: usize) -> anyhow::Result<Latency> {
    let out = Command::new(bin.join("sr-latency"))
        .arg(races.to_string())
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
    Ok(parse(&String::from_utf8_lossy(&out.stdout)))
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
}
