//! `timeline POD` against the fake API server `report --agents-via-api` is tested with
//! (tests/common/fake_cluster.rs), through the binary as a user runs it: the pod gives
//! its node, the node its agent, read through the pod proxy; a pod that does not exist
//! and a node without an agent are one sentence each.

mod common;
#[path = "common/fake_cluster.rs"]
mod fake_cluster;

use std::{
    process::{Command, Output},
    sync::{Arc, Mutex},
};

use fake_cluster::fake_api_server;
use serde_json::Value;

type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// The binary with `args` against the fake at `KUBECONFIG`, and what the fake saw.
async fn timeline(args: &[&str]) -> (Output, Vec<(String, String)>) {
    let seen: Seen = Arc::default();
    let addr = fake_api_server(seen.clone()).await;
    let config = common::kubeconfig_for(addr, &format!("timeline-{}", args[0]));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sidecar-race-agent"));
    cmd.arg("timeline").args(args).env("KUBECONFIG", &config);
    for var in [
        "SIDECAR_RACE_AGENT_TOKEN_FILE",
        "SIDECAR_RACE_TIMELINE_FORMAT",
    ] {
        cmd.env_remove(var);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let _ = std::fs::remove_file(&config);
    let seen = seen.lock().unwrap().clone();
    (out, seen)
}

/// The pod's node's agent (agent-a on node-a) is asked, through the pod proxy, for the
/// pod's namespace, with the scraper's token; its incidents of the pod's UID are
/// printed, each entry on a line of its own in the agent's order.
#[tokio::test(flavor = "multi_thread")]
async fn the_pods_node_agent_is_asked_and_its_timeline_printed() {
    let (out, seen) = timeline(&["checkout-1", "-n", "shop"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let proxied: Vec<&str> = seen
        .iter()
        .filter(|(_, p)| p.contains("/proxy/"))
        .map(|(_, p)| p.as_str())
        .collect();
    assert_eq!(
        proxied,
        [
            "/api/v1/namespaces/sidecar-race/pods/agent-a:9965/proxy/api/v1/incidents?namespace=shop&limit=10000 token=scraper-token"
        ],
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|(m, p)| m == "GET" && p == "/api/v1/namespaces/shop/pods/checkout-1"),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|(_, p)| p.contains("fieldSelector=spec.nodeName%3Dnode-a")),
        "{seen:?}"
    );
    let expected = "\
pod shop/checkout-1 (uid uid-checkout-1) on node node-a, agent sidecar-race/agent-a: 1 incident

incident 1  startup  resolved  sidecar_race  app → istio-proxy  port 15001 (tcp)  12 refusals
    +0.000s  2026-11-29T16:59:59.880000000Z  container started  app          source kernel
    +0.120s  2026-11-29T17:00:00.000000000Z  first refusal      app          1 refusal
    +0.420s  2026-11-29T17:00:00.300000000Z  container started  istio-proxy  source pod
    +1.520s  2026-11-29T17:00:01.400000000Z  last refusal       app          11 refusals
    +1.620s  2026-11-29T17:00:01.500000000Z  listening          istio-proxy
    +1.740s  2026-11-29T17:00:01.620000000Z  ready              istio-proxy  true
";
    assert_eq!(stdout, expected);
}

/// `--format json`: the incidents as the agent's API gave them, timelines included.
#[tokio::test(flavor = "multi_thread")]
async fn json_is_the_incidents_as_the_api_gave_them() {
    let (out, _) = timeline(&["checkout-1", "-n", "shop", "--format", "json"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["node"], "node-a");
    assert_eq!(v["agent"], "sidecar-race/agent-a");
    let incidents = v["incidents"].as_array().unwrap();
    assert_eq!(
        incidents.len(),
        1,
        "the earlier pod's incident is left out: {v}"
    );
    assert_eq!(incidents[0]["pod_uid"], "uid-checkout-1");
    assert_eq!(incidents[0]["timeline"][1]["kind"], "first_refusal");
    assert_eq!(incidents[0]["timeline"].as_array().unwrap().len(), 6);
}

/// A pod the API server does not have: one sentence, exit 1, no agent asked.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_that_does_not_exist_is_one_sentence() {
    let (out, seen) = timeline(&["gone", "-n", "shop"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("pod shop/gone does not exist (deleted, or never made)"),
        "{stderr}"
    );
    assert!(!seen.iter().any(|(_, p)| p.contains("/proxy/")), "{seen:?}");
    assert!(out.stdout.is_empty());
}

/// A pod on a node where no agent runs: one sentence naming the node.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_without_an_agent_is_named() {
    let (out, _) = timeline(&["lonely", "-n", "shop"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no sidecar-race agent is running on node node-z"),
        "{stderr}"
    );
}

/// An API server nobody answers: one sentence saying so.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_api_server_is_one_sentence() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = common::kubeconfig_for(port, "timeline-down");
    let out = Command::new(env!("CARGO_BIN_EXE_sidecar-race-agent"))
        .args(["timeline", "web-0", "-n", "shop"])
        .env("KUBECONFIG", &config)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&config);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot reach the API server"), "{stderr}");
}
