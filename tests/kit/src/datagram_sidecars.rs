//! Datagram sidecars as users run them, for the cluster tier's datagram cases
//! (tests/tests/cluster_datagrams.rs): the Prometheus statsd exporter (built by `cargo
//! xtask setup` from its Go module, in an image made as `prom/statsd-exporter` is) on
//! UDP 9125, and a syslog relay on a Unix datagram socket in an emptyDir (Debian's
//! socat in the glibc image, printing what it receives, as log sidecars do). Each is a
//! classic sidecar after its app; each app is a `counting_app` of `real_sidecars`,
//! which counts what it lost at start and at the drain.
//!
//! Nothing is added to either side's own code to make it late: the app's `postStart`
//! sleep of 2 s holds the kubelet's start of the next container, as a real node's pull
//! of the sidecar's image does (no image is pulled here).

use serde_json::{Value, json};

use crate::{
    glibc_fleet::glibc,
    real_sidecars::{counting_app, evidence_volume},
    stand_in::deployment,
};

use sidecar_race_testbed::images::STATSD_EXPORTER as STATSD_EXPORTER_IMAGE;

/// The exporter's container, as its chart names it.
pub const STATSD_EXPORTER: &str = "statsd-exporter";
/// The Unix datagram log relay's container.
pub const LOG_RELAY: &str = "log-relay";
/// The exporter's statsd port (UDP), declared `protocol: UDP` as its chart does.
pub const STATSD_PORT: u16 = 9125;
/// The counter the app increments, as the exporter names it in its /metrics.
pub const CHECKOUTS: &str = "shop_checkouts";

/// One statsd line through a connected UDP socket, as most statsd clients (Go's
/// `net.Dial("udp")`, DogStatsD's) send: the port unreachable the kernel answers a
/// datagram nobody receives comes back on loopback at once, as `ECONNREFUSED` in the
/// socket's `SO_ERROR`, so the app knows each datagram it lost without sending another
/// (10 ms covers a softirq deferred to ksoftirqd). Exit 1: lost.
const SEND_LINE: &str = "use IO::Socket::INET; use Socket qw(SOL_SOCKET SO_ERROR); \
    my $s = IO::Socket::INET->new(PeerAddr => \"$ENV{STATSD_HOST}:$ENV{STATSD_PORT}\", Proto => \"udp\") or die \"socket: $!\"; \
    send($s, \"shop_checkouts:1|c\", 0) or die \"send: $!\"; \
    select(undef, undef, undef, 0.01); \
    my $err = unpack(\"i\", getsockopt($s, SOL_SOCKET, SO_ERROR)); \
    if ($err) { $! = $err; print \"lost: $!\\n\"; exit 1 }";

/// What the app prints once the exporter took a line: `sent <n>` (its lost lines and
/// the one taken) and, a second later (past the exporter's 200 ms event flush), the
/// exporter's own counters of what arrived: the app's counter and its UDP packets.
const EXPORTER_COUNTS: &str = "sleep 1; echo \"sent $((n+1))\"; \
    curl -s 127.0.0.1:9102/metrics | grep -E '^(shop_checkouts|statsd_exporter_udp_packets_total)';";

/// The app's `postStart` sleep: the kubelet starts the next container, the sidecar,
/// only after it.
fn held(app: &mut Value) {
    app["lifecycle"]["postStart"] = json!({"sleep": {"seconds": 2}});
}

/// Deployment `name` in `ns`: the app incrementing its statsd counter through the
/// exporter on `STATSD_HOST=127.0.0.1`, `STATSD_PORT=9125`, and the exporter as a
/// classic sidecar after it with its ports as its chart declares them. The app's
/// evidence of lost lines after its start goes to the host directory `evidence`.
pub fn metrics_app(ns: &str, name: &str, evidence: &str) -> Value {
    let mut app = counting_app(
        &format!("printf '%s\\n' '{SEND_LINE}' > /tmp/statsd.pl;"),
        "perl /tmp/statsd.pl",
        "[ $rc = 1 ]",
        EXPORTER_COUNTS,
    );
    held(&mut app);
    app["env"] = json!([
        {"name": "STATSD_HOST", "value": "127.0.0.1"},
        {"name": "STATSD_PORT", "value": STATSD_PORT.to_string()},
    ]);
    app["volumeMounts"] = json!([{"name": "evidence", "mountPath": "/evidence"}]);
    let exporter = json!({
        "name": STATSD_EXPORTER, "image": STATSD_EXPORTER_IMAGE.reference,
        "imagePullPolicy": "Never",
        "ports": [
            {"name": "statsd-udp", "containerPort": STATSD_PORT, "protocol": "UDP"},
            {"name": "metrics", "containerPort": 9102},
        ],
    });
    let spec = json!({
        "containers": [app, exporter],
        "terminationGracePeriodSeconds": 10,
        "volumes": [evidence_volume(evidence)],
    });
    serde_json::from_str(&deployment(ns, name, spec)).expect("a Deployment")
}

/// One syslog line to the relay's socket with util-linux's logger: a datagram socket
/// only (`-d`: no stream fallback, so one connect per line), its failure an exit
/// status (1) rather than a line on stderr. By its path: the image's busybox shell
/// runs its own `logger` applet for the bare name.
const LOG_LINE: &str =
    "/usr/bin/logger -d -u /var/run/log/dev-log --socket-errors=on -t shop checkout";

/// Deployment `name` in `ns`: the app logging to `/var/run/log/dev-log`, and the relay
/// as a classic sidecar after it, binding `dev-log` in the emptyDir `log` (mounted at
/// another path in it) and printing each line it receives. The app's evidence of lines
/// refused after its start goes to the host directory `evidence`.
pub fn logging_app(ns: &str, name: &str, evidence: &str) -> Value {
    let mut app = counting_app("", LOG_LINE, "[ $rc = 1 ]", "");
    held(&mut app);
    app["volumeMounts"] = json!([
        {"name": "log", "mountPath": "/var/run/log"},
        {"name": "evidence", "mountPath": "/evidence"},
    ]);
    let mut relay = glibc(
        LOG_RELAY,
        &[
            "socat",
            "-u",
            "UNIX-RECV:/sockets/dev-log,mode=0666",
            "STDOUT",
        ],
    );
    relay["volumeMounts"] = json!([{"name": "log", "mountPath": "/sockets"}]);
    let spec = json!({
        "containers": [app, relay],
        "terminationGracePeriodSeconds": 10,
        "volumes": [{"name": "log", "emptyDir": {}}, evidence_volume(evidence)],
    });
    let mut d: Value = serde_json::from_str(&deployment(ns, name, spec)).expect("a Deployment");
    // No catalog knows a socat relay as a sidecar: its user names it, as the agent's
    // advice says, or the race reads as an app not ready.
    d["spec"]["template"]["metadata"]["annotations"] =
        json!({"sidecar-race.io/sidecars": LOG_RELAY});
    d
}

/// The value of `metric` in what the app printed of the exporter's /metrics.
pub fn exporter_counted(app_log: &str, metric: &str) -> Option<u64> {
    app_log.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == metric || name == format!("{metric}_total"))
            .then(|| value.trim().parse::<f64>().ok())
            .flatten()
            .map(|v| v as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exporters_counters_are_read_from_the_apps_log() {
        let log = "refused 31\nsent 32\nshop_checkouts 1\nstatsd_exporter_udp_packets_total 1\n";
        assert_eq!(exporter_counted(log, CHECKOUTS), Some(1));
        assert_eq!(
            exporter_counted(log, "statsd_exporter_udp_packets_total"),
            Some(1)
        );
        assert_eq!(
            exporter_counted("shop_checkouts_total 4\n", CHECKOUTS),
            Some(4)
        );
        assert_eq!(exporter_counted(log, "absent"), None);
    }

    #[test]
    fn the_perl_sender_has_no_single_quote_the_shell_would_end_on() {
        assert!(!SEND_LINE.contains('\''));
    }
}
