//! The policy itself: the rules it judges ([`JUDGED`]), their CEL (built from
//! [`super::cel`]'s pieces) and the YAML it is committed as ([`policy_yaml`]).

use super::cel;
use crate::lint::{IGNORE_ANNOTATION, Rule};

/// The policy's and its binding's name.
pub const NAME: &str = "sidecar-race";

/// The rules the policy judges, with what each finding says: lint's reason and
/// fix, shortened. The others need what a template does not hold (injectors, mesh
/// defaults, the cluster's version, the ports clients dial at run time).
pub const JUDGED: &[(Rule, &str)] = &[
    (
        Rule::ClassicSidecarServesPort,
        "classic sidecar(s) in containers[] serving a port: they start and stop together with the app, so its first and last connections race them. Fix: move them to initContainers with restartPolicy: Always and a startupProbe (`kubectl sidecar-race lint --fix` writes it)",
    ),
    (
        Rule::JobWithClassicSidecar,
        "classic sidecar(s) in a Job's pod: they keep running after the app containers finish, so the pod never completes. Fix: move them to initContainers with restartPolicy: Always",
    ),
    (
        Rule::NativeSidecarWithoutStartupProbe,
        "native sidecar(s) serving a port without a startupProbe: the app containers start as soon as they have started, not once they serve. Fix: give each a startupProbe (`kubectl sidecar-race lint --fix` adds it)",
    ),
    (
        Rule::SleepBeforeApp,
        "app container(s) running `sleep N` before their own command: a guess at how long the sidecars take to serve. Fix: make the sidecars native with a startupProbe and drop the sleep",
    ),
    (
        Rule::InitWaitsForContainer,
        "init container(s) dialing a port of a container that starts only after them (in containers[], or a native sidecar listed later): the pod never starts. Fix: make that container a native sidecar listed before them, with a startupProbe",
    ),
];

/// The variable holding the names of the containers `rule` finds.
fn finding_variable(rule: Rule) -> String {
    rule.id().to_ascii_lowercase()
}

/// The names of the containers `rule` finds, as a CEL list of strings.
fn findings(rule: Rule) -> String {
    use cel::{declares_tcp, dials, is_known_server, seen_ports, serves_socket, sleeps_first};
    match rule {
        Rule::ClassicSidecarServesPort => format!(
            "variables.classic.filter(c, {} || ({} && !{})).map(c, c.name)",
            declares_tcp("c"),
            is_known_server("c"),
            serves_socket("c")
        ),
        Rule::JobWithClassicSidecar => {
            "object.kind in ['Job', 'CronJob'] ? variables.classic.map(c, c.name) : []".into()
        }
        Rule::NativeSidecarWithoutStartupProbe => format!(
            "variables.natives.filter(c, !has(c.startupProbe) && ({} || {})).map(c, c.name)",
            declares_tcp("c"),
            is_known_server("c")
        ),
        Rule::SleepBeforeApp => format!(
            "size(variables.classic) + size(variables.natives) == 0 ? [] : variables.containers.filter(c, !(c.name in variables.classic.map(x, x.name)) && {}).map(c, c.name)",
            sleeps_first("c")
        ),
        Rule::InitWaitsForContainer => format!(
            "variables.inits.filter(i, i.?restartPolicy.orValue('') != 'Always' && (variables.containers + variables.natives.filter(n, variables.initNames.indexOf(n.name) > variables.initNames.indexOf(i.name))).exists(s, ({}).exists(p, {}))).map(i, i.name)",
            seen_ports("s"),
            dials("i", "p")
        ),
        other => unreachable!("{} is not judged by the policy", other.id()),
    }
}

/// (name, expression) of the policy's variables, in evaluation order.
fn variables() -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = [
        (
            "template",
            "object.kind == 'CronJob' ? object.spec.jobTemplate.spec.template : object.spec.template".to_string(),
        ),
        ("knownNames", cel::known_names()),
        (
            "podAnnotations",
            "variables.template.?metadata.?annotations.orValue({})".into(),
        ),
        // lint reads the workload's annotations, then its template's (which win).
        (
            "ignored",
            format!(
                "variables.podAnnotations[?{key}].orValue(object.metadata.?annotations.orValue({{}})[?{key}].orValue('')).split(',').map(i, i.trim().lowerAscii())",
                key = cel::string(IGNORE_ANNOTATION)
            ),
        ),
        (
            "sidecarNames",
            format!(
                "variables.podAnnotations[?{}].orValue('').split(',').map(n, n.trim())",
                cel::string(crate::pods::sidecars::ANNOTATION)
            ),
        ),
        ("containers", "variables.template.spec.containers".into()),
        (
            "inits",
            "variables.template.spec.?initContainers.orValue([])".into(),
        ),
        ("initNames", "variables.inits.map(c, c.name)".into()),
        (
            "classic",
            format!("variables.containers.filter(c, {})", cel::is_classic("c")),
        ),
        (
            "natives",
            "variables.inits.filter(c, c.?restartPolicy.orValue('') == 'Always')".into(),
        ),
    ]
    .into_iter()
    .map(|(n, e)| (n.to_string(), e))
    .collect();
    for (rule, _) in JUDGED {
        vars.push((finding_variable(*rule), findings(*rule)));
    }
    vars
}

/// One validation per judged rule: it fails when the rule finds containers and the
/// workload does not ignore it.
fn validations() -> Vec<(String, String, String)> {
    JUDGED
        .iter()
        .map(|(rule, says)| {
            let var = finding_variable(*rule);
            let ignore = cel::strings(["all", &rule.id().to_ascii_lowercase(), rule.name()]);
            let expression =
                format!("size(variables.{var}) == 0 || variables.ignored.exists(i, i in {ignore})");
            let head = format!("{} {}: ", rule.id(), rule.name());
            let tail = format!(
                ": {says}. To accept it, annotate the workload {IGNORE_ANNOTATION}: {}",
                rule.id()
            );
            let message = format!(
                "object.kind + ' ' + object.metadata.?name.orValue('') + ': ' + {} + variables.{var}.join(', ') + {}",
                cel::string(&head),
                cel::string(&tail)
            );
            (expression, message, format!("{head}{says}"))
        })
        .collect()
}

const HEADER: &str = "\
# GENERATED from sidecar-race-agent/data/known-sidecars.yaml and lint's rules by
# sidecar-race-agent/src/admission/: do not edit. After changing the table, run
#   UPDATE_GOLDEN=1 cargo test -p sidecar-race-agent --test admission_policy
# (which rewrites this file and the chart's copy; the test fails until you do).
#
# lint's static rules, checked by the API server when a workload is applied
# (docs/admission.md): the pod templates of Deployments, StatefulSets, DaemonSets,
# Jobs and CronJobs, not Pods, so one apply gives one warning. binding.yaml says
# what a failure does (Warn and Audit); deploy/overlays/admission-deny/ refuses.
";

/// The ValidatingAdmissionPolicy, as committed in deploy/admission/policy.yaml.
pub fn policy_yaml() -> String {
    let mut y = String::from(HEADER);
    y.push_str(&format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {NAME}
  labels:
    app.kubernetes.io/name: sidecar-race-agent
    app.kubernetes.io/part-of: sidecar-race
    app.kubernetes.io/component: admission
spec:
  # A policy that cannot be evaluated (a cost limit, a bug) must not stop deploys.
  failurePolicy: Ignore
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments, statefulsets, daemonsets]
    - apiGroups: [batch]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [jobs, cronjobs]
  matchConditions:
  # A CronJob's Jobs were judged with the CronJob.
  - name: not-made-by-a-cronjob
    expression: >-
      !(object.kind == 'Job' && object.metadata.?ownerReferences.orValue([]).exists(o, o.kind == 'CronJob'))
  # Updates that leave the spec alone (labels, finalizers, the garbage collector's
  # deletion) are not judged again: under Deny they must still pass.
  - name: spec-created-or-changed
    expression: >-
      request.operation == 'CREATE' || object.spec != oldObject.spec
  variables:
"
    ));
    for (name, expression) in variables() {
        y.push_str(&format!(
            "  - name: {name}\n    expression: >-\n      {expression}\n"
        ));
    }
    y.push_str("  validations:\n");
    for (expression, message, fallback) in validations() {
        y.push_str(&format!(
            "  - expression: >-\n      {expression}\n    reason: Invalid\n    message: >-\n      {fallback}\n    messageExpression: >-\n      {message}\n"
        ));
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_judged_rule_is_an_ordering_rule_with_a_finding_list() {
        let yaml = policy_yaml();
        for (rule, _) in JUDGED {
            assert!(rule.is_ordering(), "{}", rule.id());
            assert!(yaml.contains(&format!("- name: {}\n", finding_variable(*rule))));
            assert!(yaml.contains(&format!("{} {}: ", rule.id(), rule.name())));
        }
    }
}
