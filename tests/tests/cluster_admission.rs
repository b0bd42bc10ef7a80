//! The `cluster` tier's admission case: deploy/admission/ on the real API server.
//! Every workload of lint's fixtures, its corpus and the admission fixtures, and of
//! the `lint --fix` output of each, is applied (`--dry-run=server`: admission runs in
//! full, nothing is stored) and the policy's warnings are compared with lint's
//! findings of the rules the policy judges. A bad workload is warned about (and
//! refused under deploy/overlays/admission-deny/), a good one, every fixed one among
//! them, is admitted without a word. The workloads where the two cannot agree are
//! listed in [`CANNOT_JUDGE`] with the reason, and must disagree exactly there.
//!
//! Ignored by a plain `cargo test`; `cargo xtask test` runs it with the tier (see
//! tests/tests/cluster.rs). The policy is removed when the case ends, passed or failed.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::{Value, json};
use sidecar_race_agent::admission::{JUDGED, NAME};
use sidecar_race_tests::{
    agent::agent_binary,
    cluster::{TestNamespace, cluster, wait_until},
    manifests::{kind, name, yaml_docs},
    tools::{output, run, workspace},
};

/// Workloads whose lint findings the policy cannot see, by `FILE KIND NAME`: the
/// rule lint finds and the policy does not, and why.
const CANNOT_JUDGE: &[(&str, &str, &str)] = &[
    (
        "admission/flag-port-only.yaml Deployment invoices",
        "SR007",
        "the proxy's port is named only by its own --port flag: the policy sees declared ports and the table's fixed ports, not flags",
    ),
    (
        "lint-corpus/otel-collector-uds.yaml (fixed) Deployment checkout",
        "SR003",
        "the collector --fix made native without a probe (its image has no shell) serves a Unix socket: the policy judges ports, not sockets",
    ),
];

/// The kinds whose pod templates the policy judges (not Pods: one apply, one warning).
const WORKLOAD_KINDS: &[&str] = &["Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"];

fn fixtures_dir(rel: &str) -> PathBuf {
    workspace()
        .join("sidecar-race-agent/tests/fixtures")
        .join(rel)
}

/// The fixture files: lint's, its corpus and the admission ones.
fn fixture_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["lint", "lint-corpus", "admission"]
        .iter()
        .flat_map(|d| std::fs::read_dir(fixtures_dir(d)).expect("fixture dir"))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn label(file: &Path) -> String {
    let dir = file.parent().and_then(Path::file_name).unwrap_or_default();
    let file = file.file_name().unwrap_or_default();
    format!("{}/{}", dir.to_string_lossy(), file.to_string_lossy())
}

/// One workload to apply: where it comes from, and the object.
struct Case {
    label: String,
    object: Value,
}

/// The objects of `yaml`, List items included.
fn objects(yaml: &str) -> Vec<Value> {
    yaml_docs(yaml)
        .into_iter()
        .flat_map(|d| match d["kind"].as_str() {
            Some("List") => d["items"].as_array().cloned().unwrap_or_default(),
            _ => vec![d],
        })
        .collect()
}

/// `lint --fix` of `file`: the whole file, fixed (or as it was).
fn fixed(file: &Path) -> String {
    run(
        Command::new(agent_binary())
            .arg("lint")
            .arg("--fix")
            .arg(file),
        None,
    )
}

/// Every workload of every fixture, and of its fixed version; the objects the policy
/// does not judge (Pods, Services, Namespaces ...) are left out, by design.
fn cases(namespace: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    for file in fixture_files() {
        let original = std::fs::read_to_string(&file).expect("fixture");
        for (suffix, yaml) in [("", original), (" (fixed)", fixed(&file))] {
            for mut object in objects(&yaml) {
                if !WORKLOAD_KINDS.contains(&kind(&object)) {
                    continue;
                }
                // The namespace plays no part in the judged rules; this run's is used.
                object["metadata"]["namespace"] = json!(namespace);
                cases.push(Case {
                    label: format!(
                        "{}{suffix} {} {}",
                        label(&file),
                        kind(&object),
                        name(&object)
                    ),
                    object,
                });
            }
        }
    }
    cases
}

/// The IDs of the rules the policy judges.
fn judged() -> BTreeSet<&'static str> {
    JUDGED.iter().map(|(r, _)| r.id()).collect()
}

/// lint's findings of the judged rules on `object`.
fn lint_verdict(object: &Value) -> BTreeSet<String> {
    let out = output(
        Command::new(agent_binary()).args(["lint", "--format", "json", "-"]),
        Some(&object.to_string()),
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("lint's JSON");
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["id"].as_str())
        .filter(|id| judged().contains(id))
        .map(str::to_string)
        .collect()
}

/// What the API server said to `kubectl apply --dry-run=server` of `object`.
struct Admission {
    admitted: bool,
    /// kubectl's stderr: the warnings, or why the object was refused.
    said: String,
}

impl Admission {
    /// The rule IDs the policy named.
    fn rules(&self) -> BTreeSet<String> {
        self.said
            .lines()
            .filter(|l| l.contains(&format!("ValidatingAdmissionPolicy '{NAME}'")))
            .flat_map(|l| {
                judged()
                    .into_iter()
                    .filter(|id| l.contains(&format!(": {id} ")))
            })
            .map(str::to_string)
            .collect()
    }
}

fn apply(object: &Value, dry_run: bool) -> Admission {
    let mut cmd = cluster().cmd();
    cmd.args(["apply", "-f", "-"]);
    if dry_run {
        cmd.arg("--dry-run=server");
    }
    let out = output(&mut cmd, Some(&object.to_string()));
    Admission {
        admitted: out.status.success(),
        said: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The policy installed from `dir` (a kustomization under deploy/), removed on drop.
struct Installed;

impl Installed {
    fn from(dir: &str) -> Self {
        let path = workspace().join("deploy").join(dir);
        cluster().kubectl(&["apply", "-k", &path.to_string_lossy()]);
        // The API server's admission plugin learns of a new binding from its informer.
        std::thread::sleep(Duration::from_secs(3));
        Installed
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let path = workspace().join("deploy/admission");
        let _ = cluster()
            .cmd()
            .args([
                "delete",
                "--ignore-not-found",
                "-k",
                &path.to_string_lossy(),
            ])
            .output();
    }
}

fn cannot_judge(label: &str) -> Option<&'static str> {
    CANNOT_JUDGE
        .iter()
        .find(|(l, _, _)| *l == label)
        .map(|(_, rule, _)| *rule)
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; cargo xtask test runs it"]
fn the_policy_loads_without_type_errors() {
    let _policy = Installed::from("admission");
    let status = wait_until(
        "the policy's type checking",
        Duration::from_secs(60),
        || {
            let p = cluster().json(&["get", "validatingadmissionpolicy", NAME]);
            (p["status"]["observedGeneration"] == p["metadata"]["generation"])
                .then(|| p["status"].clone())
        },
    );
    let warnings = &status["typeChecking"]["expressionWarnings"];
    assert!(
        warnings.as_array().is_none_or(Vec::is_empty),
        "type checking warns: {warnings:#}"
    );
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; cargo xtask test runs it"]
fn policy_and_lint_agree_and_deny_refuses_only_the_bad() {
    let ns = TestNamespace::create(format!("admission-{}", std::process::id()));
    let cases = cases(&ns);
    assert!(cases.len() > 40, "too few workloads: {}", cases.len());
    let policy = Installed::from("admission");
    let mut disagreements = Vec::new();
    let mut bad = Vec::new();
    for case in &cases {
        let lint = lint_verdict(&case.object);
        let admission = apply(&case.object, true);
        assert!(
            admission.admitted,
            "{}: refused under Warn:\n{}",
            case.label, admission.said
        );
        let policy_rules = admission.rules();
        if lint.is_empty() {
            assert!(
                admission.said.trim().is_empty(),
                "{}: lint finds nothing, yet applying it printed:\n{}",
                case.label,
                admission.said
            );
        } else {
            bad.push(case);
        }
        if policy_rules != lint {
            let missed: Vec<&String> = lint.difference(&policy_rules).collect();
            disagreements.push(format!(
                "{}: lint {lint:?}, policy {policy_rules:?}",
                case.label
            ));
            let listed = cannot_judge(&case.label);
            assert!(
                policy_rules.is_subset(&lint)
                    && missed.len() == 1
                    && listed == Some(missed[0].as_str()),
                "{}: lint {lint:?} but the policy warned {policy_rules:?}:\n{}",
                case.label,
                admission.said
            );
        } else {
            assert!(
                cannot_judge(&case.label).is_none(),
                "{}: listed in CANNOT_JUDGE, yet the policy agrees with lint",
                case.label
            );
        }
        // Each warning names the workload, so a multi-document apply says which.
        for line in admission.said.lines().filter(|l| l.starts_with("Warning:")) {
            assert!(
                line.contains(&format!(
                    "{} {}: SR",
                    kind(&case.object),
                    name(&case.object)
                )),
                "{}: {line}",
                case.label
            );
        }
    }
    assert_eq!(
        disagreements.len(),
        CANNOT_JUDGE.len(),
        "{disagreements:#?}"
    );
    assert!(bad.len() >= 10, "too few bad workloads: {}", bad.len());
    for (rule, _) in JUDGED {
        assert!(
            bad.iter()
                .any(|c| apply(&c.object, true).rules().contains(rule.id())),
            "no fixture makes the policy warn {}",
            rule.id()
        );
    }

    // A real apply (not a dry run) prints the same warning and stores the object.
    let cronjob = cases
        .iter()
        .find(|c| c.label == "lint/cronjob.yaml CronJob nightly-export")
        .expect("the CronJob fixture");
    let applied = apply(&cronjob.object, false);
    assert!(applied.admitted, "{}", applied.said);
    assert_eq!(
        applied.rules(),
        BTreeSet::from(["SR002".to_string()]),
        "{}",
        applied.said
    );

    // The Jobs a CronJob makes are not judged again.
    let mut job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "nightly-export-29000000",
            "namespace": ns.as_str(),
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly-export",
                "uid": "00000000-0000-0000-0000-000000000001",
            }],
        },
        "spec": cronjob.object["spec"]["jobTemplate"]["spec"].clone(),
    });
    let owned = apply(&job, true);
    assert!(
        owned.admitted && owned.said.trim().is_empty(),
        "{}",
        owned.said
    );
    job["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("ownerReferences");
    assert_eq!(
        apply(&job, true).rules(),
        BTreeSet::from(["SR002".to_string()])
    );

    // Under Deny the bad are refused, saying why; the good still pass.
    drop(policy);
    let _deny = Installed::from("overlays/admission-deny");
    // The CronJob stored under Warn: a change to its spec is refused, a label is not
    // judged again, and it can still be deleted.
    let patched = output(
        cluster().cmd().args([
            "-n",
            &ns,
            "patch",
            "cronjob",
            "nightly-export",
            "--type=merge",
            "-p",
            r#"{"spec":{"schedule":"0 4 * * *"}}"#,
        ]),
        None,
    );
    let said = String::from_utf8_lossy(&patched.stderr);
    assert!(
        !patched.status.success() && said.contains("SR002"),
        "a spec change of a race-prone CronJob under Deny: {said}"
    );
    cluster().kubectl(&["-n", &ns, "label", "cronjob", "nightly-export", "team=data"]);
    cluster().kubectl(&["-n", &ns, "delete", "cronjob", "nightly-export"]);
    for case in &cases {
        let admission = apply(&case.object, true);
        let lint = lint_verdict(&case.object);
        let seen: BTreeSet<String> = lint
            .iter()
            .filter(|id| cannot_judge(&case.label) != Some(id.as_str()))
            .cloned()
            .collect();
        if seen.is_empty() {
            assert!(
                admission.admitted,
                "{}: refused:\n{}",
                case.label, admission.said
            );
        } else {
            // The API server refuses with the first failed check, not all of them.
            assert!(!admission.admitted, "{}: admitted under Deny", case.label);
            let named = admission.rules();
            assert!(
                admission.said.contains("denied request")
                    && !named.is_empty()
                    && named.is_subset(&seen),
                "{}: lint {seen:?}, refused with:\n{}",
                case.label,
                admission.said
            );
        }
    }
}
