//! `subPathExpr` expanded as the kubelet expands it: `$(VAR)` from the container's
//! `env`, whose values are literal (themselves expanded from the variables before
//! them) or the downward API's pod fields; what the agent cannot read (ConfigMaps,
//! Secrets, resources, `envFrom`) leaves the expression unexpanded, with the reason.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{EnvVar, Pod};

/// A container's environment as far as the pod object tells it.
pub struct ExprEnv {
    vars: HashMap<String, Value>,
    /// The container has `envFrom` (ConfigMaps, Secrets): a variable not in `env` may
    /// come from there.
    env_from: bool,
}

#[derive(Clone)]
enum Value {
    Known(String),
    /// Set from something the agent does not read: why.
    Unknown(String),
}

impl ExprEnv {
    /// The environment of a container with `env` (and `envFrom`, when `env_from`) in
    /// `pod`, as the kubelet builds it: in order, a later entry replacing an earlier one.
    pub fn of(pod: &Pod, env: Option<&[EnvVar]>, env_from: bool) -> ExprEnv {
        let mut vars: HashMap<String, Value> = HashMap::new();
        for e in env.into_iter().flatten() {
            let value = match (&e.value, &e.value_from) {
                (_, Some(from)) => match &from.field_ref {
                    Some(f) => match pod_field(pod, &f.field_path) {
                        Some(v) => Value::Known(v),
                        None => Value::Unknown(format!(
                            "{} (fieldRef {}) is not known yet or not a field the agent reads",
                            e.name, f.field_path
                        )),
                    },
                    None => Value::Unknown(format!(
                        "{} comes from a {}, which the agent does not read",
                        e.name,
                        if from.config_map_key_ref.is_some() {
                            "ConfigMap key"
                        } else if from.secret_key_ref.is_some() {
                            "Secret key"
                        } else {
                            "resource field"
                        }
                    )),
                },
                // An env value's own references: to variables defined before it, kept
                // as written when undefined (the kubelet's rule for env values).
                (value, None) => {
                    let mut unknown = None;
                    let expanded = expand(value.as_deref().unwrap_or(""), |name| {
                        match vars.get(name) {
                            Some(Value::Known(v)) => Some(v.clone()),
                            Some(Value::Unknown(why)) => {
                                unknown.get_or_insert_with(|| why.clone());
                                Some(String::new())
                            }
                            None => None,
                        }
                    });
                    match unknown {
                        Some(why) => Value::Unknown(why),
                        None => Value::Known(expanded),
                    }
                }
            };
            vars.insert(e.name.clone(), value);
        }
        ExprEnv { vars, env_from }
    }

    /// `expr` expanded into a directory on the volume, or why it cannot be: a variable
    /// the agent cannot read, one the container does not set (the kubelet then does
    /// not start it), or a result that is absolute or climbs with `..`.
    pub fn expand(&self, expr: &str) -> Result<String, String> {
        let mut problem = None;
        let expanded = expand(expr, |name| match self.vars.get(name) {
            Some(Value::Known(v)) if !v.is_empty() => Some(v.clone()),
            Some(Value::Known(_)) => {
                problem.get_or_insert_with(|| format!("{name} is empty"));
                Some(String::new())
            }
            Some(Value::Unknown(why)) => {
                problem.get_or_insert_with(|| why.clone());
                Some(String::new())
            }
            None => {
                problem.get_or_insert_with(|| {
                    if self.env_from {
                        format!("{name} is not in the container's env (envFrom's ConfigMaps and Secrets are not read)")
                    } else {
                        format!("{name} is not in the container's env")
                    }
                });
                Some(String::new())
            }
        });
        if let Some(why) = problem {
            return Err(why);
        }
        if expanded.starts_with('/') || expanded.split('/').any(|p| p == "..") {
            return Err(format!(
                "it expands to {expanded}, which the kubelet refuses (absolute or with ..)"
            ));
        }
        Ok(expanded)
    }
}

/// The downward API's pod fields an env var may take (`fieldRef`), as the kubelet
/// renders them; `None` for another path or a field not set yet (the pod IP before
/// the sandbox has one).
fn pod_field(pod: &Pod, path: &str) -> Option<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let keyed = |prefix: &str, map: Option<&std::collections::BTreeMap<String, String>>| {
        let key = path
            .strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")?;
        map?.get(key).cloned()
    };
    let ips = |list: Option<Vec<String>>| list.filter(|l| !l.is_empty()).map(|l| l.join(","));
    match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "spec.nodeName" => spec?.node_name.clone(),
        "spec.serviceAccountName" => spec?.service_account_name.clone(),
        "status.hostIP" => status?.host_ip.clone(),
        "status.podIP" => status?.pod_ip.clone(),
        "status.hostIPs" => ips(status?
            .host_ips
            .as_ref()
            .map(|l| l.iter().map(|i| i.ip.clone()).collect())),
        "status.podIPs" => ips(status?
            .pod_ips
            .as_ref()
            .map(|l| l.iter().map(|i| i.ip.clone()).collect())),
        _ => keyed("metadata.labels", meta.labels.as_ref())
            .or_else(|| keyed("metadata.annotations", meta.annotations.as_ref())),
    }
}

/// Kubernetes' expansion: `$(NAME)` is `lookup(NAME)`, kept as written when that is
/// `None`; `$$` is `$`; any other `$` is itself.
fn expand(input: &str, mut lookup: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "checkout-7d4b9", "namespace": "shop", "uid": "u-1",
                         "labels": {"app": "checkout"}},
            "spec": {"nodeName": "node-a", "containers": []},
            "status": {"podIP": "10.1.0.7", "podIPs": [{"ip": "10.1.0.7"}, {"ip": "fd00::7"}]}
        }))
        .unwrap()
    }

    fn env(json: serde_json::Value) -> Vec<EnvVar> {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn downward_api_fields_and_literal_values_expand_in_order() {
        let env = env(serde_json::json!([
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
            {"name": "DIR", "value": "$(NS)/$(POD_NAME)"},
            {"name": "LATER", "value": "$(AFTER)"},
            {"name": "AFTER", "value": "x"},
        ]));
        let e = ExprEnv::of(&pod(), Some(&env), false);
        assert_eq!(e.expand("$(POD_NAME)").unwrap(), "checkout-7d4b9");
        assert_eq!(e.expand("sock/$(DIR)").unwrap(), "sock/shop/checkout-7d4b9");
        assert_eq!(
            e.expand("$(APP)-$$-$(IPS)").unwrap(),
            "checkout-$-10.1.0.7,fd00::7"
        );
        // A reference to a variable defined later stays as written (the kubelet's rule).
        assert_eq!(e.expand("$(LATER)").unwrap(), "$(AFTER)");
        // An unterminated reference and a lone `$` are themselves.
        assert_eq!(e.expand("a$b$(c").unwrap(), "a$b$(c");
    }

    #[test]
    fn what_cannot_be_expanded_says_why() {
        let env = env(serde_json::json!([
            {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
            {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {"name": "UP", "value": ".."},
            {"name": "EMPTY", "value": ""},
        ]));
        let e = ExprEnv::of(&pod(), Some(&env), true);
        let err = |expr: &str| e.expand(expr).unwrap_err();
        assert_eq!(
            err("$(FROM_CM)"),
            "FROM_CM comes from a ConfigMap key, which the agent does not read"
        );
        assert_eq!(
            err("$(HOST)"),
            "HOST (fieldRef status.hostIP) is not known yet or not a field the agent reads"
        );
        assert_eq!(
            err("$(NOPE)"),
            "NOPE is not in the container's env (envFrom's ConfigMaps and Secrets are not read)"
        );
        assert_eq!(err("$(EMPTY)"), "EMPTY is empty");
        assert_eq!(
            err("a/$(UP)/b"),
            "it expands to a/../b, which the kubelet refuses (absolute or with ..)"
        );
    }
}
