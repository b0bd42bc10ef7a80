//! `report --format html` in a real browser (issue #51): a real agent watches
//! Deployments' simulated pods race (the federation test's workloads and helpers,
//! `scenario::race_workloads`), Debian's Prometheus scrapes it as the Prometheus
//! Operator scrapes the shipped PodMonitor, and `report --prometheus … --agent …
//! --manifests … --with-patches --format html` writes the page: Prometheus ranks, the
//! agent's incidents are drawn. Debian's headless chromium renders it with its
//! network closed (host names unresolvable, every fetch sent to a proxy that is the
//! test's own listener; the browser's calls to its own services are told apart by
//! host, `browser::BROWSER_OWN`), and the DOM it built must show the workloads in the JSON
//! report's rank order, each drawn incident as one swimlane per container, and on the
//! app's lane refusal marks adding up to the incident's `refused_count` as the agent's
//! API gives it. The page must point at nothing off itself and the browser must have
//! tried no connection; the same browser given a page with one external image does
//! try one, so the trap is known to catch. The page and its screenshot are kept in
//! `target/report-html/` (the CI artifact; docs/report-html.png is one of them).

use std::{collections::BTreeMap, time::Duration};

use serde_json::Value;
use sidecar_race_tests::{
    agent::RunAgent,
    browser::{Chromium, Element, elements, host, off_page_references},
    operator::{DiscoveredPod, pod_monitor_scrape_config},
    pod::empty_pods_file,
    prometheus::{Prometheus, report},
    root::is_root_or_skip,
    scenario::{Counted, Workload, race_workloads},
    tools::workspace,
};

/// Checkout races three of its four starts, ledger its one: checkout ranks first.
const WORKLOADS: [Workload; 2] = [
    Workload {
        namespace: "shop",
        deployment: "checkout",
        racing: 3,
        ordered: 1,
        delay_ms: 1200,
    },
    Workload {
        namespace: "payments",
        deployment: "ledger",
        racing: 1,
        ordered: 0,
        delay_ms: 700,
    },
];

fn yaml(path: &str) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(workspace().join(path)).unwrap())
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The workloads as their Deployments, for `--manifests`: the proxy a classic sidecar
/// serving 15001, as the simulated pods declare it.
fn deployments() -> String {
    WORKLOADS
        .iter()
        .map(|w| {
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
                 spec:\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      \
                 labels:\n        app: {name}\n    spec:\n      containers:\n      - name: app\n        \
                 image: app:1\n        ports:\n        - containerPort: 8080\n      - name: proxy\n        \
                 image: proxy:1\n        ports:\n        - containerPort: 15001\n",
                name = w.deployment,
                ns = w.namespace,
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// `Deployment ns/name`, as the page's hooks name a workload.
fn hook_name(w: &Workload) -> String {
    format!("Deployment {}/{}", w.namespace, w.deployment)
}

/// The elements after `from` up to the next element of tag `until` (a lane's marks).
fn until_next<'a>(all: &'a [Element], from: usize, until: &str) -> &'a [Element] {
    let rest = &all[from + 1..];
    let end = rest
        .iter()
        .position(|e| e.tag == until)
        .unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn the_html_report_renders_in_headless_chromium_without_the_network() {
    if !is_root_or_skip("the_html_report_renders_in_headless_chromium_without_the_network") {
        return;
    }
    let artifacts = workspace().join("target/report-html");
    std::fs::create_dir_all(&artifacts).unwrap();
    let (pods_file, source) = empty_pods_file("report-html");
    let agent = RunAgent::start(&["--pods-from", &source, "--pods-poll-seconds", "0.1"]);
    let scrape = pod_monitor_scrape_config(
        &yaml("deploy/monitoring/podmonitor.yaml"),
        &yaml("deploy/base/daemonset.yaml"),
        &DiscoveredPod {
            address: &agent.addr,
            pod_name: "sidecar-race-agent-h7m2x",
            node_name: "sim-node",
        },
        0,
        "1s",
    );
    let prom = Prometheus::start(&scrape);
    let (counted, _running) = race_workloads(&agent, &WORKLOADS, &pods_file);
    let t = Duration::from_secs(30);
    for ((ns, workload), c) in &counted {
        let series = format!(r#"namespace="{ns}",workload="{workload}""#);
        prom.wait_value(
            &format!("sum(sidecar_race_pod_starts_total{{{series}}})"),
            c.starts as f64,
            t,
        );
        prom.wait_value(
            &format!("sum(sidecar_race_affected_pod_starts_total{{{series}}})"),
            c.racing as f64,
            t,
        );
    }
    let of = |w: &Workload| -> &Counted { &counted[&(w.namespace.into(), w.deployment.into())] };

    let manifests = artifacts.join("deployments.yaml");
    std::fs::write(&manifests, deployments()).unwrap();
    let url = format!("http://{}", prom.addr);
    let agent_url = format!("http://{}", agent.addr);
    let manifests_arg = manifests.display().to_string();
    let page = report(
        &url,
        &[
            "--agent",
            &agent_url,
            "--manifests",
            &manifests_arg,
            "--with-patches",
            "--sidecar-names",
            "proxy",
            "--format",
            "html",
        ],
    );
    let json: Value = serde_json::from_str(&report(&url, &["--format", "json"])).unwrap();
    let page_path = artifacts.join("report.html");
    std::fs::write(&page_path, &page).unwrap();
    assert_eq!(
        off_page_references(&page),
        Vec::<String>::new(),
        "the page points off itself"
    );

    let chromium = Chromium::new();
    let dom = chromium.dump_dom(&page_path);
    let png = artifacts.join("report.png");
    chromium.screenshot(&page_path, &png, 1280, 2400);
    eprintln!(
        "the browser's own connections, to its services: {:?}",
        chromium.trap.connections()
    );
    assert_eq!(
        chromium.trap.page_fetches(),
        Vec::<String>::new(),
        "chromium tried to fetch for the page"
    );
    let all = elements(&dom);

    // The workloads in the JSON report's rank order, in the table and the articles.
    let ours = |w: &&Value| w["namespace"] == "shop" || w["namespace"] == "payments";
    let ranked: Vec<(String, String)> = json["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(ours)
        .map(|w| {
            (
                w["rank"].to_string(),
                format!(
                    "Deployment {}/{}",
                    w["namespace"].as_str().unwrap(),
                    w["workload"].as_str().unwrap()
                ),
            )
        })
        .collect();
    assert_eq!(
        ranked.iter().map(|(_, n)| n.clone()).collect::<Vec<_>>(),
        WORKLOADS.iter().map(hook_name).collect::<Vec<_>>(),
        "checkout raced more starts: {json:#}"
    );
    for tag in ["tr", "article"] {
        let drawn: Vec<(String, String)> = all
            .iter()
            .filter(|e| e.tag == tag && e.attr("data-rank").is_some())
            .map(|e| {
                (
                    e.attr("data-rank").unwrap().to_string(),
                    e.attr("data-workload").unwrap().to_string(),
                )
            })
            .filter(|(_, n)| WORKLOADS.iter().any(|w| &hook_name(w) == n))
            .collect();
        assert_eq!(drawn, ranked, "the {tag}s' ranks and workloads");
    }

    let incidents_by_id: BTreeMap<u64, &Value> = counted
        .values()
        .flat_map(|c| &c.incidents)
        .map(|i| (i["id"].as_u64().unwrap(), i))
        .collect();
    for w in &WORKLOADS {
        let name = hook_name(w);
        let article = all
            .iter()
            .position(|e| e.tag == "article" && e.attr("data-workload") == Some(name.as_str()))
            .unwrap_or_else(|| panic!("no article for {name}"));
        let inside = until_next(&all, article, "article");
        let chart = |kind: &str| {
            inside
                .iter()
                .find(|e| e.attr("data-chart") == Some(kind))
                .unwrap_or_else(|| panic!("{name}: no {kind} chart"))
        };
        // Prometheus' starts and affected starts; one dot per incident of the agent.
        let c = of(w);
        assert_eq!(
            chart("share").attr("data-affected"),
            Some(c.racing.to_string().as_str())
        );
        assert_eq!(
            chart("share").attr("data-starts"),
            Some(c.starts.to_string().as_str())
        );
        assert_eq!(
            chart("race-windows").attr("data-points"),
            Some(c.racing.to_string().as_str()),
            "{name}"
        );
        let patch = inside
            .iter()
            .find(|e| e.attr("data-patch").is_some())
            .unwrap_or_else(|| panic!("{name}: no patch"));
        let patch_text = &dom[patch.at..];
        assert!(
            patch_text[..patch_text.find("</pre>").unwrap()].contains("restartPolicy: Always"),
            "{name}: {patch_text:.600}"
        );
        // The top incidents: each a lane per container, the refusals on the app's.
        let figures: Vec<usize> = inside
            .iter()
            .filter(|e| e.tag == "figure" && e.attr("data-incident").is_some())
            .map(|e| all.iter().position(|a| a.at == e.at).unwrap())
            .collect();
        assert_eq!(figures.len() as u64, c.racing.min(3), "{name}");
        for f in figures {
            let id: u64 = all[f].attr("data-incident").unwrap().parse().unwrap();
            let api = incidents_by_id[&id];
            let refused = api["refused_count"].as_u64().unwrap();
            assert_eq!(
                all[f].attr("data-refusals"),
                Some(refused.to_string().as_str())
            );
            let figure = until_next(&all, f, "figure");
            let lanes: Vec<(&str, &str)> = figure
                .iter()
                .filter(|e| e.attr("data-lane").is_some())
                .map(|e| {
                    (
                        e.attr("data-lane").unwrap(),
                        e.attr("data-container").unwrap(),
                    )
                })
                .collect();
            assert_eq!(
                lanes,
                [("app", "app"), ("sidecar", "proxy")],
                "incident {id}: one lane per container"
            );
            let app = figure
                .iter()
                .position(|e| e.attr("data-lane") == Some("app"))
                .unwrap();
            assert_eq!(
                figure[app].attr("data-refusals"),
                Some(refused.to_string().as_str()),
                "incident {id}"
            );
            let marks: u64 = until_next(figure, app, "g")
                .iter()
                .filter(|e| e.attr("data-mark") == Some("refusal"))
                .map(|e| e.attr("data-count").unwrap().parse::<u64>().unwrap())
                .sum();
            assert_eq!(
                marks, refused,
                "incident {id}: the app lane's refusal marks"
            );
        }
    }
    eprintln!(
        "page {} ({} bytes), screenshot {}",
        page_path.display(),
        page.len(),
        png.display()
    );

    // The trap catches: the same browser, given a page with one external image, tries
    // to fetch it.
    let leaky = artifacts.join("leaky.html");
    std::fs::write(
        &leaky,
        r#"<!DOCTYPE html><html><body><img src="http://example.com/pixel.png"></body></html>"#,
    )
    .unwrap();
    assert_eq!(
        off_page_references(&std::fs::read_to_string(&leaky).unwrap()),
        ["http://example.com/pixel.png"]
    );
    chromium.dump_dom(&leaky);
    let tried = chromium.trap.page_fetches();
    assert!(
        tried
            .iter()
            .any(|l| host(l).as_deref() == Some("example.com")),
        "the trap saw no fetch of the external image: {tried:?}"
    );
    std::fs::remove_file(&leaky).unwrap();
    drop(agent);
    std::fs::remove_file(pods_file).unwrap();
}
