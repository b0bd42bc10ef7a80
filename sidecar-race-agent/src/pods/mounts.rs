//! A container's volume mounts, and which volume a path inside the container lies on:
//! how two containers that mount one `emptyDir` at different paths name the same
//! Unix socket.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::VolumeMount;
use serde::{Deserialize, Serialize};

use super::sub_path_expr::ExprEnv;

/// One `volumeMounts[]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    pub volume: String,
    /// Absolute, without a trailing `/`.
    pub mount_path: String,
    /// The directory of the volume mounted there (`subPath`, or `subPathExpr`
    /// expanded), empty for its root.
    pub sub_path: String,
    /// Why its `subPathExpr` could not be expanded (`sub_path` then holds the
    /// expression as written): the advice says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unexpanded: Option<String>,
}

/// Where a path inside a container lies on a pod volume.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OnVolume {
    pub volume: String,
    /// Relative to the volume's root, without a leading `/`.
    pub relative: String,
}

impl Mount {
    /// From the pod spec, a `subPathExpr` expanded in the container's `env`. Mount
    /// paths that are not absolute cannot hold an absolute socket path: they are
    /// dropped, which leaves those sockets matched by path.
    pub fn from_spec(m: &VolumeMount, env: &ExprEnv) -> Option<Mount> {
        let mount_path = normalise(&m.mount_path)?.into_owned();
        let (sub_path, unexpanded) = match m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
            Some(expr) => match env.expand(expr) {
                Ok(dir) => (dir, None),
                Err(why) => (expr.to_string(), Some(format!("subPathExpr {expr}: {why}"))),
            },
            None => (m.sub_path.clone().unwrap_or_default(), None),
        };
        Some(Mount {
            volume: m.name.clone(),
            mount_path,
            sub_path: sub_path.trim_matches('/').to_string(),
            unexpanded,
        })
    }
}

/// The volume and relative path of `path` in a container with `mounts`: the mount
/// with the longest mount path that contains it. `None` for a relative path, or one
/// on no volume (the container's own filesystem).
pub fn on_volume(mounts: &[Mount], path: &str) -> Option<OnVolume> {
    let path = normalise(path)?;
    mounts
        .iter()
        .filter_map(|m| {
            let rest = if m.mount_path == "/" {
                path.strip_prefix('/')
            } else {
                path.strip_prefix(&m.mount_path)
                    .and_then(|r| r.strip_prefix('/'))
            }?;
            Some((m, rest))
        })
        .max_by_key(|(m, _)| m.mount_path.len())
        .map(|(m, rest)| OnVolume {
            volume: m.volume.clone(),
            relative: match (m.sub_path.as_str(), rest) {
                (sub, "") => sub.to_string(),
                ("", rest) => rest.to_string(),
                (sub, rest) => format!("{sub}/{rest}"),
            },
        })
}

/// An absolute path without empty or `.` components and without a trailing `/`;
/// `None` when relative or when it climbs with `..` (not resolvable without the
/// container's filesystem). A path already so (what clients dial) is borrowed.
fn normalise(path: &str) -> Option<Cow<'_, str>> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts = path.split('/').skip(1);
    if path == "/" || parts.all(|p| !matches!(p, "" | "." | "..")) {
        return Some(Cow::Borrowed(path));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    Some(Cow::Owned(format!("/{}", parts.join("/"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env() -> ExprEnv {
        ExprEnv::of(&Default::default(), None, false)
    }

    fn mount(volume: &str, path: &str, sub: Option<&str>) -> Mount {
        Mount::from_spec(
            &VolumeMount {
                name: volume.into(),
                mount_path: path.into(),
                sub_path: sub.map(Into::into),
                ..Default::default()
            },
            &no_env(),
        )
        .expect("absolute")
    }

    #[test]
    fn one_empty_dir_at_two_paths_gives_one_volume_path() {
        let app = [mount("dapr-sock", "/var/run/dapr", None)];
        let sidecar = [mount("dapr-sock", "/sockets/", None)];
        let from_app = on_volume(&app, "/var/run/dapr/dapr-grpc.sock").unwrap();
        let from_sidecar = on_volume(&sidecar, "/sockets//./dapr-grpc.sock").unwrap();
        assert_eq!(from_app, from_sidecar);
        assert_eq!(from_app.volume, "dapr-sock");
        assert_eq!(from_app.relative, "dapr-grpc.sock");
    }

    #[test]
    fn the_deepest_mount_wins_and_sub_paths_are_part_of_the_volume_path() {
        let mounts = [
            mount("root", "/", None),
            mount("run", "/var/run", None),
            mount("shared", "/var/run/otel", Some("collector/")),
        ];
        let on = on_volume(&mounts, "/var/run/otel/otlp.sock").unwrap();
        assert_eq!(
            (on.volume.as_str(), on.relative.as_str()),
            ("shared", "collector/otlp.sock")
        );
        let on = on_volume(&mounts, "/var/run/other.sock").unwrap();
        assert_eq!(on.volume, "run");
        // A prefix that is not a path component is not that mount.
        let on = on_volume(&mounts, "/var/running.sock").unwrap();
        assert_eq!(
            (on.volume.as_str(), on.relative.as_str()),
            ("root", "var/running.sock")
        );
    }

    #[test]
    fn relative_climbing_and_unmounted_paths_are_on_no_volume() {
        let mounts = [mount("sock", "/sockets", None)];
        assert_eq!(on_volume(&mounts, "app.sock"), None);
        assert_eq!(on_volume(&mounts, "/sockets/../etc/x.sock"), None);
        assert_eq!(on_volume(&mounts, "/tmp/app.sock"), None);
        assert!(
            Mount::from_spec(
                &VolumeMount {
                    name: "v".into(),
                    mount_path: "relative/dir".into(),
                    ..Default::default()
                },
                &no_env()
            )
            .is_none()
        );
    }

    /// #50: `subPathExpr: $(POD_NAME)` is the pod's own directory of the volume, not
    /// its root: the app's socket meets the sidecar's bind in that directory, and two
    /// pods' (or containers') different expansions are different sockets.
    #[test]
    fn a_sub_path_expr_is_expanded_from_the_containers_env() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "checkout-1"}
        }))
        .unwrap();
        let env: Vec<k8s_openapi::api::core::v1::EnvVar> =
            serde_json::from_value(serde_json::json!([
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
            ]))
            .unwrap();
        let env = ExprEnv::of(&pod, Some(&env), false);
        let expr = |e: &str| {
            Mount::from_spec(
                &VolumeMount {
                    name: "sock".into(),
                    mount_path: "/var/run/app".into(),
                    sub_path_expr: Some(e.into()),
                    ..Default::default()
                },
                &env,
            )
            .unwrap()
        };
        let app = [expr("$(POD_NAME)")];
        let sidecar = [mount("sock", "/sockets", None)];
        let dialed = on_volume(&app, "/var/run/app/app.sock").unwrap();
        assert_eq!(
            dialed,
            on_volume(&sidecar, "/sockets/checkout-1/app.sock").unwrap()
        );
        assert_ne!(dialed, on_volume(&sidecar, "/sockets/app.sock").unwrap());
        assert_eq!(app[0].unexpanded, None);
        let secret = expr("$(FROM_SECRET)");
        assert_eq!(
            secret.unexpanded.as_deref(),
            Some(
                "subPathExpr $(FROM_SECRET): FROM_SECRET comes from a Secret key, which the agent does not read"
            )
        );
    }
}
