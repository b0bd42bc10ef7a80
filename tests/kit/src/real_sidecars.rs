//! Real sidecars as users run them, for the cluster tier, each built by `cargo xtask
//! setup` from its Go modules and packaged as its vendor packages it (the binary
//! alone, no shell), with a glibc client that counts its own refusals: the
//! OpenTelemetry Collector with its OTLP/gRPC receiver on a Unix socket in an emptyDir,
//! exported to as an OpenTelemetry SDK does (`OTEL_EXPORTER_OTLP_ENDPOINT=unix:///…`,
//! gRPC over HTTP/2 with Debian's curl); and the Cloud SQL Auth Proxy on
//! 127.0.0.1:5432, queried with Debian's psql. Each client makes one last attempt at
//! SIGTERM after a preStop sleep, as SDKs and pools flush at shutdown, and counts every
//! refusal of its drain. And oauth2-proxy in front of an app that warms up, the other
//! way round: the proxy dials the app.

use serde_json::{Value, json};

use crate::{glibc_fleet::glibc_sh, stand_in::deployment};

use sidecar_race_testbed::images::{
    CLOUD_SQL_PROXY as CLOUD_SQL_PROXY_IMAGE, COLLECTOR as COLLECTOR_IMAGE,
    OAUTH2_PROXY as OAUTH2_PROXY_IMAGE,
};

/// The container name the OpenTelemetry Operator gives the collector it injects.
pub const COLLECTOR: &str = "otc-container";
/// The Cloud SQL proxy's container, as its docs name it.
pub const CLOUD_SQL_PROXY: &str = "cloud-sql-proxy";
/// oauth2-proxy's container.
pub const OAUTH2_PROXY: &str = "oauth2-proxy";
/// The port oauth2-proxy serves the pod's clients on.
pub const GATEWAY_PORT: u16 = 4180;

/// The collector's configuration: OTLP/gRPC on `/sockets/otlp.sock`, what it
/// receives written to a file, the health_check extension where the kubelet reaches
/// it (the endpoint the collector's Helm chart probes), no telemetry of its own.
const COLLECTOR_CONFIG: &str = "\
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: /sockets/otlp.sock
        transport: unix
exporters:
  file:
    path: /tmp/received.jsonl
extensions:
  health_check:
    endpoint: 0.0.0.0:13133
service:
  extensions: [health_check]
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [file]
";

/// One OTLP export of an empty metrics request, as gRPC over HTTP/2 on the socket of
/// `OTEL_EXPORTER_OTLP_ENDPOINT`: curl's status 7 is no connection (the socket missing
/// or without a listener); like an SDK, it gives up an export after a while (2 s).
const EXPORT: &str = "curl -s -m 2 -o /dev/null --http2-prior-knowledge --unix-socket \"${OTEL_EXPORTER_OTLP_ENDPOINT#unix://}\" \
     -H 'content-type: application/grpc' -H 'te: trailers' --data-binary @/tmp/request \
     http://localhost/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// One query through the Cloud SQL proxy on 127.0.0.1:5432 (libpq: one connect, no
/// TLS, given up after 3 s). Refused, psql says `Connection refused`; once the proxy
/// listens it accepts and closes (it cannot reach Google from here): `server closed
/// the connection unexpectedly`.
const QUERY: &str = "psql 'host=127.0.0.1 port=5432 user=inventory dbname=inventory sslmode=disable \
     gssencmode=disable connect_timeout=3' -c 'select 1'";

/// The app container: a `counting_client` whose pod spec gives it a `preStop` sleep of
/// 2 s, as apps are given to let endpoints drain first. The kubelet sends the classic
/// sidecar its SIGTERM meanwhile, so the app's last attempts of those 2 s meet the
/// sidecar gone, every time. `started` runs once the sidecar answered (the datagram
/// cases read the sidecar's own counters there).
pub(crate) fn counting_app(setup: &str, attempt: &str, refused: &str, started: &str) -> Value {
    let mut app = glibc_sh("app", &counting_client(setup, attempt, refused, started));
    app["lifecycle"] = json!({"preStop": {"sleep": {"seconds": 2}}});
    app
}

/// A client that counts its own refusals: `attempt` every 50 ms while `refused` (a
/// shell test of its status `$rc` and output `$out`) holds, then `refused <n>` printed
/// then `started`, and one attempt a second; at SIGTERM, after 0.2 s finishing its work in flight,
/// one last attempt (as SDKs and connection pools flush at shutdown). Every refused
/// attempt after the start writes `refused` to `/evidence/<pod>`, which outlives the
/// pod: the sidecar may go before the app's own SIGTERM (the kubelet stops the two
/// concurrently), and the attempts that meet that are refusals of the drain too. The
/// trap only marks SIGTERM, so the attempt it interrupts is still counted.
fn counting_client(setup: &str, attempt: &str, refused: &str, started: &str) -> String {
    format!(
        "{setup} attempt() {{ out=$({attempt} 2>&1); rc=$?; }}; \
         count() {{ attempt; {refused} && echo refused >> /evidence/$(hostname); }}; \
         n=0; while :; do attempt; {refused} || break; n=$((n+1)); sleep 0.05; done; \
         echo \"refused $n\"; {started} \
         term=; trap 'term=1' TERM; \
         while [ -z \"$term\" ]; do count; [ -n \"$term\" ] || sleep 1; done; \
         sleep 0.2; count; echo flushed; exit 0"
    )
}

/// The hostPath volume `evidence` at `path`.
pub(crate) fn evidence_volume(path: &str) -> Value {
    json!({"name": "evidence", "hostPath": {"path": path, "type": "DirectoryOrCreate"}})
}

/// The ConfigMap `<name>-collector` holding the collector's configuration.
pub fn collector_config(ns: &str, name: &str) -> String {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{name}-collector"), "namespace": ns},
        "data": {"config.yaml": COLLECTOR_CONFIG},
    })
    .to_string()
}

/// Deployment `name` in `ns`: the app, and the collector as a classic sidecar after it
/// in `containers` (how the Operator injects it without native sidecars), the socket
/// volume mounted at different paths in each, as in the Operator's examples. The app's
/// evidence of a refused last export goes to the host directory `evidence`.
pub fn telemetry(ns: &str, name: &str, evidence: &str) -> Value {
    let mut app = counting_app(
        "printf '\\0\\0\\0\\0\\0' > /tmp/request;",
        EXPORT,
        "[ $rc = 7 ]",
        "",
    );
    app["env"] =
        json!([{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "unix:///var/run/otel/otlp.sock"}]);
    app["volumeMounts"] = json!([
        {"name": "otel-socket", "mountPath": "/var/run/otel"},
        {"name": "evidence", "mountPath": "/evidence"},
    ]);
    let collector = json!({
        "name": COLLECTOR, "image": COLLECTOR_IMAGE.reference, "imagePullPolicy": "Never",
        "args": ["--config=/conf/config.yaml"],
        "ports": [{"name": "health", "containerPort": 13133}],
        "volumeMounts": [
            {"name": "otel-socket", "mountPath": "/sockets"},
            {"name": "otel-config", "mountPath": "/conf"},
        ],
    });
    let spec = json!({
        "containers": [app, collector],
        "terminationGracePeriodSeconds": 10,
        "volumes": [
            {"name": "otel-socket", "emptyDir": {}},
            {"name": "otel-config", "configMap": {"name": format!("{name}-collector")}},
            evidence_volume(evidence),
        ],
    });
    serde_json::from_str(&deployment(ns, name, spec)).expect("a Deployment")
}

/// The Cloud SQL Auth Proxy's flags here: a static token (it asks Google for nothing
/// until a client connects, and then cannot reach it), the port for the app, its
/// health checks on 9090 where the kubelet reaches them.
const PROXY_ARGS: [&str; 6] = [
    "--token=offline-test-token",
    "--port=5432",
    "--health-check",
    "--http-address=0.0.0.0",
    "--http-port=9090",
    "sr-test:us-central1:inventory",
];

/// Deployment `name` in `ns`: the app querying its database through the Cloud SQL
/// proxy, a classic sidecar after it in `containers` (how its docs long showed it),
/// the app naming the proxy as `DB_HOST=127.0.0.1`. The app's evidence of a refused
/// last query goes to the host directory `evidence`.
pub fn inventory(ns: &str, name: &str, evidence: &str) -> Value {
    let mut app = counting_app(
        "",
        QUERY,
        "case \"$out\" in *\"Connection refused\"*) true;; *) false;; esac",
        "",
    );
    app["env"] = json!([
        {"name": "DB_HOST", "value": "127.0.0.1"},
        {"name": "DB_PORT", "value": "5432"},
    ]);
    app["volumeMounts"] = json!([{"name": "evidence", "mountPath": "/evidence"}]);
    let proxy = json!({
        "name": CLOUD_SQL_PROXY, "image": CLOUD_SQL_PROXY_IMAGE.reference,
        "imagePullPolicy": "Never", "args": PROXY_ARGS,
    });
    let spec = json!({
        "containers": [app, proxy],
        "terminationGracePeriodSeconds": 10,
        "volumes": [evidence_volume(evidence)],
    });
    serde_json::from_str(&deployment(ns, name, spec)).expect("a Deployment")
}

/// oauth2-proxy's flags here: every route let through without login (no identity
/// provider is reachable; `github` is one it starts without asking), its upstream
/// the app on 127.0.0.1:8080.
const GATEWAY_ARGS: [&str; 9] = [
    "--http-address=0.0.0.0:4180",
    "--upstream=http://127.0.0.1:8080",
    "--provider=github",
    "--client-id=sidecar-race",
    "--client-secret=offline",
    "--cookie-secret=0123456789abcdef0123456789abcdef",
    "--email-domain=*",
    "--skip-auth-route=^/",
    "--skip-provider-button",
];

/// Deployment `name` in `ns`: oauth2-proxy as a classic sidecar in front of an app
/// that serves 127.0.0.1:8080 after 3 s of warming up (busybox httpd in the glibc
/// image). A request the proxy forwards before then is refused by the app: the
/// proxy's dial, answered 502 to the client.
pub fn gateway(ns: &str, name: &str) -> Value {
    let proxy = json!({
        "name": OAUTH2_PROXY, "image": OAUTH2_PROXY_IMAGE.reference,
        "imagePullPolicy": "Never", "args": GATEWAY_ARGS,
        "ports": [{"name": "http", "containerPort": GATEWAY_PORT}],
    });
    let mut app = glibc_sh(
        "app",
        "trap 'exit 0' TERM; sleep 3; echo ok > /tmp/index.html; httpd -p 127.0.0.1:8080 -h /tmp; \
         while :; do sleep 1; done",
    );
    app["ports"] = json!([{"name": "app", "containerPort": 8080}]);
    serde_json::from_str(&deployment(ns, name, json!({"containers": [proxy, app]})))
        .expect("a Deployment")
}

/// A Pod `client` in `ns` requesting `http://<ip>:4180/index.html` through the
/// gateway every 100 ms (curl) until it answers 200, counting the 502s, then printing
/// `bad gateway <n>`.
pub fn gateway_client(ns: &str, ip: &str) -> String {
    let url = format!("http://{ip}:{GATEWAY_PORT}/index.html");
    let script = format!(
        "n=0; while :; do code=$(curl -s -m 2 -o /dev/null -w '%{{http_code}}' {url}); \
         [ \"$code\" = 200 ] && break; [ \"$code\" = 502 ] && n=$((n+1)); sleep 0.1; done; \
         echo \"bad gateway $n\"; trap 'exit 0' TERM; while :; do sleep 1; done"
    );
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "client", "namespace": ns, "labels": {"app": "client"}},
        "spec": {"containers": [glibc_sh("client", &script)], "terminationGracePeriodSeconds": 2},
    })
    .to_string()
}
