//! Workloads from manifests: every object of the sources analysed, with the labels
//! of the Namespace objects among them.

use std::collections::BTreeMap;

use super::{
    input,
    options::Options,
    workload::{self, NamespaceMeta, Workload},
};

/// The labels and annotations of the Namespace objects in `sources`.
pub fn namespaces(sources: &[input::Source]) -> BTreeMap<String, NamespaceMeta> {
    sources
        .iter()
        .filter_map(|s| input::objects(s).ok())
        .flatten()
        .filter_map(|o| workload::namespace(&o.node))
        .collect()
}

/// The workloads of `sources` (with the labels of Namespace objects among them),
/// and what could not be read.
pub fn load(sources: &[input::Source], opts: &Options) -> (Vec<Workload>, Vec<String>) {
    let mut workloads = Vec::new();
    let mut errors = Vec::new();
    let mut namespaces = BTreeMap::new();
    for source in sources {
        match input::objects(source) {
            Ok(objects) => {
                for o in objects {
                    namespaces.extend(workload::namespace(&o.node));
                    match workload::analyse(o.node, Some(o.location), &opts.site_sidecars) {
                        Ok(Some(w)) => workloads.push(w),
                        Ok(None) => {}
                        Err(e) => errors.push(e.to_string()),
                    }
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    workload::attach_namespaces(&mut workloads, &namespaces);
    (workloads, errors)
}
