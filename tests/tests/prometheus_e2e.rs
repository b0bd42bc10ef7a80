//! End to end with a real Prometheus (Debian's package, started here on loopback,
//! scraping every second, loading deploy/monitoring/rules.yaml): simulated pods race,
//! Prometheus finds the refusals and the startup incident under the right workload
//! labels, `promtool check metrics` accepts the agent's exposition, and
//! `sidecar-race-agent report --prometheus` ranks the racing workload first with its fix.

use std::{
    io::Write,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use sidecar_race_tests::{
    agent::{RunAgent, agent_binary},
    http::{free_port, get},
    pod::{Declared, SimPod, write_pod_list},
    root::{have, is_root_or_skip},
    scenario::{app_done, proxy},
};

struct Prometheus {
    child: Child,
    addr: String,
    dir: PathBuf,
}

impl Prometheus {
    fn start(target: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sr-prometheus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let rules =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring/rules.yaml");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: sidecar-race-agent\n    static_configs:\n      - targets: ['{target}']\n        labels:\n          node: sim-node\n",
            rules.display()
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect(
                "start prometheus (Debian package `prometheus`; `cargo xtask setup` installs it)",
            );
        let p = Prometheus { child, addr, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while get(&p.addr, "/-/ready").map(|r| r.0) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "prometheus not ready: {}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// Instant query; the result vector.
    fn query(&self, promql: &str) -> Vec<Value> {
        let path = format!("/api/v1/query?query={}", encode(promql));
        let (status, body) = get(&self.addr, &path).expect("prometheus answers");
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"].as_array().unwrap().clone()
    }

    /// The single value of `promql`, once it has one (scrapes and rules take a moment).
    fn value(&self, promql: &str, timeout: Duration) -> f64 {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.query(promql).first() {
                return v["value"][1].as_str().unwrap().parse().unwrap();
            }
            assert!(Instant::now() < deadline, "no value for {promql}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A pod of Deployment `name`: `racing` starts app and proxy together with a slow
/// proxy; otherwise the proxy serves first.
fn start_pod(
    name: &str,
    racing: bool,
    pods_file: &std::path::Path,
    manifests: &mut Vec<Value>,
) -> SimPod {
    let mut pod = SimPod::new(name).unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    manifests.push(pod.app_and_proxy_manifest("shop", name, &a, &p, Declared::App));
    write_pod_list(pods_file, manifests);
    if racing {
        proxy(
            &mut pod,
            &p,
            &["--listen", "127.0.0.1:15001", "--delay-ms", "1200"],
        );
    } else {
        proxy(&mut pod, &p, &["--listen", "127.0.0.1:15001"]);
        std::thread::sleep(Duration::from_millis(300));
    }
    app_done(
        &mut pod,
        &a,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "100"],
    );
    pod
}

#[test]
fn prometheus_sees_the_race_and_the_report_ranks_it_first() {
    if !is_root_or_skip("prometheus_sees_the_race_and_the_report_ranks_it_first") {
        return;
    }
    assert!(
        have("prometheus") && have("promtool"),
        "prometheus/promtool missing: `cargo xtask setup` installs them"
    );
    let pods_file = std::env::temp_dir().join(format!("sr-e2e-pods-{}.json", std::process::id()));
    write_pod_list(&pods_file, &[]);
    let source = format!("file:{}", pods_file.display());
    let agent = RunAgent::start(&["--pods-from", &source, "--pods-poll-seconds", "0.1"]);
    let prom = Prometheus::start(&agent.addr);

    let mut manifests = Vec::new();
    let racing = start_pod("checkout", true, &pods_file, &mut manifests);
    let _ordered = start_pod("catalog", false, &pods_file, &mut manifests);
    agent.wait_incidents(&racing.uid, Duration::from_secs(10), |i| {
        i.iter().any(|i| i["state"] == "resolved")
    });

    let t = Duration::from_secs(30);
    let refused = prom.value(
        r#"sum(sidecar_race_refused_connections_total{job="sidecar-race-agent",namespace="shop",workload_kind="Deployment",workload="checkout",container="app",sidecar="proxy",port="15001",phase="startup"})"#,
        t,
    );
    assert!(
        refused >= 8.0,
        "refusals under the workload's labels: {refused}"
    );
    let incidents = prom.value(
        r#"sum(sidecar_race_incidents_total{workload="checkout",sidecar="proxy",phase="startup",pattern="classic"})"#,
        t,
    );
    assert_eq!(incidents, 1.0);
    assert_eq!(
        prom.value(
            r#"sum(sidecar_race_pod_starts_total{workload="checkout"})"#,
            t
        ),
        1.0
    );
    assert_eq!(
        prom.value(
            r#"sum(sidecar_race_affected_pod_starts_total{workload="checkout"})"#,
            t
        ),
        1.0
    );
    assert_eq!(
        prom.value(
            r#"sum(sidecar_race_pod_starts_total{workload="catalog"})"#,
            t
        ),
        1.0
    );
    assert!(
        prom.query(r#"sidecar_race_affected_pod_starts_total{workload="catalog"}"#)
            .is_empty()
    );
    let window = prom.value(
        r#"sum(sidecar_race_window_seconds_sum{workload="checkout",phase="startup"})"#,
        t,
    );
    assert!((window - 1.2).abs() < 0.25, "window {window}");
    assert_eq!(prom.value(r#"up{job="sidecar-race-agent"}"#, t), 1.0);

    // The exposition passes promtool's checks.
    let (status, body) = get(&agent.addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The migration report ranks the racing workload first, with its fix.
    let prom_url = format!("http://{}", prom.addr);
    let stdout = report(&prom_url, &["--format", "json"]);
    let ranked: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("report JSON ({e}): {stdout}"));
    let workloads = ranked["workloads"]
        .as_array()
        .unwrap_or_else(|| panic!("{ranked:#}"));
    assert_eq!(workloads[0]["workload"], "checkout", "{ranked:#}");
    let text = report(&prom_url, &[]);
    assert!(text.contains("checkout"), "{text}");
    assert!(
        text.contains("Move proxy from containers to initContainers"),
        "{text}"
    );

    // With the manifests, the plan: the racing workload above a risky one that has
    // not raced, each with its patch.
    let dir = std::env::temp_dir().join(format!("sr-e2e-manifests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("checkout.yaml"), CHECKOUT_MANIFEST).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../sidecar-race-agent/tests/fixtures/lint/cloud-sql-proxy-job.yaml"
        ),
        dir.join("job.yaml"),
    )
    .unwrap();
    let stdout = report(
        &prom_url,
        &[
            "--format",
            "json",
            "--with-patches",
            "--manifests",
            dir.to_str().unwrap(),
        ],
    );
    let plan: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(plan["workloads"][0]["workload"], "checkout", "{plan:#}");
    assert_eq!(plan["workloads"][0]["rank"], 1);
    assert_eq!(
        plan["not_raced"][0]["workload"], "migrate-orders",
        "{plan:#}"
    );
    assert!(plan["not_raced"][0]["rank"].as_u64().unwrap() > 1);
    let patches = plan["patches"].as_array().unwrap();
    assert_eq!(patches[0]["rank"], 1, "{plan:#}");
    let patch = patches[0]["patch"].as_str().unwrap();
    assert!(
        patch.contains("restartPolicy: Always")
            && patch.contains("tcpSocket:\n            port: 15001"),
        "the patch makes proxy native with a startupProbe on the port the app was refused on:\n{patch}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::remove_file(pods_file).unwrap();
}

/// `report --prometheus URL --range 10m ARGS`, which must succeed: its stdout.
fn report(prom_url: &str, args: &[&str]) -> String {
    let out = Command::new(agent_binary())
        .args(["report", "--prometheus", prom_url, "--range", "10m"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "report {args:?} failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The racing Deployment as its manifest says it: proxy a classic sidecar on 15001.
const CHECKOUT_MANIFEST: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: checkout
  namespace: shop
spec:
  selector:
    matchLabels:
      app: checkout
  template:
    metadata:
      labels:
        app: checkout
    spec:
      containers:
      - name: app
        image: example.com/app:1
        ports:
        - containerPort: 8080
      - name: proxy
        image: example.com/proxy:1
        ports:
        - containerPort: 15001
"#;
