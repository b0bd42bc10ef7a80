//! A real OpenTelemetry Collector (the OTLP receiver and the file exporter only;
//! `cargo xtask setup` builds it from xtask/otelcol), started on a free loopback port,
//! for the tests that push OTLP metrics: it writes each export request it receives, as
//! OTLP/JSON (an `ExportMetricsServiceRequest`), as one line of a file the test reads back.

use std::{
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::{agent::RunAgent, http::free_port, pod::empty_pods_file};

/// What `cargo xtask setup` builds (xtask/src/cluster/otelcol.rs, COLLECTOR_VERSION and
/// DISTRIBUTION).
const DEFAULT_OTELCOL: &str = ".cache/sidecar-race/go/otelcol-v0.161.0-r2/bin/otelcol";

/// The collector binary: `SIDECAR_RACE_OTELCOL_BIN`, or the one `cargo xtask setup` built.
pub fn binary() -> PathBuf {
    crate::command::go_tool("SIDECAR_RACE_OTELCOL_BIN", DEFAULT_OTELCOL)
}

/// A collector of its own: OTLP/HTTP on `endpoint()` (no gRPC, no internal telemetry
/// port), every metrics request written to `metrics.jsonl` in its directory (flushed
/// every 100 ms); killed and removed on drop.
pub struct Collector {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Collector {
    /// An agent pushing to it every second, as node `node-7` of cluster `fleet-a`,
    /// reading the pods file of `name` (returned, empty until written), with `extra`
    /// arguments.
    pub fn agent(&self, name: &str, extra: &[&str]) -> (RunAgent, PathBuf) {
        let (pods_file, source) = empty_pods_file(name);
        let endpoint = self.endpoint();
        let mut args = vec![
            "--pods-from",
            &source,
            "--pods-poll-seconds",
            "0.1",
            "--otlp-endpoint",
            &endpoint,
            "--otlp-interval",
            "1s",
            "--cluster-name",
            "fleet-a",
        ];
        args.extend_from_slice(extra);
        let agent = RunAgent::start_with_env(&args, &[("NODE_NAME", "node-7")]);
        (agent, pods_file)
    }

    /// Starts it; returns once its OTLP/HTTP port accepts connections.
    pub fn start() -> Self {
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sr-otelcol-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        // JSON is YAML.
        let config = json!({
            "receivers": {"otlp": {"protocols": {"http": {"endpoint": format!("127.0.0.1:{port}")}}}},
            "exporters": {
                "file": {
                    "path": dir.join("metrics.jsonl").display().to_string(),
                    "format": "json",
                    "flush_interval": "100ms",
                },
                "file/logs": {
                    "path": dir.join("logs.jsonl").display().to_string(),
                    "format": "json",
                    "flush_interval": "100ms",
                },
            },
            "service": {
                "pipelines": {
                    "metrics": {"receivers": ["otlp"], "exporters": ["file"]},
                    "logs": {"receivers": ["otlp"], "exporters": ["file/logs"]},
                },
                "telemetry": {"metrics": {"level": "none"}},
            },
        });
        let config_path = dir.join("config.yaml");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let child = Command::new(binary())
            .arg(format!("--config=file:{}", config_path.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("otelcol.log")).unwrap())
            .spawn()
            .expect("start otelcol (`cargo xtask setup` builds it)");
        let mut c = Collector { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = c.child.try_wait() {
                panic!("otelcol exited ({status}): {}", c.log());
            }
            assert!(
                Instant::now() < deadline,
                "otelcol not listening: {}",
                c.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    /// `http://127.0.0.1:<port>`: OTLP/HTTP, metrics at `/v1/metrics`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What it has written so far: one `ExportMetricsServiceRequest` (OTLP/JSON) per
    /// request received, in order (a line not yet flushed whole is left out).
    pub fn received(&self) -> Vec<Value> {
        self.written("metrics.jsonl")
    }

    /// The log records it has written so far (`ExportLogsServiceRequest`s flattened),
    /// each with its resource's attributes beside it, in order.
    pub fn received_logs(&self) -> Vec<(Value, Value)> {
        let mut records = Vec::new();
        for request in self.written("logs.jsonl") {
            for rl in request["resourceLogs"].as_array().into_iter().flatten() {
                for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                    for r in sl["logRecords"].as_array().into_iter().flatten() {
                        records.push((rl["resource"].clone(), r.clone()));
                    }
                }
            }
        }
        records
    }

    fn written(&self, file: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("otelcol wrote {l:?}: {e}")))
            .collect()
    }

    /// `received()` once it holds at least `n` requests (the exporter flushes every
    /// 100 ms).
    pub fn wait_received(&self, n: usize, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "otelcol received {} requests, not {n}, in {timeout:?}: {got:?}\n{}",
                got.len(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its own log (stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("otelcol.log")).unwrap_or_default()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
