//! A real Prometheus (Debian's package; `cargo xtask setup` installs it), started on
//! loopback with the shipped rules evaluated every second, for the end-to-end tests.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::http::{free_port, get};

/// A Prometheus server of its own, on a free loopback port, removed on drop.
pub struct Prometheus {
    child: Child,
    pub addr: String,
    dir: PathBuf,
}

impl Prometheus {
    /// Prometheus with the shipped rules (evaluated every second instead of every
    /// minute, so the test need not wait) and one scrape job, `scrape` (a
    /// `scrape_configs` entry).
    pub fn start(scrape: &Value) -> Self {
        let dir = Self::fresh_dir("");
        let rules = std::fs::read_to_string(
            crate::command::workspace().join("deploy/monitoring/rules.yaml"),
        )
        .unwrap();
        assert!(
            rules.contains("  interval: 1m\n"),
            "rules.yaml evaluates every minute"
        );
        let fast = dir.join("rules.yaml");
        std::fs::write(&fast, rules.replace("  interval: 1m\n", "  interval: 1s\n")).unwrap();
        // JSON is YAML: the scrape job goes in as generated.
        let config = json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [fast.display().to_string()],
            "scrape_configs": [scrape],
        });
        std::fs::write(dir.join("prometheus.yml"), config.to_string()).unwrap();
        Self::launch(dir, Command::new("prometheus"))
    }

    /// An empty directory of this test process for a Prometheus (`tag` tells several
    /// apart).
    pub fn fresh_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sr-prometheus-{}{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Runs `command` (`prometheus`, or a wrapper that ends by running it with the
    /// arguments it is given) on `dir/prometheus.yml`, with its storage in `dir` and on a
    /// free loopback port; once it is ready.
    pub fn launch(dir: PathBuf, mut command: Command) -> Self {
        let addr = format!("127.0.0.1:{}", free_port());
        let child = command
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// Instant query; the result vector.
    pub fn query(&self, promql: &str) -> Vec<Value> {
        let path = format!("/api/v1/query?query={}", encode(promql));
        let (status, body) = get(&self.addr, &path).expect("prometheus answers");
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"].as_array().unwrap().clone()
    }

    /// The single value of `promql`, once it has one (scrapes and rules take a moment).
    /// Waits until `promql` has the value `want` (the scrape after the agent counted).
    pub fn wait_value(&self, promql: &str, want: f64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self
                .query(promql)
                .first()
                .map(|v| v["value"][1].as_str().unwrap().parse::<f64>().unwrap());
            if v == Some(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{promql} is {v:?}, not {want}, after {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    pub fn value(&self, promql: &str, timeout: Duration) -> f64 {
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

/// Percent-encodes a query parameter.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `report --prometheus URL --range 10m ARGS` of the agent binary, which must succeed:
/// its stdout. `SIDECAR_RACE_CLUSTER_LABEL` is not passed on, so only `ARGS` choose
/// the cluster label.
pub fn report(url: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(crate::agent::agent_binary())
        .args(["report", "--prometheus", url, "--range", "10m"])
        .args(args)
        .env_remove("SIDECAR_RACE_CLUSTER_LABEL")
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
