//! `lint --fix`: the native-sidecar migration, written into the manifest.
//!
//! - Each classic sidecar that serves a port or a Unix socket in a volume an app also
//!   mounts, runs in a Job's pod or is waited for by
//!   an init container moves from `containers` to `initContainers` (before the first
//!   init container that dials it, else last) with `restartPolicy: Always`, and gets
//!   a `startupProbe` ([`rules::probe_for`]) unless it has one (with the flags that
//!   turn its readiness endpoint on, when it has one only when asked; none when no
//!   port to probe is known). A `preStop` hook that only sleeps goes: the kubelet now
//!   stops the sidecar after the app.
//! - A native sidecar that an init container listed before it dials moves before
//!   the first such init container (SR007).
//! - A native sidecar without a startupProbe gets one; one probing a port clients do
//!   not use gets it pointed at the right one.
//! - An app container's `sleep N && …` wrapper goes, leaving its own command.
//! - A pod that an injector adds a classic sidecar to gets the injector's
//!   native-sidecar annotation, where it has one.

use super::{
    finding::Rule,
    injection, known,
    node::Node,
    options::Options,
    outcome::ignores,
    refs,
    rules::{self, ProbePlan, ProbeSpec},
    sockets,
    workload::Workload,
};
use crate::pods::pod_info::{ContainerInfo, Role};

/// The fixed object, or `None` when nothing needs fixing.
pub fn fix(w: &Workload, opts: &Options) -> Option<Node> {
    let mut node = w.node.clone();
    let template = node.at_mut(w.template_path)?;
    let mut changed = false;
    let spec = template.get_mut("spec")?;
    for s in sidecars_to_move(w) {
        changed |= move_to_init(w, s, opts, spec);
    }
    if !ignores(w, Rule::InitWaitsForContainer) {
        for s in w
            .info
            .containers
            .iter()
            .filter(|c| c.role == Role::NativeSidecar)
        {
            changed |= move_before_waiters(w, s, spec);
        }
    }
    for s in w
        .info
        .containers
        .iter()
        .filter(|c| c.role == Role::NativeSidecar)
    {
        changed |= probe_native(w, s, opts, spec);
    }
    if w.info.containers.iter().any(|c| c.role.is_sidecar()) {
        for app in w.info.containers.iter().filter(|c| c.role == Role::App) {
            changed |= unwrap_sleep(w, &app.name, spec);
        }
    }
    for inj in injection::injections(w, opts) {
        if inj.injector.id == "linkerd" && !ignores(w, Rule::PreStopSleep) {
            changed |= drop_linkerd_wait(template);
        }
        let native = &inj.injector.native;
        if let (Some(key), Some(value)) = (&native.annotation, &native.value)
            && !inj.mode.native()
            && !ignores(w, Rule::MeshNativeSidecarMode)
        {
            set_annotation(template, key, value);
            changed = true;
        }
    }
    changed.then_some(node)
}

/// Classic sidecars the fix makes native, in their order in `containers`.
fn sidecars_to_move(w: &Workload) -> Vec<&ContainerInfo> {
    let waited_for: Vec<u16> = w
        .info
        .containers
        .iter()
        .filter(|c| c.role == Role::Init)
        .filter_map(|c| w.container(&c.name))
        .flat_map(refs::dialed_ports)
        .collect();
    w.info
        .containers
        .iter()
        .filter(|c| c.role == Role::ClassicSidecar)
        .filter(|c| {
            let served = rules::served_ports(w, c);
            let serves = !served.is_empty() || known::sidecar(c).is_some_and(known::serves_app);
            let wanted = |rule: Rule| !ignores(w, rule);
            (serves && wanted(Rule::ClassicSidecarServesPort))
                || (!sockets::shared(w, c).is_empty() && wanted(Rule::ClassicSidecarServesSocket))
                || (w.is_job() && wanted(Rule::JobWithClassicSidecar))
                || (served.iter().any(|p| waited_for.contains(p))
                    && wanted(Rule::InitWaitsForContainer))
        })
        .collect()
}

fn probe_node(p: &ProbeSpec) -> Node {
    let action = match p {
        ProbeSpec::Http { port, path } => (
            "httpGet",
            Node::map(vec![
                ("path", Node::str(path)),
                ("port", Node::UInt(u64::from(*port))),
            ]),
        ),
        ProbeSpec::Tcp { port } => (
            "tcpSocket",
            Node::map(vec![("port", Node::UInt(u64::from(*port)))]),
        ),
        ProbeSpec::Socket { test } => (
            "exec",
            Node::map(vec![(
                "command",
                Node::Seq(vec![
                    Node::str("sh"),
                    Node::str("-c"),
                    Node::str(test.as_str()),
                ]),
            )]),
        ),
    };
    Node::map(vec![
        action,
        ("periodSeconds", Node::UInt(1)),
        ("failureThreshold", Node::UInt(120)),
    ])
}

fn named_index(list: &[Node], name: &str) -> Option<usize> {
    list.iter()
        .position(|c| c.get("name").and_then(Node::as_str) == Some(name))
}

fn move_to_init(w: &Workload, s: &ContainerInfo, opts: &Options, spec: &mut Node) -> bool {
    let Some(containers) = spec.get_mut("containers").and_then(Node::as_seq_mut) else {
        return false;
    };
    let Some(i) = named_index(containers, &s.name) else {
        return false;
    };
    let mut c = containers.remove(i);
    let after = if c.get("image").is_some() {
        "image"
    } else {
        "name"
    };
    c.set_after(after, "restartPolicy", Node::str("Always"));
    if c.get("startupProbe").is_none() {
        give_probe(&mut c, rules::probe_for(w, s, opts));
    }
    if w.container(&s.name).and_then(refs::prestop_sleep).is_some()
        && let Some(lifecycle) = c.get_mut("lifecycle")
    {
        lifecycle.remove("preStop");
        if lifecycle == &Node::Map(Vec::new()) {
            c.remove("lifecycle");
        }
    }
    let inits = spec.map_entry_seq("initContainers");
    // Before the first init container that dials it, else after the others.
    let at = first_waiter(w, s, inits).unwrap_or(inits.len());
    inits.insert(at, c);
    true
}

/// The index in `inits` of the first init container that dials a port `s` serves.
fn first_waiter(w: &Workload, s: &ContainerInfo, inits: &[Node]) -> Option<usize> {
    let served = rules::served_ports(w, s);
    inits.iter().position(|init| {
        let name = init.get("name").and_then(Node::as_str).unwrap_or_default();
        w.info.role(name) == Some(Role::Init)
            && w.container(name)
                .is_some_and(|t| refs::dialed_ports(t).iter().any(|p| served.contains(p)))
    })
}

/// Moves native sidecar `s` before the first init container that dials it, when
/// that one is listed before it (SR007: it would wait for `s` forever).
fn move_before_waiters(w: &Workload, s: &ContainerInfo, spec: &mut Node) -> bool {
    let Some(inits) = spec.get_mut("initContainers").and_then(Node::as_seq_mut) else {
        return false;
    };
    let (Some(from), Some(to)) = (named_index(inits, &s.name), first_waiter(w, s, inits)) else {
        return false;
    };
    if to > from {
        return false;
    }
    let c = inits.remove(from);
    inits.insert(to, c);
    true
}

fn probe_native(w: &Workload, s: &ContainerInfo, opts: &Options, spec: &mut Node) -> bool {
    if rules::served_ports(w, s).is_empty()
        && sockets::shared(w, s).is_empty()
        && !known::sidecar(s).is_some_and(known::serves_app)
    {
        return false;
    }
    let wrong_port = s.startup_probe.as_ref().is_some_and(|p| {
        p.port().is_some()
            && rules::check(w, opts)
                .iter()
                .any(|f| f.rule == Rule::StartupProbeWrongPort && f.containers.contains(&s.name))
    });
    if s.startup_probe.is_some() && !wrong_port {
        return false;
    }
    // For a wrong port, clients dial another port of it: probe_for picks the
    // readiness endpoint, the evidence or that port.
    let Some(inits) = spec.get_mut("initContainers").and_then(Node::as_seq_mut) else {
        return false;
    };
    let Some(i) = named_index(inits, &s.name) else {
        return false;
    };
    give_probe(&mut inits[i], rules::probe_for(w, s, opts))
}

/// Sets the planned startupProbe on container `c`, with the args it needs; false
/// when no port to probe is known.
fn give_probe(c: &mut Node, plan: ProbePlan) -> bool {
    let ProbePlan::Add(probe, args) = plan else {
        return false;
    };
    if !args.is_empty() {
        let list = match c.get_mut("args").and_then(Node::as_seq_mut) {
            Some(list) => list,
            None => {
                c.set("args", Node::Seq(Vec::new()));
                c.get_mut("args")
                    .and_then(Node::as_seq_mut)
                    .expect("just set")
            }
        };
        list.extend(args.into_iter().map(Node::Str));
    }
    c.set("startupProbe", probe_node(&probe));
    true
}

fn unwrap_sleep(w: &Workload, app: &str, spec: &mut Node) -> bool {
    let Some((command, args)) = w.container(app).and_then(refs::unwrapped) else {
        return false;
    };
    let Some(containers) = spec.get_mut("containers").and_then(Node::as_seq_mut) else {
        return false;
    };
    let Some(i) = named_index(containers, app) else {
        return false;
    };
    let strings = |v: Vec<String>| Node::Seq(v.into_iter().map(Node::Str).collect());
    let c = &mut containers[i];
    c.set("command", strings(command));
    match args {
        Some(a) => c.set("args", strings(a)),
        None => {
            c.remove("args");
        }
    }
    true
}

fn set_annotation(template: &mut Node, key: &str, value: &str) {
    template
        .map_entry("metadata")
        .map_entry("annotations")
        .set(key, Node::str(value));
}

/// Drops Linkerd's preStop sleep annotation (SR006) from the pod template.
fn drop_linkerd_wait(template: &mut Node) -> bool {
    template
        .at_mut(&["metadata", "annotations"])
        .and_then(|a| a.remove(known::LINKERD_WAIT_BEFORE_EXIT))
        .is_some()
}

impl Node {
    /// The list at `key`, created empty when missing.
    fn map_entry_seq(&mut self, key: &str) -> &mut Vec<Node> {
        if self.get(key).and_then(Node::as_seq).is_none() {
            self.remove(key);
            // A new `initContainers` reads best right before `containers`.
            if let Node::Map(entries) = self {
                let at = entries
                    .iter()
                    .position(|(k, _)| k == "containers")
                    .unwrap_or(entries.len());
                entries.insert(at, (key.to_string(), Node::Seq(Vec::new())));
            }
        }
        self.get_mut(key)
            .and_then(Node::as_seq_mut)
            .expect("just set")
    }
}

/// RFC 6902 JSON-pointer escaping of one path segment.
fn pointer_segment(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// A JSON patch (RFC 6902) from `before` to `after` (a [`fix`] of it): the pod
/// spec's container lists replaced whole, annotations added one by one.
pub fn json_patch(w: &Workload, after: &Node) -> Vec<Node> {
    let base: String = w
        .template_path
        .iter()
        .map(|s| format!("/{}", pointer_segment(s)))
        .collect();
    let (Some(old), Some(new)) = (w.node.at(w.template_path), after.at(w.template_path)) else {
        return Vec::new();
    };
    let op = |path: String, value: Node| {
        Node::map(vec![
            ("op", Node::str("add")),
            ("path", Node::Str(path)),
            ("value", value),
        ])
    };
    let mut ops = Vec::new();
    let old_ann = old.at(&["metadata", "annotations"]);
    if let Some(Node::Map(entries)) = old_ann {
        let new_ann = new.at(&["metadata", "annotations"]);
        for (k, _) in entries {
            if new_ann.and_then(|a| a.get(k)).is_none() {
                ops.push(Node::map(vec![
                    ("op", Node::str("remove")),
                    (
                        "path",
                        Node::Str(format!(
                            "{base}/metadata/annotations/{}",
                            pointer_segment(k)
                        )),
                    ),
                ]));
            }
        }
    }
    if let Some(Node::Map(entries)) = new.at(&["metadata", "annotations"]) {
        for (k, v) in entries {
            if old_ann.and_then(|a| a.get(k)) == Some(v) {
                continue;
            }
            if old.get("metadata").is_none() {
                ops.push(op(
                    format!("{base}/metadata"),
                    new.get("metadata").cloned().unwrap_or(Node::Null),
                ));
                break;
            }
            if old_ann.is_none() {
                ops.push(op(
                    format!("{base}/metadata/annotations"),
                    new.at(&["metadata", "annotations"])
                        .cloned()
                        .unwrap_or(Node::Null),
                ));
                break;
            }
            ops.push(op(
                format!("{base}/metadata/annotations/{}", pointer_segment(k)),
                v.clone(),
            ));
        }
    }
    for list in ["initContainers", "containers"] {
        let (o, n) = (old.at(&["spec", list]), new.at(&["spec", list]));
        if o != n
            && let Some(n) = n
        {
            ops.push(op(format!("{base}/spec/{list}"), n.clone()));
        }
    }
    ops
}
