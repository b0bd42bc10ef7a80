//! What the cluster tier's case files share: a namespace of their own per case, the
//! agent's incidents and series as the scraper's token reads them, `lint --fix` of a
//! manifest, and the refusals a gone pod's app counted in a host file.

use std::time::Duration;

use serde_json::Value;

use sidecar_race_kit::{
    agent::{agent_binary, incidents_at_as},
    cluster::{TestNamespace, cluster, wait_for, wait_until},
    http::get_as,
};

/// A namespace of this run (the agent's counters are per namespace and workload, so
/// a second run against the same cluster starts from zero too), deleted when the case
/// ends, passed or failed.
pub fn fresh_namespace(base: &str) -> TestNamespace {
    TestNamespace::create(format!("{base}-{}", std::process::id()))
}

/// Resolved, with the client container named (the kubelet pod source learns container
/// IDs from its next poll of /pods, up to --pods-poll-seconds after the race).
pub fn named_and_resolved(i: &Value) -> bool {
    i["state"] == "resolved" && i["container"].is_string()
}

/// The agent's incidents for one pod UID (read with the scraper's token: the
/// DaemonSet runs the agent with `--auth kubernetes`).
pub fn incidents_of(addr: &str, uid: &str) -> Vec<Value> {
    incidents_at_as(addr, "", Some(cluster().scraper_token()))
        .into_iter()
        .filter(|i| i["pod_uid"] == uid)
        .collect()
}

/// The first of the pod's incidents that `pred` accepts, waiting up to `timeout` for
/// it; a timeout shows the pod's incidents as they were.
pub fn wait_incident(
    addr: &str,
    uid: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(what, timeout, || {
        let all = incidents_of(addr, uid);
        match all.iter().find(|i| pred(i)) {
            Some(found) => Ok(found.clone()),
            None => Err(format!("the pod's incidents: {:#}", Value::Array(all))),
        }
    })
}

pub fn metrics(addr: &str) -> String {
    let (status, body) = get_as(addr, "/metrics", Some(cluster().scraper_token()))
        .expect("the agent's /metrics answers");
    assert_eq!(status, 200, "{body}");
    body
}

/// `sidecar-race-agent lint --fix` of `manifest` (for Kubernetes 1.34), parsed.
pub fn lint_fixed(manifest: &Value) -> Value {
    let file = std::env::temp_dir().join(format!("sr-corpus-{}.yaml", std::process::id()));
    std::fs::write(&file, manifest.to_string()).unwrap();
    let out = crate::tools::run(
        std::process::Command::new(agent_binary())
            .args(["lint", "--kube-version", "1.34", "--fix"])
            .arg(&file),
        None,
    );
    let _ = std::fs::remove_file(&file);
    serde_saphyr::from_str(&out).unwrap_or_else(|e| panic!("lint --fix output ({e}):\n{out}"))
}

/// The incident and refusal series of `/metrics` labelled with namespace `ns`.
pub fn namespace_series(addr: &str, ns: &str) -> Vec<String> {
    let label = format!("namespace=\"{ns}\"");
    metrics(addr)
        .lines()
        .filter(|l| {
            (l.starts_with("sidecar_race_incidents_total{")
                || l.starts_with("sidecar_race_refused_connections_total{"))
                && l.contains(&label)
        })
        .map(str::to_string)
        .collect()
}

/// The lines `pod` (in `ns`) wrote to the file named after it in the host directory
/// `evidence` (a hostPath it mounts; one line per refusal its app met), once the pod
/// is gone and the file complete.
pub fn lines_left_by(ns: &str, pod: &Value, evidence: &str) -> u64 {
    let c = cluster();
    let name = pod["metadata"]["name"].as_str().expect("a pod name");
    let file = std::path::Path::new(evidence).join(name);
    wait_until(&format!("{name}'s exit"), Duration::from_secs(60), || {
        let selector = format!("metadata.name={name}");
        let gone = c.json(&["-n", ns, "get", "pods", "--field-selector", &selector])["items"]
            .as_array()
            .is_some_and(|items| items.is_empty());
        gone.then(|| {
            std::fs::read_to_string(&file)
                .unwrap_or_default()
                .lines()
                .count() as u64
        })
    })
}

/// The position in `incident`'s `timeline` of the first entry `pred` accepts; a miss
/// fails with the timeline.
pub fn timeline_index(incident: &Value, what: &str, pred: impl Fn(&Value) -> bool) -> usize {
    let timeline = incident["timeline"].as_array().cloned().unwrap_or_default();
    timeline
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("no {what} in the timeline: {:#}", incident["timeline"]))
}

/// The entry of `kind` about `container`, as `timeline_index` finds it.
pub fn timeline_entry(incident: &Value, kind: &str, container: &str) -> usize {
    timeline_index(incident, &format!("{kind} of {container}"), |e| {
        e["kind"] == kind && e["container"] == container
    })
}

/// `incident`'s timeline is in time order (its RFC 3339 times all have nine digits,
/// so they sort as text) and its refusal entries count `refused` refusals in all
/// (a `dropped` entry's `refused` included): the client's own count.
pub fn check_timeline(incident: &Value, refused: u64) {
    let timeline = incident["timeline"]
        .as_array()
        .unwrap_or_else(|| panic!("no timeline: {incident:#}"));
    let times: Vec<&str> = timeline
        .iter()
        .map(|e| e["at"].as_str().expect("an entry's time"))
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "out of order: {timeline:#?}"
    );
    let counted: u64 = timeline
        .iter()
        .map(|e| match e["kind"].as_str() {
            Some("first_refusal" | "refusals" | "last_refusal") => e["count"].as_u64().unwrap(),
            Some("dropped") => e["refused"].as_u64().unwrap(),
            _ => 0,
        })
        .sum();
    assert_eq!(
        counted, refused,
        "the timeline's counts are the client's own: {timeline:#?}"
    );
    for e in timeline.iter().filter(|e| e["kind"] == "container_started") {
        assert!(
            e["source"] == "kernel" || e["source"] == "pod",
            "which source said so: {e:#}"
        );
    }
}
