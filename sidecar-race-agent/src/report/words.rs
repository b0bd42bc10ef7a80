//! The report's words that every format shares: the headline and the roll-up's, the
//! footer, a workload's and a fix's names, and how unknown counts and windows read.

use super::{
    cluster_label::{CONVENTIONS, LabelFrom},
    fixes::Fix,
    fleet::Source,
    rank::{FleetReport, Report, WorkloadReport},
};
use crate::detect::{Phase, processes::summary};

pub fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `, top 3 shown` when `--top` cut the list.
pub fn shown(shown: usize, total: usize) -> String {
    if shown < total {
        format!(", top {shown} shown")
    } else {
        String::new()
    }
}

pub fn headline(r: &Report) -> String {
    let from = match &r.source {
        Source::Prometheus { url, range } => {
            format!("Sidecar races in the last {range}, from Prometheus at {url}")
        }
        Source::Agents { urls } => format!(
            "Sidecar races in the incident history of {} agent{} ({})",
            urls.len(),
            plural(urls.len()),
            urls.join(", ")
        ),
    };
    if r.workloads_total == 0 {
        return format!("{from}: none.");
    }
    let ranked =
        "ranked by affected pod starts, then startup incidents, refusals and race window p95.";
    match &r.fleet {
        Some(f) => format!(
            "{from}: {} workload{} in {} cluster{} ({}), {ranked}",
            f.workloads_total,
            plural(f.workloads_total),
            f.clusters.len(),
            plural(f.clusters.len()),
            f.clusters.join(", "),
        ),
        None => format!(
            "{from}: {} workload{}{}, {ranked}",
            r.workloads_total,
            plural(r.workloads_total),
            shown(r.workloads.len(), r.workloads_total),
        ),
    }
}

pub fn fleet_headline(f: &FleetReport) -> String {
    let from = match f.cluster_label_from {
        LabelFrom::Flag => String::new(),
        LabelFrom::Series => format!(
            ", the first of `{}` the series carry",
            CONVENTIONS.join("`, `")
        ),
    };
    format!(
        "Across clusters (label `{}`{from}), each workload's evidence summed over its clusters: {} workload{}{}.",
        f.cluster_label,
        f.workloads_total,
        plural(f.workloads_total),
        shown(f.workloads.len(), f.workloads_total),
    )
}

pub fn by_cluster_headline(r: &Report) -> String {
    format!(
        "By cluster, one line per workload and cluster: {} line{}{}.",
        r.workloads_total,
        plural(r.workloads_total),
        shown(r.workloads.len(), r.workloads_total),
    )
}

pub fn footer(r: &Report) -> String {
    // Across clusters, a workload counts once however many clusters it started in.
    let without = match &r.fleet {
        Some(f) => Some(f.workloads_without_incidents),
        None => r.workloads_without_incidents,
    };
    match without {
        Some(n) if n > 0 => format!(
            "\n{n} other workload{} started pods without any incident.\n",
            plural(n)
        ),
        _ => String::new(),
    }
}

/// `Deployment shop/checkout`; "?" for a part the agents did not know.
pub fn workload_name(w: &WorkloadReport) -> String {
    match (&w.namespace, &w.workload_kind, &w.workload) {
        (None, None, None) => "(unknown workload: no pod metadata)".into(),
        (ns, kind, name) => format!(
            "{} {}/{}",
            kind.as_deref().unwrap_or("?"),
            ns.as_deref().unwrap_or("?"),
            name.as_deref().unwrap_or("?")
        ),
    }
}

/// The workload, and its cluster when it names one: `Deployment shop/checkout in
/// cluster east`.
pub fn line_name(w: &WorkloadReport) -> String {
    match &w.cluster {
        Some(c) => format!("{} in cluster {c}", workload_name(w)),
        None => workload_name(w),
    }
}

/// `startup: app → istio-proxy:15001 (classic, 12 refusals)`; `stuck job: keeps the
/// Job running → cloud-sql-proxy (classic)`
pub fn fix_subject(f: &Fix, md: bool) -> String {
    let code = |s: String| if md { format!("`{s}`") } else { s };
    let Some(port) = f.port else {
        let what = if md { "**stuck job**" } else { "stuck job" };
        return format!(
            "{what}: Job pods kept running by {} ({})",
            code(name(&f.sidecar).to_string()),
            f.pattern.as_str()
        );
    };
    let kind = match f.kind {
        crate::detect::Kind::InitDeadlock => "init deadlock, ",
        _ => "",
    };
    let phase = if md {
        format!("**{}**", f.phase.as_str())
    } else {
        f.phase.as_str().to_string()
    };
    let refusals = if f.phase == Phase::Unresolved {
        "refused"
    } else {
        "refusals"
    };
    let mut by = String::new();
    if !f.processes.is_empty() {
        by = format!(": {}", summary(&f.processes));
    }
    if f.guarded {
        by.push_str(", guarded");
    }
    format!(
        "{phase}: {} → {} ({kind}{}, {} {refusals}{by})",
        code(name(&f.container).to_string()),
        code(format!("{}:{}", name(&f.sidecar), port)),
        f.pattern.as_str(),
        f.refusals
    )
}

pub fn name(n: &Option<String>) -> &str {
    n.as_deref().unwrap_or("?")
}

pub fn opt(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

pub fn seconds(v: Option<f64>) -> String {
    match v {
        Some(s) => format!("{s:.2}s"),
        None => "-".into(),
    }
}
