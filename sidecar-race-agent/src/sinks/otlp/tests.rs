use opentelemetry_proto::tonic::{
    common::v1::any_value,
    metrics::v1::{AggregationTemporality, metric, number_data_point},
    resource::v1::Resource,
};

use super::{
    convert::{Times, request},
    exposition::{Kind, parse},
};

const TEXT: &str = r#"# HELP sidecar_race_refused_connections Connections refused "by a sidecar".
# TYPE sidecar_race_refused_connections counter
sidecar_race_refused_connections_total{namespace="shop",container="app",sidecar="proxy",phase="startup"} 43
sidecar_race_refused_connections_total{namespace="a\"b\\c",container="app",sidecar="proxy",phase="drain"} 2
# HELP sidecar_race_stuck_job_pods Job pods kept alive by a classic sidecar.
# TYPE sidecar_race_stuck_job_pods gauge
sidecar_race_stuck_job_pods{namespace="batch"} 1
# HELP sidecar_race_race_window_seconds How long a race lasted.
# TYPE sidecar_race_race_window_seconds histogram
sidecar_race_race_window_seconds_sum{namespace="shop"} 2.5
sidecar_race_race_window_seconds_count{namespace="shop"} 3
sidecar_race_race_window_seconds_bucket{le="0.5",namespace="shop"} 1
sidecar_race_race_window_seconds_bucket{le="1.0",namespace="shop"} 2
sidecar_race_race_window_seconds_bucket{le="+Inf",namespace="shop"} 3
# HELP sidecar_race_empty Nothing yet.
# TYPE sidecar_race_empty counter
# EOF
"#;

const TIMES: Times = Times {
    start_unix_nano: 1_000,
    now_unix_nano: 2_000,
};

#[test]
fn the_exposition_reads_back_families_samples_and_escaped_labels() {
    let families = parse(TEXT).unwrap();
    let names: Vec<(&str, Kind, usize)> = families
        .iter()
        .map(|f| (f.name.as_str(), f.kind, f.samples.len()))
        .collect();
    assert_eq!(
        names,
        [
            ("sidecar_race_refused_connections", Kind::Counter, 2),
            ("sidecar_race_stuck_job_pods", Kind::Gauge, 1),
            ("sidecar_race_race_window_seconds", Kind::Histogram, 5),
            ("sidecar_race_empty", Kind::Counter, 0),
        ]
    );
    assert_eq!(families[0].help, r#"Connections refused "by a sidecar"."#);
    assert_eq!(families[0].samples[1].labels[0].1, r#"a"b\c"#);
    assert!(
        parse("sidecar_race_orphan 1\n").is_err(),
        "a sample needs its family"
    );
}

#[test]
fn counters_are_cumulative_monotonic_sums_without_total_and_histograms_keep_their_buckets() {
    let req = request(
        &parse(TEXT).unwrap(),
        Resource {
            attributes: vec![super::attributes::string("service.name", "x")],
            ..Default::default()
        },
        TIMES,
    );
    let metrics = &req.resource_metrics[0].scope_metrics[0].metrics;
    assert_eq!(metrics.len(), 3, "the family without samples is left out");

    let refused = &metrics[0];
    assert_eq!(refused.name, "sidecar_race_refused_connections");
    assert_eq!(refused.unit, "");
    let Some(metric::Data::Sum(sum)) = &refused.data else {
        panic!("{refused:?}")
    };
    assert!(sum.is_monotonic);
    assert_eq!(
        sum.aggregation_temporality,
        AggregationTemporality::Cumulative as i32
    );
    let p = &sum.data_points[0];
    assert_eq!(p.value, Some(number_data_point::Value::AsInt(43)));
    assert_eq!((p.start_time_unix_nano, p.time_unix_nano), (1_000, 2_000));
    let attrs: Vec<(&str, &str)> = p
        .attributes
        .iter()
        .map(|kv| {
            let Some(any_value::Value::StringValue(v)) =
                kv.value.as_ref().and_then(|v| v.value.as_ref())
            else {
                panic!("{kv:?}")
            };
            (kv.key.as_str(), v.as_str())
        })
        .collect();
    // The semantic conventions' names where they name the label, the label's own name
    // where they do not.
    assert_eq!(
        attrs,
        [
            ("k8s.namespace.name", "shop"),
            ("k8s.container.name", "app"),
            ("sidecar", "proxy"),
            ("phase", "startup")
        ]
    );

    let Some(metric::Data::Gauge(gauge)) = &metrics[1].data else {
        panic!("{:?}", metrics[1])
    };
    assert_eq!(gauge.data_points[0].start_time_unix_nano, 0);

    let window = &metrics[2];
    assert_eq!(window.unit, "s");
    let Some(metric::Data::Histogram(h)) = &window.data else {
        panic!("{window:?}")
    };
    let p = &h.data_points[0];
    assert_eq!(p.explicit_bounds, [0.5, 1.0]);
    assert_eq!(p.bucket_counts, [1, 1, 1]);
    assert_eq!((p.count, p.sum), (3, Some(2.5)));
    assert_eq!(p.attributes.len(), 1, "le is not an attribute");
}

/// The agent's own exposition, as a scrape gets it, converts whole: every family
/// with samples is one OTLP metric.
#[test]
fn the_agents_own_exposition_converts_family_by_family() {
    let metrics = crate::sinks::metrics::Metrics::new(false, "0.1.0", "6.1.0");
    let text = metrics.encode();
    let families = parse(&text).unwrap();
    let with_samples = families.iter().filter(|f| !f.samples.is_empty()).count();
    assert!(with_samples > 0, "{text}");
    let req = request(&families, Resource::default(), TIMES);
    assert_eq!(
        req.resource_metrics[0].scope_metrics[0].metrics.len(),
        with_samples
    );
}
