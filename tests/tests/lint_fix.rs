//! `lint --fix` checked outside the linter: every fixed fixture validates strictly
//! against Kubernetes 1.33 with kubernetes-validate, every `--fix=patch` applied by
//! kubectl gives the fixed manifest, and on the real kernel a pod started from the
//! fixed manifest gets no incident where the original one got a startup race.
//!
//! Needs kubectl and kubernetes-validate (`cargo xtask setup`); the kernel proof needs
//! root (skipped otherwise; CI is root).

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::{RunAgent, agent_binary},
    pod::{SimContainer, SimPod, empty_pods_file, write_pod_list},
    root::is_root_or_skip,
    scenario::{app_done, proxy},
    tools::{on_path, run, validate_strictly},
};

fn fixtures() -> Vec<PathBuf> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sidecar-race-agent/tests/fixtures/lint");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("lint fixtures")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "fixtures in {}", dir.display());
    files
}

/// `sidecar-race-agent lint ARGS` (with `stdin`), which must exit 0: its stdout.
fn lint(args: &[&str], stdin: Option<&str>) -> String {
    run(Command::new(agent_binary()).arg("lint").args(args), stdin)
}

/// The objects of a YAML stream, `List`s expanded.
fn objects(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).expect("YAML");
    docs.into_iter()
        .flat_map(|d| match d["items"].as_array() {
            Some(items) if d["kind"].as_str().is_some_and(|k| k.ends_with("List")) => items.clone(),
            _ => vec![d],
        })
        .collect()
}

fn find<'a>(objs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn every_fixed_fixture_validates_strictly_against_kubernetes_1_33() {
    for f in fixtures() {
        let fixed = lint(&["--fix", f.to_str().unwrap()], None);
        let label = f.file_stem().unwrap().to_string_lossy().into_owned();
        let objects = objects(&fixed);
        let docs: Vec<&Value> = objects.iter().collect();
        validate_strictly(&label, &docs, &["1.33.0".to_string()]);
        // And the round trip: no ordering finding is left.
        let out = lint(
            &["--format", "json", "--fail-on", "none", "-"],
            Some(&fixed),
        );
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["findings"], json!([]), "{label} after --fix");
    }
}

/// The minors the fix targets: native sidecars from 1.29 (beta), GA in 1.33.
const SUPPORTED_MINORS: [&str; 2] = ["1.29.0", "1.33.0"];

/// The corpus shaped like the vendors' documented examples (cloud-sql-proxy,
/// AlloyDB, Dapr, Vault, Istio, Linkerd, Consul, oauth2-proxy).
fn corpus() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sidecar-race-agent/tests/fixtures/lint-corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("lint corpus")
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 9, "corpus in {}", dir.display());
    files
}

#[test]
fn every_fixed_vendor_example_validates_strictly_and_lints_clean() {
    let minors: Vec<String> = SUPPORTED_MINORS.iter().map(|m| m.to_string()).collect();
    for f in corpus() {
        let fixed = lint(&["--fix", f.to_str().unwrap()], None);
        let label = f.file_stem().unwrap().to_string_lossy().into_owned();
        let objects = objects(&fixed);
        let docs: Vec<&Value> = objects.iter().collect();
        validate_strictly(&label, &docs, &minors);
        let out = lint(
            &["--format", "json", "--fail-on", "none", "-"],
            Some(&fixed),
        );
        let v: Value = serde_json::from_str(&out).unwrap();
        // What is left is only what --fix says it cannot do (SR011: an injector
        // without a native-sidecar mode; SR003 with no probe its image can run).
        for finding in v["findings"].as_array().unwrap() {
            let cannot_probe = finding["id"] == "SR003"
                && finding["fix"]
                    .as_str()
                    .is_some_and(|f| f.contains("no startupProbe is added"));
            assert!(
                finding["id"] == "SR011" || cannot_probe,
                "{label} after --fix: {finding}"
            );
        }
    }
}

#[test]
fn kustomize_patches_applied_by_kubectl_give_the_fixed_manifest() {
    let mut applied = 0;
    for f in fixtures() {
        let path = f.to_str().unwrap();
        let original = objects(&std::fs::read_to_string(&f).unwrap());
        let fixed = objects(&lint(&["--fix", path], None));
        let patch_text = lint(&["--fix=patch", path], None);
        if patch_text.trim().is_empty() {
            assert_eq!(original, fixed, "{path}: no patch, so no fix");
            continue;
        }
        let patches: Value = serde_saphyr::from_str(&patch_text).unwrap();
        for p in patches["patches"].as_array().expect("a patches list") {
            let (kind, name) = (
                p["target"]["kind"].as_str().unwrap(),
                p["target"]["name"].as_str().unwrap(),
            );
            let ops: Value = serde_saphyr::from_str(p["patch"].as_str().unwrap()).unwrap();
            let tmp = std::env::temp_dir().join(format!(
                "sidecar-race-patch-{}-{kind}-{name}.json",
                std::process::id()
            ));
            std::fs::write(&tmp, find(&original, kind, name).to_string()).unwrap();
            let out = run(
                Command::new(on_path("kubectl"))
                    .args(["patch", "--local", "-o", "json", "--type", "json", "-f"])
                    .arg(&tmp)
                    .arg("-p")
                    .arg(ops.to_string()),
                None,
            );
            let _ = std::fs::remove_file(&tmp);
            let patched: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(
                &patched,
                find(&fixed, kind, name),
                "{path}: {kind} {name} patched by kubectl differs from --fix"
            );
            applied += 1;
        }
    }
    assert!(applied >= 8, "only {applied} patches applied");
}

/// The classic race as a manifest: the app dials the proxy on 127.0.0.1:15001.
const SIM_MANIFEST: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: sim-checkout
  namespace: shop
spec:
  selector:
    matchLabels:
      app: sim-checkout
  template:
    metadata:
      labels:
        app: sim-checkout
    spec:
      containers:
      - name: app
        image: example.com/app:1
        args: ["--connect", "127.0.0.1:15001"]
      - name: proxy
        image: example.com/proxy:1
        ports:
        - containerPort: 15001
"#;

/// The pod a Deployment's template makes, as `kubectl get pod -o json` shows it with
/// the simulated containers' ids.
fn pod_of(manifest: &Value, pod: &SimPod, sims: &BTreeMap<String, SimContainer>) -> Value {
    let spec = &manifest["spec"]["template"]["spec"];
    let statuses = |list: &str| -> Vec<Value> {
        spec[list]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let name = c["name"].as_str().unwrap();
                json!({
                    "name": name,
                    "containerID": format!("containerd://{}", sims[name].id),
                    "image": "x", "imageID": "x", "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-11-29T10:00:00Z"}},
                })
            })
            .collect()
    };
    let mut spec = spec.clone();
    spec["nodeName"] = json!("sim-node");
    let dep = manifest["metadata"]["name"].as_str().unwrap();
    let hash = "6c9d8f7b5";
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{dep}-{hash}-{}", &pod.uid[..5]),
            "namespace": manifest["metadata"]["namespace"],
            "uid": pod.uid,
            "labels": {"pod-template-hash": hash},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{dep}-{hash}"), "uid": "00000000-0000-4000-8000-000000000002",
                "controller": true}],
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "initContainerStatuses": statuses("initContainers"),
            "containerStatuses": statuses("containers"),
        },
    })
}

/// Waits until something listens on `port` in the pod, read from the socket table
/// (`ss`), as a tcpSocket startupProbe would find it, but without a connect the agent
/// would see.
fn wait_listening(pod: &SimPod, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new("ip")
            .args(["netns", "exec", &pod.netns, "ss", "-Hltn"])
            .arg(format!("sport = :{port}"))
            .output()
            .expect("ss");
        if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts the pod's containers the way the kubelet orders them: init containers in
/// order (a native sidecar's startupProbe must pass before the next starts), then
/// every container in `containers` together. `proxy` serves 127.0.0.1:15001 only
/// after 1 s; `app` dials it at once and retries every 50 ms until it connects.
fn start_like_kubelet(pod: &mut SimPod, manifest: &Value, sims: &BTreeMap<String, SimContainer>) {
    let spec = &manifest["spec"]["template"]["spec"];
    let start = |pod: &mut SimPod, name: &str| match name {
        "proxy" => {
            proxy(
                pod,
                &sims[name],
                &["--listen", "127.0.0.1:15001", "--delay-ms", "1000"],
            );
        }
        "app" => app_done(
            pod,
            &sims[name],
            &["--connect", "127.0.0.1:15001", "--interval-ms", "50"],
        ),
        other => panic!("no program for container {other}"),
    };
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        assert_eq!(c["restartPolicy"], "Always", "only native sidecars here");
        start(pod, c["name"].as_str().unwrap());
        if let Some(port) = c["startupProbe"]["tcpSocket"]["port"].as_u64() {
            wait_listening(pod, port as u16);
        }
    }
    let mut names: Vec<&str> = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // Together: the app, which runs until it connects, last.
    names.sort_by_key(|n| *n == "app");
    for n in names {
        start(pod, n);
    }
}

#[test]
fn fixed_pod_gets_no_incident_on_the_real_kernel() {
    if !is_root_or_skip("fixed_pod_gets_no_incident_on_the_real_kernel") {
        return;
    }
    let found = lint(
        &["--format", "json", "--fail-on", "none", "-"],
        Some(SIM_MANIFEST),
    );
    let found: Value = serde_json::from_str(&found).unwrap();
    assert_eq!(found["findings"][0]["id"], "SR001", "{found:#}");
    let original: Value = serde_saphyr::from_str(SIM_MANIFEST).unwrap();
    let fixed: Value = serde_saphyr::from_str(&lint(&["--fix", "-"], Some(SIM_MANIFEST))).unwrap();
    assert_eq!(
        fixed["spec"]["template"]["spec"]["initContainers"][0]["startupProbe"]["tcpSocket"]["port"],
        15001
    );

    let (pods_file, source) = empty_pods_file("lint-fix");
    let agent = RunAgent::start(&["--pods-from", &source, "--pods-poll-seconds", "0.1"]);
    let mut pods = Vec::new();
    let mut uids = Vec::new();
    for (label, manifest) in [("orig", &original), ("fixed", &fixed)] {
        let mut pod = SimPod::new(&format!("lintfix-{label}")).expect("a simulated pod");
        let sims: BTreeMap<String, SimContainer> = ["app", "proxy"]
            .into_iter()
            .map(|n| (n.to_string(), pod.container(n).expect("container")))
            .collect();
        pods.push(pod_of(manifest, &pod, &sims));
        write_pod_list(&pods_file, &pods);
        std::thread::sleep(Duration::from_millis(300));
        start_like_kubelet(&mut pod, manifest, &sims);
        uids.push(pod.uid.clone());
        if label == "orig" {
            let incident = agent.one_resolved(&pod.uid, Duration::from_secs(10));
            assert_eq!(incident["phase"], "startup", "{incident:#}");
            assert_eq!(incident["container"], "app", "{incident:#}");
            assert_eq!(incident["sidecar"], "proxy", "{incident:#}");
            assert_eq!(incident["sidecar_role"], "classic_sidecar", "{incident:#}");
        } else {
            std::thread::sleep(Duration::from_secs(3));
            let incidents = agent.incidents_of(&pod.uid);
            assert!(incidents.is_empty(), "the fixed pod raced: {incidents:#?}");
        }
        drop(pod);
    }
    agent.stop();
    let _ = std::fs::remove_file(&pods_file);
}
