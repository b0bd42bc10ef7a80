//! Families of the exposition as OTLP metrics, by the OpenTelemetry conventions for
//! Prometheus interop (what the collector's Prometheus receiver makes of a scrape):
//! - a counter is a monotonic cumulative Sum named as its family, without `_total`;
//! - a gauge is a Gauge; `unknown` and `info` families are Gauges of their samples;
//! - a histogram is a cumulative Histogram: the `le` buckets become explicit bounds and
//!   per-bucket counts, with `_count` and `_sum`;
//! - the unit is `# UNIT`'s, else the name's unit suffix in UCUM (`_seconds` → `s`,
//!   `_bytes` → `By`, `_ratio` → `1`), else none;
//! - labels are the data points' attributes, under their semantic-convention names
//!   where the conventions have one (`semconv`); HELP is the description.
//!
//! Cumulative points start at the agent's start (the counters start at zero then).

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::{
    collector::metrics::v1::ExportMetricsServiceRequest,
    metrics::v1::{
        AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
        ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
    },
    resource::v1::Resource,
};

use super::{
    exposition::{Family, Kind, Sample},
    semconv::point_attributes,
};

/// When the points were taken and since when the cumulative ones count.
#[derive(Debug, Clone, Copy)]
pub struct Times {
    pub start_unix_nano: u64,
    pub now_unix_nano: u64,
}

/// One request holding every family, under `resource`.
pub fn request(
    families: &[Family],
    resource: Resource,
    times: Times,
) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(super::attributes::scope()),
                metrics: families.iter().filter_map(|f| metric(f, times)).collect(),
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// A family as an OTLP metric; `None` for one without samples.
fn metric(family: &Family, times: Times) -> Option<Metric> {
    if family.samples.is_empty() {
        return None;
    }
    let data = match family.kind {
        Kind::Counter => metric::Data::Sum(Sum {
            data_points: family
                .samples
                .iter()
                .filter(|s| s.name == format!("{}_total", family.name))
                .map(|s| number_point(s, times, true))
                .collect(),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        }),
        Kind::Histogram => metric::Data::Histogram(Histogram {
            data_points: histogram_points(family, times),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        }),
        Kind::Gauge | Kind::Other => metric::Data::Gauge(Gauge {
            data_points: family
                .samples
                .iter()
                .map(|s| number_point(s, times, false))
                .collect(),
        }),
    };
    Some(Metric {
        name: family.name.clone(),
        description: family.help.clone(),
        unit: unit(family),
        data: Some(data),
        ..Default::default()
    })
}

/// UCUM for the units Prometheus names carry.
fn unit(family: &Family) -> String {
    let word = if family.unit.is_empty() {
        family.name.rsplit('_').next().unwrap_or_default()
    } else {
        family.unit.as_str()
    };
    match word {
        "seconds" => "s",
        "milliseconds" => "ms",
        "bytes" => "By",
        "ratio" => "1",
        _ if !family.unit.is_empty() => word,
        _ => "",
    }
    .to_string()
}

/// Whole numbers as integers (the counters count), others as doubles.
fn number_point(s: &Sample, times: Times, cumulative: bool) -> NumberDataPoint {
    let whole = s.value.fract() == 0.0 && s.value.abs() < 9.0e15;
    NumberDataPoint {
        attributes: point_attributes(&s.labels),
        start_time_unix_nano: if cumulative { times.start_unix_nano } else { 0 },
        time_unix_nano: times.now_unix_nano,
        value: Some(if whole {
            number_data_point::Value::AsInt(s.value as i64)
        } else {
            number_data_point::Value::AsDouble(s.value)
        }),
        ..Default::default()
    }
}

/// One point per label set: `_bucket` samples (cumulative, by `le`) become the
/// per-bucket counts between the finite bounds, `_count` and `_sum` its totals.
fn histogram_points(family: &Family, times: Times) -> Vec<HistogramDataPoint> {
    #[derive(Default)]
    struct Series {
        buckets: Vec<(f64, f64)>,
        count: f64,
        sum: Option<f64>,
    }
    let mut by_labels: BTreeMap<Vec<(String, String)>, Series> = BTreeMap::new();
    for s in &family.samples {
        let suffix = &s.name[family.name.len()..];
        let mut labels = s.labels.clone();
        let le = labels
            .iter()
            .position(|(k, _)| k == "le")
            .map(|i| labels.remove(i).1);
        let series = by_labels.entry(labels).or_default();
        match (suffix, le) {
            ("_bucket", Some(le)) => {
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::NAN)
                };
                series.buckets.push((bound, s.value));
            }
            ("_count", _) => series.count = s.value,
            ("_sum", _) => series.sum = Some(s.value),
            _ => {}
        }
    }
    by_labels
        .into_iter()
        .map(|(labels, mut series)| {
            series.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            let explicit_bounds: Vec<f64> = series
                .buckets
                .iter()
                .map(|b| b.0)
                .filter(|b| b.is_finite())
                .collect();
            let mut counts = Vec::with_capacity(explicit_bounds.len() + 1);
            let mut below = 0.0;
            for (bound, cumulative) in &series.buckets {
                if bound.is_finite() {
                    counts.push((cumulative - below).max(0.0) as u64);
                    below = *cumulative;
                }
            }
            counts.push((series.count - below).max(0.0) as u64);
            HistogramDataPoint {
                attributes: point_attributes(&labels),
                start_time_unix_nano: times.start_unix_nano,
                time_unix_nano: times.now_unix_nano,
                count: series.count as u64,
                sum: series.sum,
                bucket_counts: counts,
                explicit_bounds,
                ..Default::default()
            }
        })
        .collect()
}
