//! The 2-minute soak in the test suite: the same code as `cargo xtask soak --minutes N`
//! (`sidecar_race_tests::soak`), with the build under test. Pod churn, racing and fixed
//! pods, a background refusal storm; the agent's RSS and descriptors must not grow
//! more than 5 % after warm-up, no racing pod's incident may be lost, no panic. The
//! agent is restarted mid-race every 30 s (#33): each racing pod's one incident must
//! still hold exactly its app's refusals.
//! Its own test binary, so no other test of this crate runs beside it.

use std::time::Duration;

use sidecar_race_tests::{root::is_root_or_skip, soak};

#[test]
fn two_minute_soak_neither_grows_nor_loses_incidents() {
    if !is_root_or_skip("two_minute_soak_neither_grows_nor_loses_incidents") {
        return;
    }
    let out = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("target/soak/SOAK-2min.md");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let restarts = Some(Duration::from_secs(30));
    if let Err(e) = soak::run_and_report(Duration::from_secs(120), restarts, Some(&out)) {
        panic!("{e:#}");
    }
}
