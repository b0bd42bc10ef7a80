//! The refused processes from kernel records to the incident users see: names and
//! counts, the bound, and `guarded` when a wait tool was refused.

use crate::{
    detect::{DetectorConfig, processes::REST, render::Filter},
    ingest::events::{Comm, KernelEvent},
    pipeline::Pipeline,
    test_facts::{CHECKOUT, MS, checkout_pod, container_path, created, pipeline, pod_path, socket},
};

/// The classic checkout pod (app `a…`, istio-proxy `b…`): the app container is
/// refused on 15001 once per `(process, n)` entry n times, then the proxy listens.
fn race(name: &str, refusals: &[(&str, u64)]) -> Pipeline {
    let dir = crate::test_facts::temp_dir(name);
    let mut p = pipeline(&dir, Some(checkout_pod()), DetectorConfig::default());
    let (a, b) = ("a".repeat(64), "b".repeat(64));
    let mut events = vec![
        created(0, 100, pod_path(CHECKOUT)),
        created(MS, 101, container_path(CHECKOUT, &a)),
        created(MS, 102, container_path(CHECKOUT, &b)),
    ];
    let mut t = 10 * MS;
    for (process, n) in refusals {
        for _ in 0..*n {
            let mut s = socket(t, 101, "127.0.0.1:40000", Some("127.0.0.1:15001"));
            s.owner.comm = Comm::from(*process);
            events.push(KernelEvent::Refused(s));
            t += MS;
        }
    }
    events.push(KernelEvent::Listen(socket(
        t + MS,
        102,
        "0.0.0.0:15001",
        None,
    )));
    for ev in &events {
        p.kernel_event(ev);
    }
    p.tick(t + 2000 * MS);
    p
}

fn only_incident(p: &Pipeline) -> crate::detect::render::IncidentView {
    let (list, _) = p.incidents(&Filter::default(), 10);
    assert_eq!(list.len(), 1, "{list:#?}");
    list.into_iter().next().unwrap()
}

fn named(v: &crate::detect::render::IncidentView) -> Vec<(&str, u64)> {
    v.processes
        .iter()
        .map(|c| (c.name.as_str(), c.count))
        .collect()
}

#[test]
fn the_incident_names_its_refused_processes_with_counts() {
    let v = only_incident(&race("procs", &[("java", 12)]));
    assert_eq!(v.refused_count, 12);
    assert_eq!(named(&v), [("java", 12)]);
    assert!(!v.guarded);
    assert!(!v.advice.contains("works around"), "{}", v.advice);
}

#[test]
fn a_refused_wait_tool_guards_the_incident_and_the_advice_says_so() {
    let v = only_incident(&race("guarded", &[("java", 12), ("curl", 3)]));
    assert_eq!((v.phase.as_str(), v.refused_count), ("startup", 15));
    assert_eq!(named(&v), [("java", 12), ("curl", 3)]);
    assert!(v.guarded);
    assert!(
        v.advice.starts_with("Move istio-proxy from containers")
            && v.advice.contains(
                "The pod works around the start order: curl waits until port 15001 accepts connections"
            )
            && v.advice.contains("native sidecar"),
        "{}",
        v.advice
    );
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["guarded"], true);
    assert_eq!(
        json["processes"][0],
        serde_json::json!({"name": "java", "count": 12})
    );
}

#[test]
fn at_most_eight_names_then_the_rest_summed() {
    let names: Vec<String> = (1..=10).map(|i| format!("worker{i}")).collect();
    let refusals: Vec<(&str, u64)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), 20 - i as u64))
        .collect();
    let v = only_incident(&race("bound", &refusals));
    assert_eq!(v.processes.len(), 9);
    assert_eq!(named(&v)[0], ("worker1", 20));
    assert_eq!(named(&v)[7], ("worker8", 13));
    assert_eq!(named(&v)[8], (REST, 12 + 11));
    let total: u64 = v.processes.iter().map(|c| c.count).sum();
    assert_eq!(total, v.refused_count);
}
