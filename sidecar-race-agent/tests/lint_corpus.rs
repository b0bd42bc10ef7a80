//! `lint` on manifests shaped like the vendors' own documented examples
//! (tests/fixtures/lint-corpus/): the findings each must produce and must not, what
//! the fix text promises and what `--fix` does, and the round trip (after `--fix`
//! only what it says it cannot fix is left). tests/tests/lint_fix.rs (the tests
//! crate) validates the fixed corpus against the supported Kubernetes minors.

use std::{
    io::Write,
    path::PathBuf,
    process::{Command, Stdio},
};

use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lint-corpus")
}

/// `lint ARGS` in the corpus directory, with `stdin`: its stdout.
fn lint(args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sidecar-race-agent"))
        .arg("lint")
        .args(args)
        .current_dir(dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("error:"),
        "{args:?}: {err}"
    );
    String::from_utf8(out.stdout).unwrap()
}

/// (workload, id, severity, reason, fix) of each finding.
fn findings(args: &[&str], stdin: Option<&str>) -> Vec<(String, String, String, String, String)> {
    let mut all = vec!["--format", "json", "--fail-on", "none"];
    all.extend_from_slice(args);
    let v: Value = serde_json::from_str(&lint(&all, stdin)).unwrap();
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap().to_string();
            (s("name"), s("id"), s("severity"), s("reason"), s("fix"))
        })
        .collect()
}

fn ids(args: &[&str]) -> Vec<(String, String)> {
    findings(args, None)
        .into_iter()
        .map(|(n, id, ..)| (n, id))
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(n, id)| (n.to_string(), id.to_string()))
        .collect()
}

#[test]
fn each_vendor_example_gets_its_findings_and_no_others() {
    let cases: &[(&str, &[(&str, &str)])] = &[
        (
            "cloud-sql-proxy-deployment.yaml",
            &[("orders-api", "SR001")],
        ),
        ("cloud-sql-proxy-job.yaml", &[("orders-migrate", "SR003")]),
        ("alloydb.yaml", &[("ledger", "SR001")]),
        ("dapr.yaml", &[("nodeapp", "SR011")]),
        (
            "vault-agent.yaml",
            &[("payroll", "SR011"), ("billing", "SR011")],
        ),
        ("istio-namespace.yaml", &[("productpage-v1", "SR009")]),
        ("linkerd.yaml", &[("voting", "SR009")]),
        ("consul.yaml", &[("frontend", "SR011")]),
        ("oauth2-proxy.yaml", &[("dashboard", "SR001")]),
        ("otel-collector-uds.yaml", &[("checkout", "SR012")]),
        ("dapr-declared.yaml", &[("orders", "SR001")]),
        (
            "cloud-sql-proxy-unix-socket.yaml",
            &[("inventory", "SR012")],
        ),
    ];
    for (file, expected) in cases {
        assert_eq!(ids(&[file]), pairs(expected), "{file}");
    }
}

#[test]
fn ports_and_dialers_come_from_the_sidecars_flags_and_the_apps_host() {
    let f = findings(&["cloud-sql-proxy-deployment.yaml"], None);
    let (_, _, severity, reason, fix) = &f[0];
    assert_eq!(severity, "error");
    assert!(
        reason.contains("serving port 5432 (orders-api dials port 5432"),
        "--port=5432 in its args; DB_HOST=127.0.0.1 beside it: {reason}"
    );
    // Item 3: the fix text says what --fix does: it keeps the sidecar's own probe.
    assert!(
        fix.contains("keeping cloud-sql-proxy's own startupProbe") && !fix.contains("tcpSocket"),
        "{fix}"
    );
    let fixed = lint(&["--fix", "cloud-sql-proxy-deployment.yaml"], None);
    assert!(
        fixed.contains("failureThreshold: 20") && !fixed.contains("tcpSocket"),
        "{fixed}"
    );

    let (_, _, _, reason, _) = &findings(&["alloydb.yaml"], None)[0];
    assert!(
        reason.contains("serving port 5432 (ledger dials"),
        "the default port: {reason}"
    );
    let (_, _, _, reason, _) = &findings(&["oauth2-proxy.yaml"], None)[0];
    assert!(
        reason.contains("serving port 4180"),
        "--http-address: {reason}"
    );

    // Declared daprd: the readiness endpoint that does not wait for the app, or the
    // native sidecar would hold the app back for good.
    let (_, _, _, _, fix) = &findings(&["dapr-declared.yaml"], None)[0];
    assert!(
        fix.contains("httpGet /v1.0/healthz/outbound on port 3501"),
        "{fix}"
    );

    // The Job's native proxy: its /startup endpoint, which --fix turns on.
    let (_, _, _, _, fix) = &findings(&["cloud-sql-proxy-job.yaml"], None)[0];
    assert!(fix.contains("httpGet /startup on port 9090"), "{fix}");
    let fixed = lint(&["--fix", "cloud-sql-proxy-job.yaml"], None);
    assert!(
        fixed.contains("- --health-check\n        - --http-address=0.0.0.0\n")
            && fixed.contains("path: /startup\n            port: 9090"),
        "{fixed}"
    );
}

#[test]
fn a_known_sidecar_without_a_known_port_is_still_a_finding_and_no_port_is_invented() {
    // Which database (MySQL 3306, Postgres 5432 …) is not in the manifest.
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: app\n    image: app:1\n  - name: sql\n    image: gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.14.1\n    args: [\"--address=0.0.0.0\", \"p:r:db\"]\n";
    let f = findings(&["-"], Some(manifest));
    assert_eq!(f.len(), 1, "{f:?}");
    let (_, id, _, _, fix) = &f[0];
    assert_eq!(id, "SR001");
    assert!(
        fix.contains("httpGet /startup on port 9090"),
        "its known endpoint: {fix}"
    );
    // A known proxy with no endpoint and no port: said plainly, no probe invented.
    let pool = "apiVersion: v1\nkind: Pod\nmetadata: {name: q}\nspec:\n  containers:\n  - name: app\n    image: app:1\n  - name: oauth2-proxy\n    image: quay.io/oauth2-proxy/oauth2-proxy:v7.8.1\n    args: [\"--http-address=127.0.0.1:4180\"]\n";
    let f = findings(&["-"], Some(pool));
    let (_, id, _, _, fix) = &f[0];
    assert_eq!(id, "SR001");
    assert!(fix.contains("no startupProbe is added"), "{fix}");
    let fixed = lint(&["--fix", "-"], Some(pool));
    assert!(!fixed.contains("startupProbe"), "{fixed}");
}

#[test]
fn a_classic_sidecar_serving_a_unix_socket_the_app_mounts_gets_a_probe_its_image_can_run() {
    // The app names the socket at its own mount; the finding names it at the
    // sidecar's. The collector's image is built FROM scratch: no shell for an exec
    // probe, so --fix makes it native without one and says what would give one.
    let f = findings(&["otel-collector-uds.yaml"], None);
    let (_, _, severity, reason, fix) = &f[0];
    assert_eq!(severity, "error");
    assert!(
        reason.contains("serving a Unix socket at /sockets/otlp.sock (volume otel-socket), which checkout also mounts"),
        "{reason}"
    );
    assert!(
        fix.contains("otc-container's image has no shell, so no exec probe can test a Unix socket at /sockets/otlp.sock (volume otel-socket): no startupProbe is added; serve its readiness endpoint on port 13133 (the health_check extension with `endpoint: 0.0.0.0:13133` in its config) and declare that containerPort"),
        "the fix text says what --fix does and cannot: {fix}"
    );
    let fixed = lint(&["--fix", "otel-collector-uds.yaml"], None);
    assert!(
        fixed.contains(
            "      initContainers:\n      - name: otc-container\n        image: otel/opentelemetry-collector-contrib:0.120.0\n        restartPolicy: Always\n"
        ) && !fixed.contains("startupProbe"),
        "{fixed}"
    );

    // With its health_check port declared, the collector's readiness endpoint is the
    // probe (the one its Helm chart uses).
    let original = std::fs::read_to_string(dir().join("otel-collector-uds.yaml")).unwrap();
    let declared = original.replace(
        "        - --config=/conf/collector.yaml\n",
        "        - --config=/conf/collector.yaml\n        ports:\n        - {name: health, containerPort: 13133}\n",
    );
    assert_ne!(declared, original);
    let declared_findings = findings(&["-"], Some(&declared));
    // The health port is the kubelet's, not one the app races: no SR001 for it.
    assert_eq!(declared_findings.len(), 1, "{declared_findings:?}");
    let (_, id, _, _, fix) = &declared_findings[0];
    assert_eq!(id, "SR012");
    assert!(
        fix.contains("a startupProbe (httpGet / on port 13133)"),
        "{fix}"
    );
    let fixed = lint(&["--fix", "-"], Some(&declared));
    assert!(
        fixed.contains("        startupProbe:\n          httpGet:\n            path: /\n            port: 13133\n"),
        "{fixed}"
    );
    assert!(findings(&["-"], Some(&fixed)).is_empty(), "{fixed}");

    // A known proxy's socket directory (--unix-socket): its own /startup endpoint,
    // which needs no shell in a distroless image, beats a test of the socket.
    let (_, id, _, reason, fix) = &findings(&["cloud-sql-proxy-unix-socket.yaml"], None)[0];
    assert_eq!(id, "SR012");
    assert!(
        reason.contains("Unix sockets in /cloudsql (volume cloudsql), which inventory also mounts"),
        "{reason}"
    );
    assert!(fix.contains("httpGet /startup on port 9090"), "{fix}");

    // A native sidecar serving the socket without a startupProbe: SR003, and --fix
    // gives it the socket test; a socket nobody else mounts is no finding.
    let native = "apiVersion: v1\nkind: Pod\nmetadata: {name: n}\nspec:\n  initContainers:\n  - name: spire-agent\n    image: spire-agent:1\n    restartPolicy: Always\n    args: [\"-socketPath\", \"/run/spire/sockets/agent.sock\"]\n    volumeMounts: [{name: spire, mountPath: /run/spire/sockets}]\n  containers:\n  - name: app\n    image: app:1\n    volumeMounts: [{name: spire, mountPath: /spiffe}]\n  volumes: [{name: spire, emptyDir: {}}]\n";
    let (_, id, _, reason, fix) = &findings(&["-"], Some(native))[0];
    assert_eq!(id, "SR003");
    assert!(
        reason.contains("a Unix socket at /run/spire/sockets/agent.sock (volume spire)"),
        "{reason}"
    );
    assert!(
        fix.contains("test -S /run/spire/sockets/agent.sock"),
        "{fix}"
    );
    let fixed = lint(&["--fix", "-"], Some(native));
    assert!(findings(&["-"], Some(&fixed)).is_empty(), "{fixed}");
    let alone = native.replace(
        "    volumeMounts: [{name: spire, mountPath: /spiffe}]\n",
        "",
    );
    assert!(findings(&["-"], Some(&alone)).is_empty());
}

#[test]
fn injectors_and_their_native_modes() {
    // Without a cluster: classic assumed, and said so.
    let (_, _, _, reason, fix) = &findings(&["istio-namespace.yaml"], None)[0];
    assert!(
        reason.contains("assumed") && reason.contains("--assume-native-mesh=istio"),
        "{reason}"
    );
    assert!(
        fix.contains("sidecar.istio.io/nativeSidecar: \"true\" (--fix sets it)"),
        "{fix}"
    );
    let fixed = lint(&["--fix", "istio-namespace.yaml"], None);
    assert!(
        fixed.contains("sidecar.istio.io/nativeSidecar: 'true'")
            || fixed.contains("sidecar.istio.io/nativeSidecar: \"true\""),
        "{fixed}"
    );
    // The namespace counts only when it is in the input.
    let deployment_only: String = std::fs::read_to_string(dir().join("istio-namespace.yaml"))
        .unwrap()
        .split("---")
        .nth(1)
        .unwrap()
        .to_string();
    assert!(findings(&["-"], Some(&deployment_only)).is_empty());
    // Assumed native: nothing to flag.
    assert!(
        ids(&[
            "--assume-native-mesh=istio,linkerd",
            "istio-namespace.yaml",
            "linkerd.yaml"
        ])
        .is_empty()
    );
    assert_eq!(
        ids(&["--assume-native-mesh=istio", "linkerd.yaml"]),
        pairs(&[("voting", "SR009")])
    );
    // Injectors without a native mode say so; --fix leaves them alone.
    for file in ["dapr.yaml", "consul.yaml", "vault-agent.yaml"] {
        let f = findings(&[file], None);
        assert!(
            f.iter()
                .all(|(_, _, _, _, fix)| fix.contains("--fix cannot")),
            "{f:?}"
        );
        let original = std::fs::read_to_string(dir().join(file)).unwrap();
        assert_eq!(lint(&["--fix", file], None), original, "{file}");
    }
    // istio.io/rev on the pod, and a pod opting out.
    let rev = "apiVersion: v1\nkind: Pod\nmetadata: {name: r, labels: {istio.io/rev: canary}}\nspec:\n  containers:\n  - {name: app, image: app:1}\n";
    assert_eq!(
        findings(&["-"], Some(rev))
            .into_iter()
            .map(|f| f.1)
            .collect::<Vec<_>>(),
        ["SR009"]
    );
    let kuma = "apiVersion: v1\nkind: Pod\nmetadata: {name: k, labels: {kuma.io/sidecar-injection: enabled}}\nspec:\n  containers:\n  - {name: app, image: app:1}\n";
    let (_, id, _, _, fix) = &findings(&["-"], Some(kuma))[0];
    assert_eq!(id, "SR009");
    assert!(
        fix.contains("experimental.sidecarContainers") && fix.contains("--fix cannot"),
        "{fix}"
    );
}

#[test]
fn after_the_fix_only_what_the_fix_cannot_do_is_left() {
    for entry in std::fs::read_dir(dir()).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        let fixed = lint(&["--fix", &file], None);
        let before = findings(&[&file], None);
        assert!(
            !before.is_empty(),
            "{file}: every vendor example has a finding"
        );
        let only_injected = before.iter().all(|(_, id, ..)| id == "SR011");
        let original = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            fixed == original,
            only_injected,
            "{file}: --fix changes it unless it cannot"
        );
        // Left: injection (SR011) and a probe --fix says it cannot give (SR003).
        let left = findings(&["-"], Some(&fixed));
        assert!(
            left.iter().all(|(_, id, _, _, fix)| id == "SR011"
                || (id == "SR003" && fix.contains("no startupProbe is added"))),
            "{file} after --fix: {left:?}"
        );
    }
}
