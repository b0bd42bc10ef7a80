//! The committed admission policy (deploy/admission/policy.yaml, and the chart's copy
//! in files/) is what the generator makes of today's known-sidecar table and lint
//! rules: a table change without regenerating fails here. `UPDATE_GOLDEN=1` rewrites
//! both files.

use std::path::PathBuf;

use sidecar_race_agent::admission::policy_yaml;

const COPIES: &[&str] = &[
    "deploy/admission/policy.yaml",
    "deploy/helm/sidecar-race/files/admission-policy.yaml",
];

fn workspace_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

#[test]
fn committed_policy_is_generated_from_the_known_sidecar_table() {
    let generated = policy_yaml();
    for rel in COPIES {
        let path = workspace_file(rel);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{rel}: {e} (UPDATE_GOLDEN=1 writes it)"));
        assert!(
            committed == generated,
            "{rel} is stale: it differs from what sidecar-race-agent/data/known-sidecars.yaml and lint's rules generate; run `UPDATE_GOLDEN=1 cargo test -p sidecar-race-agent --test admission_policy`"
        );
    }
}
