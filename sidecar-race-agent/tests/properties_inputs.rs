//! Property tests of the parsers of what pods and users send the agent: cgroup paths
//! (a pod controls its containers' cgroup names only through the runtime, but any
//! directory under the hierarchy reaches the parser), Pod objects, lint manifests and
//! the `/api/v1/incidents` query string. Any input gets an answer, never a panic.

use std::sync::{Arc, atomic::AtomicBool};

use axum::body::Body;
use parking_lot::Mutex;
use proptest::prelude::*;
use serde_json::{Value, json};
use sidecar_race_agent::{
    detect::{Client, DetectorConfig, Fact},
    http::{HttpState, Limits, router},
    ingest::stream::StreamStats,
    inventory::cgroups::CgroupIndex,
    inventory::{
        Inventory,
        cgroup_path::{PathInfo, parse},
        store::PodStore,
    },
    lint::input::{Source, objects},
    pipeline::Pipeline,
    pods::pod_info::PodInfo,
    sinks::metrics::Metrics,
};
use tower::ServiceExt;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

fn hex(n: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(b"0123456789abcdef".to_vec()), n)
        .prop_map(|b| String::from_utf8(b).unwrap())
}

prop_compose! {
    fn uid()(a in hex(8), b in hex(4), c in hex(4), d in hex(4), e in hex(12)) -> String {
        format!("{a}-{b}-{c}-{d}-{e}")
    }
}

/// Path segments that look like the kubelet's and runtimes' names, and others.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("kubepods.slice".to_string()),
        Just("kubepods".to_string()),
        Just("kubepods-burstable.slice".to_string()),
        Just("besteffort".to_string()),
        uid().prop_map(|u| format!("kubepods-burstable-pod{}.slice", u.replace('-', "_"))),
        uid().prop_map(|u| format!("pod{u}")),
        hex(64).prop_map(|id| format!("cri-containerd-{id}.scope")),
        hex(64).prop_map(|id| format!("crio-conmon-{id}.scope")),
        hex(64).prop_map(|id| format!("docker-{id}.scope")),
        hex(64),
        "\\PC{0,20}",
        "[a-z._-]{0,12}",
    ]
}

proptest! {
    #![proptest_config(config(1024))]

    /// Any path: an answer, the same with trailing or doubled slashes (as documented),
    /// and ids and UIDs in canonical form when it names a container or pod.
    #[test]
    fn any_cgroup_path_gets_a_stable_answer(segs in prop::collection::vec(segment(), 0..7)) {
        let path = format!("/{}", segs.join("/"));
        let info = parse(&path);
        prop_assert_eq!(&parse(&format!("{path}/")), &info, "trailing slash");
        prop_assert_eq!(&parse(&path.replace('/', "//")), &info, "doubled slashes");
        let canonical_uid = |u: &str| u.len() == 36 && u.chars().all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase());
        match &info {
            PathInfo::PodContainer { pod_uid, container_id, .. } => {
                prop_assert!(canonical_uid(pod_uid), "{pod_uid}");
                prop_assert!(path.contains(container_id.as_str()) && container_id.len() == 64);
            }
            PathInfo::Pod { pod_uid } => prop_assert!(canonical_uid(pod_uid), "{pod_uid}"),
            PathInfo::Container { container_id, .. } => prop_assert_eq!(container_id.len(), 64),
            PathInfo::Host | PathInfo::Unknown => {}
        }
    }

    /// The kubelet's layouts (systemd and cgroupfs drivers, every QoS class, under a
    /// prefix such as a kind node's) name the pod and container they were made for.
    #[test]
    fn kubelet_layouts_name_their_pod_and_container(
        uid in uid(),
        id in hex(64),
        qos in prop::sample::select(vec!["", "burstable", "besteffort"]),
        systemd in any::<bool>(),
        runtime in prop::sample::select(vec!["cri-containerd", "crio", "docker"]),
        prefix in prop::sample::select(vec!["", "/kubelet.slice/kubelet-kubepods.slice", "/system.slice/docker-c96429ef5a2f8366f9f16138c17b7360d92256380f274695f86510f14dd4d055.scope"]),
    ) {
        let path = if systemd {
            let u = uid.replace('-', "_");
            let (qslice, pod) = if qos.is_empty() {
                (String::new(), format!("kubepods-pod{u}.slice"))
            } else {
                (format!("/kubepods-{qos}.slice"), format!("kubepods-{qos}-pod{u}.slice"))
            };
            let base = if prefix.contains("kubelet-kubepods") { String::new() } else { "/kubepods.slice".into() };
            format!("{prefix}{base}{qslice}/{pod}/{runtime}-{id}.scope")
        } else {
            // The cgroupfs driver has no systemd slices above it.
            let prefix = if prefix.contains(".slice") { "" } else { prefix };
            let q = if qos.is_empty() { String::new() } else { format!("/{qos}") };
            format!("{prefix}/kubepods{q}/pod{uid}/{id}")
        };
        match parse(&path) {
            PathInfo::PodContainer { pod_uid, container_id, .. } => {
                prop_assert_eq!(pod_uid, uid);
                prop_assert_eq!(container_id, id);
            }
            other => prop_assert!(false, "{path}: {other:?}"),
        }
    }
}

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::from),
        Just(json!("Always")),
        Just(json!("2026-11-29T10:00:00Z")),
        Just(json!(
            "containerd://0ac0814cd3dc1e341620f880205074403be81d5ed005e3286e5c205fe37f388f"
        )),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-zA-Z]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Fields of a Pod a pod (or whoever writes its spec) controls.
const POD_FIELDS: [&str; 24] = [
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/annotations",
    "/metadata/ownerReferences",
    "/metadata/deletionTimestamp",
    "/metadata/deletionGracePeriodSeconds",
    "/spec/containers",
    "/spec/containers/0",
    "/spec/containers/0/name",
    "/spec/containers/0/ports",
    "/spec/containers/0/startupProbe",
    "/spec/initContainers",
    "/spec/initContainers/0/restartPolicy",
    "/spec/initContainers/0/readinessProbe",
    "/spec/ephemeralContainers",
    "/spec/hostNetwork",
    "/spec/terminationGracePeriodSeconds",
    "/status",
    "/status/podIP",
    "/status/podIPs",
    "/status/containerStatuses",
    "/status/containerStatuses/0/containerID",
    "/status/containerStatuses/0/state",
    "/status/startTime",
];

fn base_pod() -> Value {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods/classic-deployment.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Sets `pointer` (creating objects on the way where it can) to `v`.
fn set(pod: &mut Value, pointer: &str, v: Value) {
    let mut at = pod;
    for part in pointer.trim_start_matches('/').split('/') {
        let next = match at {
            Value::Object(m) => m.entry(part.to_string()).or_insert(Value::Null),
            Value::Array(a) => match part.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(x) => x,
                None => return,
            },
            _ => return,
        };
        at = next;
    }
    *at = v;
}

proptest! {
    #![proptest_config(config(512))]

    /// A real Pod with any of its fields replaced by any JSON: analysed or refused
    /// with a reason; what is analysed answers every question without a panic.
    #[test]
    fn any_pod_fields_are_analysed_or_refused(edits in prop::collection::vec((prop::sample::select(POD_FIELDS.to_vec()), json_value()), 1..5), port in any::<u16>()) {
        let mut pod = base_pod();
        for (pointer, v) in edits {
            set(&mut pod, pointer, v);
        }
        match PodInfo::from_json(pod.clone()) {
            Ok(info) => {
                prop_assert_eq!(Some(info.uid.as_str()), pod["metadata"]["uid"].as_str());
                prop_assert_eq!(Some(info.name.as_str()), pod["metadata"]["name"].as_str());
                for c in &info.containers {
                    let _ = (info.role(&c.name), info.pattern(&c.name), info.status(&c.name));
                }
                let _ = (info.declaring(port), info.is_terminating(), info.container_ids(), info.is_job());
            }
            Err(reason) => prop_assert!(!reason.is_empty()),
        }
    }

    /// Any text as a manifest: objects or one error naming the file, never a panic.
    #[test]
    fn any_manifest_text_parses_or_fails_cleanly(text in "(\\PC|\n|---\n|  |- |: |\\{|\\}|\\[|\\]|&a|\\*a|!!|#)*") {
        let source = Source { name: "in.yaml".into(), text };
        match objects(&source) {
            Ok(objs) => {
                for o in objs {
                    prop_assert_eq!(o.location.file.as_str(), "in.yaml");
                    prop_assert!(o.location.line >= 1 && o.location.document >= 1);
                }
            }
            Err(e) => prop_assert!(e.to_string().starts_with("in.yaml:"), "{e}"),
        }
        let (_, errors) = sidecar_race_agent::lint::load(&[source], &Default::default());
        for e in errors {
            prop_assert!(!e.is_empty());
        }
    }

    /// Pods as JSON turned into multi-document YAML: one object per document, at the
    /// line where its document starts, in order.
    #[test]
    fn multi_document_manifests_keep_every_object_and_its_line(pods in prop::collection::vec(("p-[a-z]{1,8}", 0usize..3), 1..6)) {
        let mut text = String::new();
        let mut want = Vec::new();
        for (name, blank) in &pods {
            text.push_str("---\n");
            text.push_str(&"\n".repeat(*blank));
            want.push((name.clone(), text.lines().count() + 1));
            text.push_str(&format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n"));
        }
        let objs = objects(&Source { name: "m.yaml".into(), text }).expect("valid YAML");
        let got: Vec<(String, usize)> = objs.iter().map(|o| (o.node.get("metadata").and_then(|m| m.get("name")).and_then(|n| n.as_str()).unwrap().to_string(), o.location.line)).collect();
        prop_assert_eq!(got, want);
    }
}

/// An HTTP front of a pipeline holding incidents of several phases and states.
fn incidents_api() -> axum::Router {
    let inventory = Inventory::new(
        CgroupIndex::new("/nonexistent", 0),
        PodStore::new(std::time::Duration::from_secs(1)),
        false,
    );
    let mut pipeline = Pipeline::new(inventory, DetectorConfig::default(), 0);
    let s = 1_000_000_000u64;
    let refused = |ts: u64, pod: &str, port: u16| Fact::Refused {
        ts,
        pod_uid: pod.into(),
        client: Client::Cgroup(7),
        dst: format!("127.0.0.1:{port}").parse().unwrap(),
        local_dst: None,
        process: "app".into(),
    };
    let meta = sidecar_race_agent::detect::NoMeta;
    let d = pipeline.detector_mut();
    d.observe(
        Fact::PodStarted {
            ts: 0,
            pod_uid: "p1".into(),
        },
        &meta,
    );
    d.observe(refused(s, "p1", 15001), &meta);
    d.observe(
        Fact::ListenerUp {
            ts: 2 * s,
            pod_uid: "p1".into(),
            container_id: None,
            addr: "127.0.0.1:15001".parse().unwrap(),
        },
        &meta,
    );
    d.observe(refused(3 * s, "p2", 8080), &meta);
    d.observe(refused(4 * s, "p3", 9090), &meta);
    d.advance(200 * s, &meta);
    d.observe(refused(201 * s, "p4", 7070), &meta);
    router(
        HttpState {
            degraded: None,
            ready: Arc::new(AtomicBool::new(true)),
            stream: Arc::new(StreamStats::default()),
            pipeline: Arc::new(Mutex::new(pipeline)),
            metrics: Arc::new(Mutex::new(Metrics::new(false, "test", "test"))),
            auth: None,
        },
        Limits::default(),
        true,
    )
}

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn query_value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "sidecar_race",
            "app_not_ready",
            "init_deadlock",
            "stuck_job",
            "startup",
            "drain",
            "steady",
            "unresolved",
            "open",
            "resolved",
            "shop",
            ""
        ])
        .prop_map(String::from),
        "\\PC{0,10}",
    ]
}

proptest! {
    #![proptest_config(config(256))]

    /// Any query string: 200 with only matching incidents, or 400 naming the bad
    /// value; never a server error.
    #[test]
    fn any_incidents_query_is_answered_or_refused(pairs in prop::collection::vec((prop::sample::select(vec!["kind", "phase", "state", "namespace", "x", "kind[]"]), query_value()), 0..4)) {
        let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{}={}", percent(k), percent(v))).collect();
        let uri = format!("/api/v1/incidents?{}", query.join("&"));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (status, body) = rt.block_on(async {
            let resp = incidents_api().oneshot(axum::http::Request::get(&uri).body(Body::empty()).unwrap()).await.unwrap();
            let status = resp.status().as_u16();
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
            (status, String::from_utf8_lossy(&bytes).into_owned())
        });
        let valid = |k: &str, v: &str| match k {
            "kind" => ["sidecar_race", "app_not_ready", "init_deadlock", "stuck_job"].contains(&v),
            "phase" => ["startup", "drain", "steady", "unresolved"].contains(&v),
            "state" => ["open", "resolved"].contains(&v),
            _ => true,
        };
        let known = ["kind", "phase", "state", "namespace"];
        let duplicated = known.iter().any(|k| pairs.iter().filter(|(p, _)| p == k).count() > 1);
        let invalid = pairs.iter().any(|(k, v)| !valid(k, v));
        prop_assert!(status == 200 || status == 400, "{uri}: {status} {body}");
        if invalid && !duplicated {
            prop_assert_eq!(status, 400, "{}: {}", uri, body);
        }
        if status == 200 {
            let v: Value = serde_json::from_str(&body).unwrap();
            let list = v["incidents"].as_array().unwrap();
            for (k, want) in pairs.iter().filter(|(k, _)| known.contains(k)) {
                for i in list {
                    prop_assert_eq!(i[*k].as_str(), Some(want.as_str()), "{}: {:#}", uri, i);
                }
            }
            if pairs.iter().all(|(k, _)| !known.contains(k)) {
                prop_assert_eq!(list.len(), 4, "no filter: every shown incident");
            }
        }
    }
}
