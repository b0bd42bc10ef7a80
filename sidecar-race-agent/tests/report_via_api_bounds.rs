//! `report --agents-via-api` on a large fleet (docs/reference.md, "report"): the
//! agents are read 8 at a time through the pod proxy, not all at once; an agent that
//! never answers, a fleet that takes too long and answers that add up to too much each
//! end the report with one sentence instead of holding it or its memory without end.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use axum::{Json, Router, http::Uri, response::IntoResponse};
use serde_json::{Value, json};
use sidecar_race_agent::report::{
    ReportError, Source,
    via_api::{self, Bounds},
};

/// How the fake agents behind the pod proxy answer.
#[derive(Clone, Copy)]
struct Agents {
    count: usize,
    /// Each answer takes this long.
    delay: Duration,
    /// This agent (by index) never answers.
    silent: Option<usize>,
}

/// Proxied requests in flight now, and the most there ever were.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    most: AtomicUsize,
    answered: AtomicUsize,
}

/// A fake API server listing `agents.count` running agent pods and answering each
/// one's `/api/v1/incidents` through the pod proxy with one incident.
async fn fake_api(agents: Agents, flight: Arc<InFlight>) -> kube::Client {
    let handler = move |uri: Uri| {
        let flight = flight.clone();
        async move {
            let path = uri.path().to_string();
            if path == "/api/v1/namespaces/sidecar-race/pods" {
                let items: Vec<Value> = (0..agents.count)
                    .map(|i| {
                        json!({"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": format!("agent-{i}"), "namespace": "sidecar-race"},
                               "spec": {"containers": [{"name": "agent"}]},
                               "status": {"phase": "Running"}})
                    })
                    .collect();
                return Json(json!({"apiVersion": "v1", "kind": "PodList",
                                   "metadata": {"resourceVersion": "1"}, "items": items}))
                .into_response();
            }
            let Some(i) = path
                .strip_prefix("/api/v1/namespaces/sidecar-race/pods/agent-")
                .and_then(|rest| rest.split(':').next())
                .and_then(|i| i.parse::<usize>().ok())
            else {
                return axum::http::StatusCode::NOT_FOUND.into_response();
            };
            let now = flight.now.fetch_add(1, Relaxed) + 1;
            flight.most.fetch_max(now, Relaxed);
            if agents.silent == Some(i) {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            tokio::time::sleep(agents.delay).await;
            flight.now.fetch_sub(1, Relaxed);
            flight.answered.fetch_add(1, Relaxed);
            Json(json!({"incidents": [{
                "kind": "sidecar_race", "phase": "startup", "pod_uid": format!("uid-{i}"),
                "namespace": "shop", "workload": {"kind": "Deployment", "name": "checkout"},
                "container": "app", "sidecar": "istio-proxy", "pattern": "classic",
                "port": 15001, "refused_count": 3, "race_window_seconds": 0.5
            }]}))
            .into_response()
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let router = Router::new().fallback(handler);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_are_read_eight_at_a_time() {
    let flight = Arc::new(InFlight::default());
    let agents = Agents {
        count: 40,
        delay: Duration::from_millis(200),
        silent: None,
    };
    let client = fake_api(agents, flight.clone()).await;
    let fleet = via_api::collect_with(&client, "sidecar-race", 9965, Some("t"))
        .await
        .unwrap();
    let Source::Agents { urls } = &fleet.source else {
        panic!("{:?}", fleet.source)
    };
    assert_eq!(urls.len(), 40);
    assert_eq!(flight.answered.load(Relaxed), 40);
    let most = flight.most.load(Relaxed);
    eprintln!("40 agents: at most {most} proxied requests at once");
    assert!(
        (2..=8).contains(&most),
        "8 agents at a time at most, and more than one: {most}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_agent_a_slow_fleet_and_too_many_bytes_end_the_report() {
    let bounds = Bounds {
        per_agent: Duration::from_secs(1),
        ..Bounds::default()
    };
    // One agent that never answers: named, after its own budget.
    let agents = Agents {
        count: 5,
        delay: Duration::ZERO,
        silent: Some(3),
    };
    let client = fake_api(agents, Arc::default()).await;
    let started = Instant::now();
    let err = via_api::collect_within(&client, "sidecar-race", 9965, Some("t"), bounds)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ReportError::Api("pods/proxy sidecar-race/agent-3: no whole answer within 1s".into())
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // Each agent within its budget, but the fleet past the total.
    let bounds = Bounds {
        at_once: 1,
        total: Duration::from_millis(500),
        total_per_agent: Duration::from_millis(100),
        ..Bounds::default()
    };
    let agents = Agents {
        count: 10,
        delay: Duration::from_millis(200),
        silent: None,
    };
    let client = fake_api(agents, Arc::default()).await;
    let started = Instant::now();
    let err = via_api::collect_within(&client, "sidecar-race", 9965, Some("t"), bounds)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ReportError::Api("the 10 agents were not all read within 1.5s".into())
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    // The answers together past the byte bound (one answer is about 300 bytes).
    let bounds = Bounds {
        total_bytes: 1 << 20,
        ..Bounds::default()
    };
    let agents = Agents {
        count: 3,
        delay: Duration::ZERO,
        silent: None,
    };
    let client = fake_api(agents, Arc::default()).await;
    assert!(
        via_api::collect_within(&client, "sidecar-race", 9965, Some("t"), bounds)
            .await
            .is_ok()
    );
    let bounds = Bounds {
        total_bytes: 700,
        ..Bounds::default()
    };
    let err = via_api::collect_within(&client, "sidecar-race", 9965, Some("t"), bounds)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("answers add up to more than"),
        "{err}"
    );
}
