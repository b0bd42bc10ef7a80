//! Ordinary glibc pods for the cluster tier's quiet-fleet case (`sr-test.local/glibc:1`,
//! which `cargo xtask cluster up` imports): name lookups, syslog without `/dev/log`, a
//! probed web server, a crash loop, a Job, a probed native sidecar and an app polling
//! its own control socket, none of which races; and the two racing shapes (a late TCP
//! sidecar, a late Unix-socket sidecar on a shared emptyDir), whose clients print their
//! own refusal count as `refused <n>`.
//!
//! Every refusal the quiet ones meet is on a path private to the client (the nscd
//! socket, `/dev/log`, the app's own `/tmp/ctl.sock`), on UDP to a DNS server there is
//! none of, or from the kubelet's probes: none is a sidecar race.

use serde_json::{Value, json};

use crate::stand_in::deployment;

pub use sidecar_race_testbed::images::GLIBC_IMAGE;

/// A glibc container running `argv`.
pub fn glibc(name: &str, argv: &[&str]) -> Value {
    json!({
        "name": name, "image": GLIBC_IMAGE, "imagePullPolicy": "Never", "command": argv,
    })
}

/// A glibc container running the shell `script`.
pub fn glibc_sh(name: &str, script: &str) -> Value {
    glibc(name, &["/bin/sh", "-c", script])
}

/// The name glibc cannot resolve here (no DNS add-on: the lookup goes to the nscd
/// socket, then to a DNS server on UDP that is not there).
const SERVICE_NAME: &str = "kubernetes.default.svc.cluster.local";

/// Serves `/tmp` with busybox httpd on `addr` (`[ip:]port`) in the background, then
/// waits for SIGTERM (PID 1 has no default handler).
fn serve(addr: &str) -> String {
    format!(
        "echo ok > /tmp/index.html; httpd -p {addr} -h /tmp; trap 'exit 0' TERM; \
         while :; do sleep 1; done"
    )
}

/// A Job of one pod running `containers` once.
fn job(ns: &str, name: &str, containers: Value) -> String {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "containers": containers,
        }}},
    })
    .to_string()
}

/// The workloads of the quiet fleet, each with the manifest that makes it: Deployments
/// `lookups`, `syslog`, `probed`, `crasher`, `meshed` (the one to `rollout restart`),
/// `ctl`, and the Job `report`.
pub fn quiet_fleet(ns: &str) -> Vec<(&'static str, String)> {
    // getent: nscd's socket, then DNS (fails: no server); the pod's own name from the
    // kubelet's /etc/hosts; curl to an unresolvable name and to that own name.
    let lookups = format!(
        "trap 'exit 0' TERM; echo ok > /tmp/index.html; httpd -p 8080 -h /tmp; i=0; \
         while :; do i=$((i+1)); getent hosts {SERVICE_NAME}; \
         getent hosts \"$HOSTNAME\" >/dev/null && echo \"lookup $i ok\"; \
         curl -s -m 2 -o /dev/null http://{SERVICE_NAME}/; \
         curl -s -m 2 -o /dev/null \"http://$HOSTNAME:8080/index.html\" && echo \"curl $i ok\"; \
         sleep 1; done"
    );
    let syslog = "trap 'exit 0' TERM; i=0; while :; do i=$((i+1)); \
                  logger -t quiet \"tick $i\" && echo \"logged $i\"; sleep 1; done";
    let mut web = glibc_sh("web", &serve("8080"));
    web["readinessProbe"] =
        json!({"httpGet": {"path": "/index.html", "port": 8080}, "periodSeconds": 2});
    web["livenessProbe"] = json!({
        "exec": {"command": ["sh", "-c", "nc 127.0.0.1 8080 </dev/null >/dev/null"]},
        "periodSeconds": 3, "timeoutSeconds": 2,
    });
    let crasher = format!("getent hosts {SERVICE_NAME}; echo 'no {SERVICE_NAME}: exit 1'; exit 1");
    let report =
        format!("getent hosts {SERVICE_NAME}; logger -t report done; echo 'report done'; exit 0");
    let mut proxy = glibc_sh("proxy", &serve("15001"));
    proxy["restartPolicy"] = json!("Always");
    proxy["ports"] = json!([{"containerPort": 15001, "name": "proxy"}]);
    proxy["startupProbe"] =
        json!({"tcpSocket": {"port": 15001}, "periodSeconds": 1, "failureThreshold": 30});
    let meshed_app = "trap 'exit 0' TERM; i=0; n=0; while :; do i=$((i+1)); \
                      curl -s -o /dev/null http://127.0.0.1:15001/index.html || n=$((n+1)); \
                      echo \"calls $i failed $n\"; sleep 1; done";
    vec![
        (
            "lookups",
            deployment(
                ns,
                "lookups",
                json!({"containers": [glibc_sh("resolver", &lookups)]}),
            ),
        ),
        (
            "syslog",
            deployment(
                ns,
                "syslog",
                json!({"containers": [glibc_sh("logger", syslog)]}),
            ),
        ),
        (
            "probed",
            deployment(ns, "probed", json!({"containers": [web]})),
        ),
        (
            "crasher",
            deployment(
                ns,
                "crasher",
                json!({"containers": [glibc_sh("app", &crasher)]}),
            ),
        ),
        (
            "report",
            job(ns, "report", json!([glibc_sh("report", &report)])),
        ),
        (
            "meshed",
            deployment(
                ns,
                "meshed",
                json!({"initContainers": [proxy], "containers": [glibc_sh("app", meshed_app)]}),
            ),
        ),
        (
            "ctl",
            deployment(
                ns,
                "ctl",
                json!({"containers": [glibc("app", &["perl", "-e", CTL])]}),
            ),
        ),
    ]
}

/// An app that is its own control socket's server: it polls `/tmp/ctl.sock` 20 times
/// 100 ms apart (is another instance running?), then binds it and serves it.
const CTL: &str = r#"
use IO::Socket::UNIX;
$| = 1;
$SIG{TERM} = sub { exit 0 };
my $path = "/tmp/ctl.sock";
my $polls = 0;
for (1 .. 20) {
    if (IO::Socket::UNIX->new(Peer => $path)) { print "another instance serves $path\n"; exit 1 }
    $polls++;
    select(undef, undef, undef, 0.1);
}
unlink $path;
my $server = IO::Socket::UNIX->new(Local => $path, Listen => 5) or die "bind $path: $!";
print "polled $polls times, listening on $path\n";
while (my $c = $server->accept) { print $c "ok\n"; close $c }
"#;

/// Dials with `curl_args` every 100 ms while curl cannot connect (exit 7), counting,
/// prints `refused <n>`, then keeps a request a second going.
fn counting_client(curl_args: &str) -> String {
    format!(
        "n=0; while :; do curl -s -o /dev/null {curl_args}; rc=$?; [ \"$rc\" = 7 ] || break; \
         n=$((n+1)); sleep 0.1; done; echo \"refused $n\"; trap 'exit 0' TERM; \
         while :; do curl -s -o /dev/null {curl_args}; sleep 1; done"
    )
}

/// The TCP racing shape, Deployment `late-tcp`: a classic sidecar `proxy` in
/// `containers` listening on 127.0.0.1:15002 after 3 s; the `app` curls it.
pub fn late_tcp(ns: &str) -> String {
    let proxy = glibc_sh(
        "proxy",
        &format!("trap 'exit 0' TERM; sleep 3; {}", serve("127.0.0.1:15002")),
    );
    let app = glibc_sh("app", &counting_client("http://127.0.0.1:15002/index.html"));
    deployment(ns, "late-tcp", json!({"containers": [app, proxy]}))
}

/// A sidecar serving HTTP on `/sock/app.sock` after 3 s (perl).
const UDS_SIDECAR: &str = r#"
use IO::Socket::UNIX;
$SIG{TERM} = sub { exit 0 };
sleep 3;
my $path = "/sock/app.sock";
unlink $path;
my $server = IO::Socket::UNIX->new(Local => $path, Listen => 16) or die "bind $path: $!";
while (my $c = $server->accept) {
    sysread($c, my $request, 65536);
    print $c "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
    close $c;
}
"#;

/// The Unix-socket racing shape, Deployment `late-uds`: a classic sidecar `proxy`
/// binding `app.sock` on an emptyDir (at `/sock`) after 3 s; the `app` mounts the same
/// emptyDir at `/run/proxy` and curls the socket there.
pub fn late_uds(ns: &str) -> String {
    let mut proxy = glibc("proxy", &["perl", "-e", UDS_SIDECAR]);
    proxy["volumeMounts"] = json!([{"name": "sock", "mountPath": "/sock"}]);
    let mut app = glibc_sh(
        "app",
        &counting_client("--unix-socket /run/proxy/app.sock http://proxy/"),
    );
    app["volumeMounts"] = json!([{"name": "sock", "mountPath": "/run/proxy"}]);
    deployment(
        ns,
        "late-uds",
        json!({"containers": [app, proxy], "volumes": [{"name": "sock", "emptyDir": {}}]}),
    )
}
