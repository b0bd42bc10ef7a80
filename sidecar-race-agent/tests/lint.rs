//! `sidecar-race-agent lint`, run as users run it, on the fixtures in
//! tests/fixtures/lint/: findings in every format, exit codes, suppression, `--fix`
//! and `--fix=patch` outputs (golden files in tests/fixtures/lint-golden/;
//! `UPDATE_GOLDEN=1` rewrites them), and
//! the round trip: a fixed manifest lints clean.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

const FIXTURES: &[&str] = &[
    "istio-injected-deployment.yaml",
    "linkerd-deployment.yaml",
    "cloud-sql-proxy-job.yaml",
    "native-sidecar-probed.yaml",
    "native-sidecar-unprobed.yaml",
    "sleep-hack.yaml",
    "init-deadlock.yaml",
    "init-before-native.yaml",
    "cronjob.yaml",
    "multi-document.yaml",
    "list.yaml",
];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lint")
}

/// Runs `lint ARGS` in the fixtures directory (so paths print as given): status, stdout.
fn lint(args: &[&str], stdin: Option<&str>) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sidecar-race-agent"))
        .arg("lint")
        .args(args)
        .current_dir(dir())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agent binary runs");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "lint {args:?} panicked:\n{stderr}"
    );
    (out.status.code().expect("exited"), stdout)
}

/// Compares `actual` with golden file `name` (rewritten with UPDATE_GOLDEN=1).
fn golden(name: &str, actual: &str) {
    let path = dir().with_file_name("lint-golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert_eq!(
        actual, expected,
        "{name} differs from its golden file (UPDATE_GOLDEN=1 rewrites it after review)"
    );
}

fn stem(fixture: &str) -> &str {
    fixture.trim_end_matches(".yaml")
}

#[test]
fn every_fixture_has_golden_findings_in_every_format() {
    for f in FIXTURES {
        let (status, table) = lint(&[f], None);
        golden(
            &format!("{}.table.txt", stem(f)),
            &format!("exit {status}\n{table}"),
        );
        let (json_status, json) = lint(&["--format", "json", f], None);
        assert_eq!(
            json_status, status,
            "{f}: the exit code does not depend on the format"
        );
        let parsed: serde_json::Value = serde_json::from_str(&json).expect("JSON output parses");
        assert!(parsed["findings"].is_array(), "{f}: {json}");
        golden(&format!("{}.json", stem(f)), &json);
        let (_, gh) = lint(&["--format", "github", f], None);
        golden(&format!("{}.github.txt", stem(f)), &gh);
    }
}

fn ids(json: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn each_rule_fires_on_its_fixture() {
    let cases: &[(&str, &[&str])] = &[
        (
            "istio-injected-deployment.yaml",
            &["SR001", "SR008", "SR009"],
        ),
        ("linkerd-deployment.yaml", &["SR006", "SR009"]),
        ("cloud-sql-proxy-job.yaml", &["SR001", "SR002"]),
        ("native-sidecar-probed.yaml", &[]),
        ("native-sidecar-unprobed.yaml", &["SR003", "SR004"]),
        ("sleep-hack.yaml", &["SR001", "SR005", "SR006", "SR006"]),
        ("init-deadlock.yaml", &["SR001", "SR007"]),
        ("init-before-native.yaml", &["SR003", "SR007"]),
        ("cronjob.yaml", &["SR002"]),
        ("multi-document.yaml", &["SR001"]),
        ("list.yaml", &["SR009", "SR001"]),
    ];
    for (f, expected) in cases {
        let (_, json) = lint(&["--format", "json", f], None);
        assert_eq!(ids(&json), *expected, "{f}");
    }
    // A known proxy, or a container dialing the sidecar's port, raises SR001 to error;
    // a sidecar nobody is seen dialing stays a warning.
    let (_, json) = lint(
        &["--format", "json", "list.yaml", "init-deadlock.yaml"],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let sev = |name: &str| {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == "SR001" && f["name"] == name)
            .map(|f| f["severity"].as_str().unwrap().to_string())
    };
    assert_eq!(sev("cache").as_deref(), Some("warning"));
    assert_eq!(sev("billing").as_deref(), Some("error"));
}

#[test]
fn file_positions_point_at_the_document() {
    let (_, json) = lint(
        &["--format", "json", "multi-document.yaml", "list.yaml"],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let f = &v["findings"];
    assert_eq!(f[0]["file"], "multi-document.yaml");
    assert_eq!(f[0]["document"], 3, "the Service and Deployment come first");
    assert_eq!(f[0]["line"], 42);
    assert_eq!(f[1]["file"], "list.yaml");
    assert_eq!(f[1]["item"], 0);
    let (_, gh) = lint(&["--format", "github", "multi-document.yaml"], None);
    assert!(
        gh.starts_with("::error file=multi-document.yaml,line=42,title=SR001 classic-sidecar-serves-port (Pod edge/debug-client)::"),
        "{gh}"
    );
}

#[test]
fn kube_version_gates_native_sidecars() {
    let (status, out) = lint(
        &[
            "--kube-version",
            "1.28",
            "native-sidecar-probed.yaml",
            "cronjob.yaml",
        ],
        None,
    );
    golden(
        "kube-version-1.28.table.txt",
        &format!("exit {status}\n{out}"),
    );
    assert_eq!(status, 1);
    assert!(out.contains("SR010"), "{out}");
    let (_, json) = lint(
        &[
            "--format",
            "json",
            "--kube-version",
            "v1.30.4",
            "native-sidecar-probed.yaml",
        ],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["findings"][0]["id"], "SR010");
    assert_eq!(v["findings"][0]["severity"], "info");
    let (_, json) = lint(
        &[
            "--format",
            "json",
            "--kube-version",
            "1.33",
            "native-sidecar-probed.yaml",
        ],
        None,
    );
    assert!(ids(&json).is_empty(), "{json}");
}

#[test]
fn exit_codes_gate_ci() {
    assert_eq!(
        lint(&["linkerd-deployment.yaml"], None).0,
        0,
        "a warning passes by default"
    );
    assert_eq!(
        lint(&["--fail-on", "warning", "linkerd-deployment.yaml"], None).0,
        1
    );
    assert_eq!(lint(&["--fail-on", "none", "cronjob.yaml"], None).0, 0);
    assert_eq!(lint(&["cronjob.yaml"], None).0, 1);
    assert_eq!(lint(&["native-sidecar-probed.yaml"], None).0, 0);
    let (status, out) = lint(&["-"], Some("kind: Pod\n---\nkind: [broken\n"));
    assert_eq!(status, 2, "{out}");
    assert!(
        out.contains("error: -:3 (document 2): not valid YAML"),
        "{out}"
    );
    assert_eq!(lint(&["no-such-file.yaml"], None).0, 2);
}

#[test]
fn directories_and_stdin() {
    let (_, all) = lint(&["--format", "json", "."], None);
    let v: serde_json::Value = serde_json::from_str(&all).unwrap();
    assert_eq!(
        v["workloads"], 15,
        "every workload of every fixture (Services skipped)"
    );
    let text = std::fs::read_to_string(dir().join("cronjob.yaml")).unwrap();
    let (status, json) = lint(&["--format", "json", "-"], Some(&text));
    assert_eq!(status, 1);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["findings"][0]["file"], "-");
    assert_eq!(v["findings"][0]["id"], "SR002");
}

#[test]
fn suppression_annotation() {
    let (_, json) = lint(&["--format", "json", "multi-document.yaml"], None);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["suppressed"], 1, "gateway's SR001");
    let text = std::fs::read_to_string(dir().join("sleep-hack.yaml"))
        .unwrap()
        .replace(
            "  namespace: backoffice\n",
            "  namespace: backoffice\n  annotations:\n    sidecar-race.io/ignore: \"sr006, sleep-before-app\"\n",
        );
    let (_, json) = lint(&["--format", "json", "-"], Some(&text));
    assert_eq!(ids(&json), ["SR001"], "IDs and rule names, any case");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["suppressed"], 3);
}

#[test]
fn fix_outputs_are_golden_and_lint_clean() {
    for f in FIXTURES {
        let (status, fixed) = lint(&["--fix", f], None);
        assert_eq!(status, 0, "{f}");
        golden(&format!("{}.fixed.yaml", stem(f)), &fixed);
        // Round trip: the fixed manifest has no finding left at all.
        let (status, json) = lint(
            &["--format", "json", "--fail-on", "info", "-"],
            Some(&fixed),
        );
        assert_eq!(
            ids(&json),
            Vec::<String>::new(),
            "{f} after --fix:\n{fixed}"
        );
        assert_eq!(status, 0);
        // Fixing again changes nothing.
        let (_, again) = lint(&["--fix", "-"], Some(&fixed));
        assert_eq!(again, fixed, "{f}: --fix is idempotent");
        let (_, patch) = lint(&["--fix=patch", f], None);
        golden(&format!("{}.patch.yaml", stem(f)), &patch);
    }
}

#[test]
fn fix_keeps_what_needs_no_fix() {
    let text = std::fs::read_to_string(dir().join("native-sidecar-probed.yaml")).unwrap();
    let (_, fixed) = lint(&["--fix", "native-sidecar-probed.yaml"], None);
    assert_eq!(fixed, text, "a clean manifest comes back byte for byte");
    let (_, fixed) = lint(&["--fix", "multi-document.yaml"], None);
    assert!(
        fixed.contains("    # Reviewed: the envoy here only serves the admin UI"),
        "documents without a fix keep their comments:\n{fixed}"
    );
}

#[test]
fn fix_in_place_rewrites_the_file() {
    let tmp = std::env::temp_dir().join(format!("sidecar-race-lint-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let file = tmp.join("job.yaml");
    std::fs::copy(dir().join("cloud-sql-proxy-job.yaml"), &file).unwrap();
    let (status, _) = lint(&["--fix=in-place", file.to_str().unwrap()], None);
    assert_eq!(status, 0);
    let (_, expected) = lint(&["--fix", "cloud-sql-proxy-job.yaml"], None);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), expected);
    let _ = std::fs::remove_dir_all(Path::new(&tmp));
}

#[test]
fn probe_port_evidence_and_known_endpoints() {
    // Evidence names the port of a sidecar without a readiness endpoint ...
    let pool = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: app\n    image: app:1\n  - name: db-proxy\n    image: pgbouncer:1\n    ports: [{containerPort: 6432}]\n";
    let (_, fixed) = lint(&["--fix", "--probe-port", "db-proxy=6543", "-"], Some(pool));
    assert!(fixed.contains("tcpSocket:\n        port: 6543"), "{fixed}");
    // ... but cloud-sql-proxy listens on 127.0.0.1, out of the kubelet's reach: its
    // own /startup endpoint, turned on by its flags, is the probe.
    let (_, fixed) = lint(
        &[
            "--fix",
            "--probe-port",
            "cloud-sql-proxy=6543",
            "cloud-sql-proxy-job.yaml",
        ],
        None,
    );
    assert!(
        fixed.contains("- --health-check\n        - --http-address=0.0.0.0\n")
            && fixed.contains("httpGet:\n            path: /startup\n            port: 9090"),
        "{fixed}"
    );
    let (_, fixed) = lint(&["--fix", "istio-injected-deployment.yaml"], None);
    assert!(
        fixed.contains("httpGet:\n            path: /healthz/ready\n            port: 15021"),
        "Istio's readiness endpoint, not a TCP connect:\n{fixed}"
    );
    // A TCP connect to Istio's health port is not its readiness endpoint.
    let istio = "apiVersion: v1\nkind: Pod\nmetadata: {name: i}\nspec:\n  initContainers:\n  - name: istio-proxy\n    image: docker.io/istio/proxyv2:1.24.2\n    restartPolicy: Always\n    startupProbe: {tcpSocket: {port: 15021}}\n  containers:\n  - name: app\n    image: app:1\n";
    let (_, json) = lint(&["--format", "json", "-"], Some(istio));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["findings"][0]["id"], "SR004", "{json}");
    assert!(
        v["findings"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("clients use ports 15001, 15006"),
        "{json}"
    );
    let (_, fixed) = lint(&["--fix", "-"], Some(istio));
    let (_, json) = lint(&["--format", "json", "-"], Some(&fixed));
    assert_eq!(ids(&json), Vec::<String>::new(), "{fixed}");
    // Envoy's admin /ready counts only where the admin port is declared.
    let envoy = |ports: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: e}}\nspec:\n  initContainers:\n  - name: envoy\n    image: envoyproxy/envoy:v1.32.1\n    restartPolicy: Always\n    ports: [{ports}]\n  containers:\n  - name: app\n    image: app:1\n    env: [{{name: UPSTREAM, value: 'localhost:9000'}}]\n"
        )
    };
    let (_, fixed) = lint(&["--fix", "-"], Some(&envoy("{containerPort: 9000}")));
    assert!(fixed.contains("tcpSocket:\n        port: 9000"), "{fixed}");
    let (_, fixed) = lint(
        &["--fix", "-"],
        Some(&envoy("{containerPort: 9000}, {containerPort: 9901}")),
    );
    assert!(
        fixed.contains("httpGet:\n        path: /ready\n        port: 9901"),
        "{fixed}"
    );
}

#[test]
fn runs_as_a_kubectl_plugin() {
    let tmp = std::env::temp_dir().join(format!("sidecar-race-plugin-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let plugin = tmp.join("kubectl-sidecar_race");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sidecar-race-agent"), &plugin).unwrap();
    let out = Command::new(&plugin)
        .args(["lint", "--format", "json", "cronjob.yaml"])
        .current_dir(dir())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(ids(&String::from_utf8(out.stdout).unwrap()), ["SR002"]);
    let help = Command::new(&plugin).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("Usage: kubectl sidecar-race"), "{help}");
    let run = Command::new(&plugin).arg("run").output().unwrap();
    assert_eq!(run.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&run.stderr).contains("as a kubectl plugin"),
        "the plugin does not run the node daemon"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A Secret volume's `defaultMode: 0400`, as real manifests write it, is octal as
/// kubectl reads it (256): the workload is linted (its racing sidecar found), not
/// refused as "not a pod template", and `--fix` writes the same mode back (decimal).
#[test]
fn an_octal_file_mode_is_read_as_kubectl_reads_it() {
    let manifest = "apiVersion: apps/v1
kind: Deployment
metadata: {name: checkout}
spec:
  selector: {matchLabels: {app: checkout}}
  template:
    metadata: {labels: {app: checkout}}
    spec:
      containers:
      - name: app
        image: shop/checkout
        env: [{name: HTTP_PROXY, value: 'http://127.0.0.1:15001'}]
        volumeMounts: [{name: certs, mountPath: /certs}]
      - name: istio-proxy
        image: istio/proxyv2
        ports: [{containerPort: 15001}]
      volumes:
      - name: certs
        secret: {secretName: checkout-certs, defaultMode: 0400}
";
    let (status, json) = lint(&["--format", "json", "-"], Some(manifest));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(status, 1, "{v:#}");
    assert_eq!(v["workloads"], 1, "{v:#}");
    assert_eq!(v["findings"][0]["id"], "SR001", "{v:#}");
    let (_, fixed) = lint(&["--fix", "-"], Some(manifest));
    assert!(
        fixed.contains("defaultMode: 256"),
        "the mode kubectl reads (0400), in decimal:\n{fixed}"
    );
}

/// A statsd_exporter classic sidecar named by its UDP flag, and a DogStatsD one by a
/// `protocol: UDP` containerPort: each is told to race the app's datagrams.
#[test]
fn classic_sidecars_receiving_udp_are_found_by_their_flag_and_their_udp_port() {
    let yaml = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: metrics, namespace: shop}
spec:
  selector: {matchLabels: {app: metrics}}
  template:
    metadata: {labels: {app: metrics}}
    spec:
      containers:
        - name: app
          image: example.com/app:1
        - name: exporter
          image: prom/statsd-exporter:v0.28.0
          args: ["--statsd.listen-udp=:9225"]
        - name: agent
          image: example.com/dd-agent:7
          ports: [{containerPort: 8125, protocol: UDP}]
"#;
    let (_, json) = lint(&["--format", "json", "-"], Some(yaml));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let says = |name: &str| {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["containers"][0] == name)
            .map(|f| f["reason"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let exporter = says("exporter");
    assert!(exporter.contains("on UDP 9225:"), "{exporter}\n{json}");
    assert!(exporter.contains("lost, not retried"), "{exporter}");
    // Not a known sidecar: a declared UDP port alone does not make it one.
    assert!(!says("agent").contains("UDP"), "{json}");
}
