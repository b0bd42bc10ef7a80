//! `sr-soak --minutes N [--restart-every-minutes M] [--out FILE]`: the soak of
//! [`sidecar_race_tests::soak`] against the agent built next to it (`cargo xtask soak`
//! runs the release build), restarting the agent every M minutes (default 5; 0: never).
//! Root.

use std::{path::PathBuf, time::Duration};

fn main() -> anyhow::Result<()> {
    let mut minutes = 30.0f64;
    let mut out: Option<PathBuf> = None;
    let mut restart_every = 5.0f64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut v = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))
        };
        match a.as_str() {
            "--minutes" => minutes = v()?.parse()?,
            "--out" => out = Some(v()?.into()),
            "--restart-every-minutes" => restart_every = v()?.parse()?,
            _ => anyhow::bail!(
                "unknown argument {a}\nusage: sr-soak [--minutes N] [--restart-every-minutes M] [--out FILE]"
            ),
        }
    }
    anyhow::ensure!(
        minutes.is_finite() && minutes >= 1.0,
        "--minutes must be at least 1 (a quarter of the run is warm-up)"
    );
    anyhow::ensure!(
        sidecar_race_tests::root::is_root_or_skip("sr-soak"),
        "the soak needs root"
    );
    anyhow::ensure!(
        restart_every.is_finite() && restart_every >= 0.0,
        "--restart-every-minutes must be 0 (never) or more"
    );
    sidecar_race_tests::soak::run_and_report(
        Duration::from_secs_f64(minutes * 60.0),
        (restart_every > 0.0).then(|| Duration::from_secs_f64(restart_every * 60.0)),
        out.as_deref(),
    )?;
    Ok(())
}
