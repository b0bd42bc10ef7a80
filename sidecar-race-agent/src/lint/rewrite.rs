//! `lint --fix` output: the manifests rewritten (documents that need no fix keep
//! their text, comments included), or kustomize patches.

use super::{
    fix,
    input::{self, InputError, Source},
    node::Node,
    options::Options,
    workload::{self, Workload},
};

/// A source with its fixed documents, and how many objects changed.
pub fn fixed_source(source: &Source, opts: &Options) -> Result<(String, usize), InputError> {
    let mut out = String::new();
    let mut changed = 0;
    for (i, doc) in input::parse(source)?.into_iter().enumerate() {
        if i > 0 || source.text.trim_start().starts_with("---") {
            out.push_str("---\n");
        }
        let fixed = match doc.list_items() {
            Some(items) => {
                let mut new_items = Vec::with_capacity(items.len());
                let mut any = false;
                for item in items {
                    match fix_object(item, opts) {
                        Some(n) => {
                            any = true;
                            changed += 1;
                            new_items.push(n);
                        }
                        None => new_items.push(item.clone()),
                    }
                }
                any.then(|| {
                    let mut node = doc.node.clone();
                    node.set("items", Node::Seq(new_items));
                    node
                })
            }
            None => fix_object(&doc.node, opts).inspect(|_| changed += 1),
        };
        match fixed {
            Some(node) => {
                // The document's leading comments stay; the rest is rewritten.
                for line in doc.text.lines().take_while(|l| {
                    let t = l.trim();
                    t.is_empty() || t.starts_with('#')
                }) {
                    out.push_str(line);
                    out.push('\n');
                }
                out.push_str(&to_yaml(&node));
            }
            None => out.push_str(&doc.text),
        }
    }
    Ok((out, changed))
}

fn fix_object(node: &Node, opts: &Options) -> Option<Node> {
    let mut w = workload::analyse(node.clone(), None, &opts.site_sidecars).ok()??;
    workload::attach_namespaces(std::slice::from_mut(&mut w), &opts.namespaces);
    fix::fix(&w, opts)
}

pub fn to_yaml(node: &Node) -> String {
    let mut s = serde_saphyr::to_string(node).expect("a YAML node serializes");
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// One kustomize `patches` entry (a JSON patch with its target) per workload that
/// needs a fix, as a kustomization fragment; `None` when nothing needs fixing.
pub fn kustomize_patches(workloads: &[Workload], opts: &Options) -> Option<String> {
    let mut entries = Vec::new();
    for w in workloads {
        let Some(fixed) = fix::fix(w, opts) else {
            continue;
        };
        let ops = fix::json_patch(w, &fixed);
        if ops.is_empty() {
            continue;
        }
        let mut target = vec![
            ("kind", Node::str(w.kind.clone())),
            ("name", Node::str(w.name.clone())),
        ];
        if let Some(ns) = &w.namespace {
            target.push(("namespace", Node::str(ns.clone())));
        }
        entries.push(Node::map(vec![
            ("target", Node::map(target)),
            ("patch", Node::Str(to_yaml(&Node::Seq(ops)))),
        ]));
    }
    (!entries.is_empty()).then(|| to_yaml(&Node::map(vec![("patches", Node::Seq(entries))])))
}
