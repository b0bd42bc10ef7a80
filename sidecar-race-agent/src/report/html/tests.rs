use super::*;
use crate::{
    detect::{Kind, Phase},
    pods::pod_info::Pattern,
    report::{SidecarReport, agents::WorkloadRef, fixes::Fix, fleet::Source, rows::PatchRow},
};

fn line(rank: usize, name: &str, affected: u64, starts: Option<u64>) -> WorkloadReport {
    WorkloadReport {
        rank,
        cluster: None,
        namespace: Some("shop".into()),
        workload_kind: Some("Deployment".into()),
        workload: Some(name.into()),
        sidecars: vec![SidecarReport {
            name: Some("proxy".into()),
            pattern: Pattern::Classic,
            phases: vec![Phase::Startup],
            incidents: affected,
        }],
        pod_starts: starts,
        affected_pod_starts: affected,
        affected_share: starts.map(|s| affected as f64 / s as f64),
        incidents: affected,
        startup_incidents: affected,
        stuck_job_pods: 0,
        refusals: 14 * affected,
        race_window_p50_seconds: Some(1.2),
        race_window_p95_seconds: Some(1.4),
        phases: vec![Phase::Startup],
        misconfiguration: false,
        guarded: false,
        fixes: vec![Fix {
            kind: Kind::SidecarRace,
            phase: Phase::Startup,
            sidecar: Some("proxy".into()),
            pattern: Pattern::Classic,
            container: Some("app".into()),
            port: Some(15001),
            refusals: 14 * affected,
            processes: vec![],
            guarded: false,
            move_to_init_containers: Some("proxy".into()),
            startup_probe_port: Some(15001),
            advice: "Move proxy from containers to initContainers.".into(),
        }],
        migration: None,
    }
}

fn report() -> Report {
    Report {
        source: Source::Prometheus {
            url: "http://prometheus:9090".into(),
            range: "1h".into(),
        },
        workloads_total: 2,
        workloads_without_incidents: Some(1),
        workloads: vec![line(1, "checkout", 3, Some(4)), line(2, "ledger", 1, None)],
        fleet: None,
    }
}

/// An incident of `workload` numbered `id` with `refused` refusals.
fn incident(id: u64, workload: &str, refused: u64) -> AgentIncident {
    AgentIncident {
        id,
        namespace: Some("shop".into()),
        workload: Some(WorkloadRef {
            kind: "Deployment".into(),
            name: workload.into(),
        }),
        refused_count: refused,
        first_refused_at: Some(format!("2026-12-06T10:00:0{id}Z")),
        ..swimlane::tests::startup_race()
    }
}

/// The values of `key` on the elements that carry `hook`, in document order.
fn hooks(page: &str, hook: &str, key: &str) -> Vec<String> {
    page.split(hook)
        .skip(1)
        .map(|s| {
            let at = s.find(&format!("{key}=\"")).unwrap() + key.len() + 2;
            s[at..].split('"').next().unwrap().to_string()
        })
        .collect()
}

#[test]
fn workloads_in_rank_order_in_the_table_and_the_articles() {
    let page = page(&Page::of(&report()));
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert_eq!(
        hooks(&page, "<tr data-rank", "data-workload"),
        ["Deployment shop/checkout", "Deployment shop/ledger"]
    );
    assert_eq!(hooks(&page, "<article", "data-rank"), ["1", "2"]);
    assert!(page.contains("<td class=\"num\">75.0%</td>"), "{page}");
    // The share as a bar when starts are known, in words when they are not.
    assert_eq!(
        hooks(&page, "data-chart=\"share\"", "data-affected"),
        ["3", "1"]
    );
    assert!(page.contains(r#"data-share="0.7500""#), "{page}");
    assert!(page.contains("the share is unknown"), "{page}");
    assert!(page.contains("1 other workload started pods without any incident."));
    assert!(page.contains("--manifests PATH --with-patches"), "{page}");
}

/// A workload with a dated template shows its verdict: a VERDICT cell in the ranking
/// and, in its article, the sentence with the split (escaped like every string).
#[test]
fn a_migration_verdict_is_in_the_table_and_the_article() {
    use crate::report::{
        fleet::{SplitEvidence, TemplateChange},
        migration::verify,
    };
    let mut r = report();
    r.workloads[1].migration = Some(verify(
        &TemplateChange {
            template: "7c9d<4f6b8".into(),
            changed_at: 1_796_119_200.0,
            templates: 2,
            before: SplitEvidence {
                pod_starts: 2.0,
                affected_pod_starts: 2.0,
                ..SplitEvidence::default()
            },
            after: SplitEvidence {
                pod_starts: 3.0,
                ..SplitEvidence::default()
            },
        },
        3,
    ));
    let page = page(&Page::of(&r));
    assert!(page.contains("<th>Since template change</th>"), "{page}");
    assert!(
        page.contains("<td>-</td></tr>"),
        "checkout has none: {page}"
    );
    assert!(page.contains("<td>fixed</td></tr>"), "{page}");
    assert_eq!(
        hooks(&page, "<p class=\"migration\"", "data-verdict"),
        ["fixed"]
    );
    assert!(
        page.contains("<strong>fixed</strong>: template 7c9d&lt;4f6b8 since 2026-12-01T10:00:00Z; before: 2 of 2 starts affected"),
        "{page}"
    );
    // Without one, no column and no block.
    let plain = super::page(&Page::of(&report()));
    assert!(!plain.contains("Since template change") && !plain.contains("data-verdict"));
}

#[test]
fn each_workload_draws_its_own_top_incidents_most_refused_first() {
    let r = report();
    let incidents = [
        incident(1, "checkout", 5),
        incident(2, "checkout", 14),
        incident(3, "ledger", 9),
        incident(4, "checkout", 3),
        incident(5, "checkout", 20),
        incident(6, "other", 99),
    ];
    let page = page(&Page {
        incidents: &incidents,
        ..Page::of(&r)
    });
    let checkout = &page[page.find("<article").unwrap()..page.find("</article>").unwrap()];
    assert_eq!(
        hooks(checkout, "<figure class=\"incident\"", "data-incident"),
        ["5", "2", "1"],
        "the top {TOP_INCIDENTS}, most refused first"
    );
    assert_eq!(
        hooks(checkout, "<circle class=\"dot\"", "data-incident"),
        ["1", "2", "4", "5"]
    );
    let ledger = &page[page.rfind("<article").unwrap()..];
    assert_eq!(
        hooks(ledger, "<figure class=\"incident\"", "data-incident"),
        ["3"]
    );
    assert!(
        !page.contains(r#"data-incident="6""#),
        "another workload's incident"
    );
}

#[test]
fn every_string_from_data_is_escaped() {
    let mut r = report();
    r.workloads[0].workload = Some("<script>alert(1)</script>".into());
    r.workloads[0].fixes[0].advice = "Move <img src=x onerror=alert(2)> now".into();
    let patches = [PatchRow {
        rank: 1,
        workload: "Deployment shop/<b>checkout</b>".into(),
        patch: "- target:\n    name: \"</pre><script>alert(3)</script>\"\n".into(),
    }];
    let mut hostile = incident(1, "<script>alert(1)</script>", 14);
    hostile.pod = Some("\"><script>alert(4)</script>".into());
    let incidents = [hostile];
    let page = page(&Page {
        report: &r,
        incidents: &incidents,
        patches: Some(&patches),
    });
    for tag in ["<script", "<img", "<b>"] {
        assert!(!page.contains(tag), "{tag} in {page}");
    }
    assert!(
        page.contains(r#"data-workload="Deployment shop/&lt;script&gt;alert(1)&lt;/script&gt;""#)
    );
    assert!(
        page.contains("&lt;/pre&gt;&lt;script&gt;alert(3)"),
        "{page}"
    );
    assert!(
        page.contains(r#"data-pod="&quot;&gt;&lt;script&gt;alert(4)"#),
        "{page}"
    );
    // The patch keeps its lines.
    assert!(page.contains("- target:\n    name: &quot;"), "{page}");
    assert!(
        page.contains(r#"data-incident="1""#),
        "the hostile workload's incident is drawn"
    );
}

#[test]
fn the_page_references_nothing_outside_itself() {
    let incidents = [incident(1, "checkout", 14)];
    let r = report();
    let page = page(&Page {
        incidents: &incidents,
        ..Page::of(&r)
    });
    for off_page in ["src=", "href=", "url(", "@import", "<script", "<link"] {
        assert!(!page.contains(off_page), "{off_page} in {page}");
    }
    assert!(page.contains("Content-Security-Policy\" content=\"default-src 'none'"));
}

#[test]
fn nothing_to_rank_says_so() {
    let mut r = report();
    r.workloads.clear();
    r.workloads_total = 0;
    let page = page(&Page::of(&r));
    assert!(
        page.contains("from Prometheus at http://prometheus:9090: none."),
        "{page}"
    );
    assert!(!page.contains("<table"), "{page}");
}
