//! Migration verification (#51 item 3) on real Prometheus data: the agent binary, a
//! real Prometheus scraping it every second, and two rollouts of each of two
//! Deployments on simulated pods. A rollout is new pods with a new `pod-template-hash`
//! and a later `creationTimestamp`, as a Deployment's new ReplicaSet makes them.
//!
//! - `checkout` races on its first template (a classic proxy listening late), and its
//!   second serves first (the migration worked): `report` must say `fixed`, with the
//!   racing starts before the change and the clean ones after.
//! - `ledger` races on its first template too, and its second makes the proxy a
//!   native sidecar without a startupProbe, still listening late: `report` must say
//!   `still racing`, naming the pattern (`native`) and the fix (a startupProbe).
//!
//! The split is evaluated by Prometheus at the change's instant, so a report that
//! ignored the template (or dated it from the wrong rollout) puts the first rollout's
//! races after the change and says `still racing` for checkout.

use std::{path::Path, process::Command, thread::sleep, time::Duration};

use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::RunAgent,
    http::free_port,
    pod::{Decl, Declared, SimPod, empty_pods_file, write_pod_list},
    prometheus::{Prometheus, report},
    root::is_root_or_skip,
    scenario::{app_done, proxy, proxy_serving},
};

const TEMPLATE_1: &str = "5f7b8c9d6";
const TEMPLATE_2: &str = "7c9d4f6b8";

/// Now, RFC 3339, as the API server stamps `creationTimestamp`.
fn now_rfc3339() -> String {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128;
    sidecar_race_agent::clock::rfc3339_nanos(ns)
}

/// The pod's manifest made a pod of `template`, created now.
fn of_template(mut m: Value, deployment: &str, template: &str, uid: &str) -> Value {
    let meta = &mut m["metadata"];
    meta["name"] = json!(format!("{deployment}-{template}-{}", &uid[..5]));
    meta["labels"]["pod-template-hash"] = json!(template);
    meta["ownerReferences"][0]["name"] = json!(format!("{deployment}-{template}"));
    meta["creationTimestamp"] = json!(now_rfc3339());
    m
}

/// How a rollout's pods start.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// A classic proxy (in `containers`) listening 1 s late: a startup race.
    ClassicLate,
    /// The proxy serving before the app dials: what a probed native sidecar gives.
    Ordered,
    /// A native sidecar without a startupProbe, still listening 1 s late.
    NativeLate,
}

/// One pod of `deployment`'s `template`, started as `shape` says, its manifest added to
/// the pods file first.
fn start_pod(
    ns: &str,
    deployment: &str,
    template: &str,
    shape: Shape,
    pods_file: &Path,
    manifests: &mut Vec<Value>,
) -> SimPod {
    let mut pod = SimPod::new(deployment).unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let declared = match shape {
        Shape::NativeLate => Declared::NativeSidecar,
        Shape::ClassicLate | Shape::Ordered => Declared::App,
    };
    let m = pod.manifest(
        ns,
        Some(deployment),
        &[
            Decl {
                container: &a,
                declared: Declared::App,
                ports: &[8080],
                with_status: true,
            },
            Decl {
                container: &p,
                declared,
                ports: &[15001],
                with_status: true,
            },
        ],
    );
    manifests.push(of_template(m, deployment, template, &pod.uid));
    write_pod_list(pods_file, manifests);
    match shape {
        Shape::Ordered => {
            proxy_serving(&mut pod, &p, 15001);
        }
        Shape::ClassicLate | Shape::NativeLate => {
            proxy(
                &mut pod,
                &p,
                &["--listen", "127.0.0.1:15001", "--delay-ms", "1000"],
            );
        }
    }
    app_done(
        &mut pod,
        &a,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "100"],
    );
    pod
}

/// Starts `n` pods of a rollout one after the other; a racing one is waited for until
/// its startup incident is resolved.
#[allow(clippy::too_many_arguments)]
fn rollout(
    agent: &RunAgent,
    (ns, deployment): (&str, &str),
    template: &str,
    shape: Shape,
    n: usize,
    pods_file: &Path,
    manifests: &mut Vec<Value>,
    running: &mut Vec<SimPod>,
) {
    for _ in 0..n {
        let pod = start_pod(ns, deployment, template, shape, pods_file, manifests);
        if shape != Shape::Ordered {
            let incidents = agent.wait_incidents(&pod.uid, Duration::from_secs(15), |i| {
                i.iter()
                    .any(|i| i["phase"] == "startup" && i["state"] == "resolved")
            });
            let want = if shape == Shape::NativeLate {
                "native"
            } else {
                "classic"
            };
            assert!(
                incidents.iter().any(|i| i["pattern"] == want),
                "{deployment}: {incidents:#?}"
            );
        }
        running.push(pod);
    }
}

#[test]
fn report_says_fixed_for_the_migration_that_worked_and_still_racing_for_the_one_that_did_not() {
    if !is_root_or_skip("report_says_fixed_for_the_migration_that_worked") {
        return;
    }
    let agent_addr = format!("127.0.0.1:{}", free_port());
    let dir = Prometheus::fresh_dir("-migration");
    std::fs::write(
        dir.join("prometheus.yml"),
        json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{
                "job_name": "sidecar-race-agent",
                "honor_labels": true,
                "static_configs": [{"targets": [agent_addr]}],
            }],
        })
        .to_string(),
    )
    .unwrap();
    let prom = Prometheus::launch(dir, Command::new("prometheus"));
    let (pods_file, source) = empty_pods_file("migration");
    let agent = RunAgent::start_at(
        &agent_addr,
        &["--pods-from", &source, "--pods-poll-seconds", "0.1"],
    );
    let (mut manifests, mut running) = (Vec::new(), Vec::new());
    let (checkout, ledger) = (("shop", "checkout"), ("payments", "ledger"));
    let t = Duration::from_secs(30);
    let counted = |w: (&str, &str), starts: u64, affected: u64| {
        let sel = format!(r#"namespace="{}",workload="{}""#, w.0, w.1);
        prom.wait_value(
            &format!("sum(sidecar_race_pod_starts_total{{{sel}}})"),
            starts as f64,
            t,
        );
        prom.wait_value(
            &format!("sum(sidecar_race_affected_pod_starts_total{{{sel}}})"),
            affected as f64,
            t,
        );
    };

    // First rollout of each: a classic proxy, racing.
    for w in [checkout, ledger] {
        rollout(
            &agent,
            w,
            TEMPLATE_1,
            Shape::ClassicLate,
            2,
            &pods_file,
            &mut manifests,
            &mut running,
        );
    }
    counted(checkout, 2, 2);
    counted(ledger, 2, 2);
    // Scraped before the second template's first pod is made.
    sleep(Duration::from_secs(2));

    // Second rollout: checkout fixed, ledger a native sidecar without a probe.
    rollout(
        &agent,
        checkout,
        TEMPLATE_2,
        Shape::Ordered,
        3,
        &pods_file,
        &mut manifests,
        &mut running,
    );
    rollout(
        &agent,
        ledger,
        TEMPLATE_2,
        Shape::NativeLate,
        2,
        &pods_file,
        &mut manifests,
        &mut running,
    );
    counted(checkout, 5, 2);
    counted(ledger, 4, 4);
    prom.wait_value(
        r#"count(sidecar_race_pod_template_created_timestamp_seconds{namespace=~"shop|payments"})"#,
        4.0,
        t,
    );
    sleep(Duration::from_secs(2));

    let url = format!("http://{}", prom.addr);
    let out = report(
        &url,
        &["--format", "json", "--min-starts-since-change", "3"],
    );
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("({e}) {out}"));
    eprintln!("report: {v:#}");
    let line = |name: &str| {
        v["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["workload"] == name)
            .unwrap_or_else(|| panic!("no {name}: {v:#}"))
            .clone()
    };
    let split = |m: &Value| {
        (
            m["before"]["starts"].as_u64(),
            m["before"]["affected_starts"].as_u64(),
            m["after"]["starts"].as_u64(),
            m["after"]["affected_starts"].as_u64(),
        )
    };

    let c = &line("checkout")["migration"];
    assert_eq!(c["template"], TEMPLATE_2, "{c:#}");
    assert_eq!(c["templates_in_range"], 2, "{c:#}");
    assert_eq!(
        split(c),
        (Some(2), Some(2), Some(3), Some(0)),
        "checkout before (starts, affected), after (starts, affected): {c:#}"
    );
    assert_eq!(c["before"]["race_windows"], 2, "{c:#}");
    assert_eq!(c["after"]["race_windows"], 0, "{c:#}");
    assert_eq!(c["verdict"], "fixed", "{c:#}");
    assert_eq!(c["min_starts_since_change"], 3, "{c:#}");

    let l = &line("ledger")["migration"];
    assert_eq!(
        split(l),
        (Some(2), Some(2), Some(2), Some(2)),
        "ledger: {l:#}"
    );
    assert_eq!(l["verdict"], "still_racing", "{l:#}");
    assert_eq!(l["pattern"], "native", "{l:#}");
    assert_eq!(l["sidecar"], "proxy", "{l:#}");
    assert_eq!(l["phases"], json!(["startup"]), "{l:#}");
    let advice = l["advice"].as_str().unwrap_or_default();
    assert!(advice.contains("startupProbe"), "{l:#}");

    // A person reads the same in the table.
    let text = report(&url, &["--min-starts-since-change", "3"]);
    eprintln!("{text}");
    assert!(text.contains("VERDICT"), "{text}");
    assert!(
        text.lines().any(|l| l.contains("Deployment shop/checkout")
            && l.contains(&format!("template {TEMPLATE_2} since"))
            && l.ends_with("→ fixed (no race in at least 3 starts)")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("Deployment payments/ledger")
                && l.contains("since: 2 of 2 starts affected")
                && l.contains(
                    "→ still racing: a native sidecar without a startupProbe (proxy, startup)"
                )),
        "{text}"
    );
    // And the html page: a verdict per workload article, the same sentence.
    let html = report(
        &url,
        &["--format", "html", "--min-starts-since-change", "3"],
    );
    for (workload, verdict) in [
        ("Deployment shop/checkout", "fixed"),
        ("Deployment payments/ledger", "still_racing"),
    ] {
        let article = html
            .split("<article ")
            .skip(1)
            .find(|a| a.contains(&format!(r#"data-workload="{workload}""#)))
            .unwrap_or_else(|| panic!("no article for {workload}: {html}"));
        assert!(
            article.contains(&format!(
                r#"<p class="migration" data-verdict="{verdict}">"#
            )),
            "{workload}: {article}"
        );
    }
    assert!(
        html.contains("→ still racing: a native sidecar without a startupProbe (proxy, startup)"),
        "{html}"
    );
    // With the default threshold (30), three clean starts are not enough yet.
    let strict = report(&url, &["--format", "json"]);
    let strict: Value = serde_json::from_str(&strict).unwrap();
    let checkout_strict = strict["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["workload"] == "checkout")
        .unwrap();
    assert_eq!(
        checkout_strict["migration"]["verdict"], "not_enough_starts",
        "{checkout_strict:#}"
    );

    agent.stop();
    drop(running);
    let _ = std::fs::remove_file(pods_file);
}
