//! Busybox stand-ins for the cluster's pods (`sr-test.local/busybox:1`, which `cargo
//! xtask cluster up` imports): a dialing app, a sidecar that listens at once or late,
//! and the Deployment that holds them. Busybox's `wget` crashes in that image; `nc`
//! works, so both sides use it.

use serde_json::{Value, json};

use crate::cluster::BUSYBOX_IMAGE;

/// A busybox container running `script`.
pub fn shell(name: &str, script: &str) -> Value {
    json!({
        "name": name, "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", script],
    })
}

/// A Deployment of one pod with `spec`'s containers (and init containers).
pub fn deployment(ns: &str, name: &str, pod_spec: Value) -> String {
    let mut spec = pod_spec;
    if spec["terminationGracePeriodSeconds"].is_null() {
        spec["terminationGracePeriodSeconds"] = json!(5);
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    })
    .to_string()
}

/// Dials 127.0.0.1:`port` every 100 ms until it answers, counting the refusals, prints
/// `refused <n>`, then keeps a request a second going.
pub fn dialer(port: u16) -> String {
    format!(
        "n=0; until nc -w 1 127.0.0.1 {port} </dev/null >/dev/null 2>&1; do n=$((n+1)); sleep 0.1; done; \
         echo \"refused $n\"; while :; do nc -w 1 127.0.0.1 {port} </dev/null >/dev/null 2>&1; sleep 1; done"
    )
}

/// How late a stand-in sidecar starts to listen, in seconds. The kubelet starts the
/// app of a native sidecar only once a later sync sees the sidecar running, which
/// took about 1.7 s on a busy CI node (3 dials in a 2 s window): 4 s still leaves
/// the app a race window of 2 s or more, dials 100 ms apart, whatever the declaration.
pub const LATE_S: u32 = 4;

/// Starts, in the background, a listener on `port` that accepts every connection.
pub fn listen(port: u16) -> String {
    format!("nc -ll -p {port} -e /bin/true & ")
}

/// Listens on `port` at once; exits at once on SIGTERM.
pub fn listener(port: u16) -> String {
    format!("trap 'exit 0' TERM; {}wait", listen(port))
}

/// Listens on `port` after `LATE_S` seconds; exits at once on SIGTERM.
pub fn late_listener(port: u16) -> String {
    late_listener_after(port, LATE_S)
}

/// Listens on `port` after `seconds`; exits at once on SIGTERM.
pub fn late_listener_after(port: u16, seconds: u32) -> String {
    format!("trap 'exit 0' TERM; sleep {seconds}; {}wait", listen(port))
}
