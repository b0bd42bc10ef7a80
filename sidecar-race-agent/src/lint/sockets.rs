//! Unix sockets a classic or native sidecar serves to the app through a shared volume
//! (cloud-sql-proxy `--unix-socket`, daprd `--unix-domain-socket`, an OpenTelemetry
//! collector the app sends to at `unix:///var/run/otel/otlp.sock`). The race is the
//! port's: the app connects before the sidecar has created the socket (`ENOENT`).
//!
//! A socket is known from the sidecar's own flags (a known sidecar's socket
//! directory, or a `unix:` URL or `*.sock` path in its args or env) or from an app
//! container naming one the same way; either way it lies in a volume both mount, and
//! the probe tests it at the sidecar's own mount path (the two paths may differ).

use k8s_openapi::api::core::v1::{Container, VolumeMount};

use super::{known, workload::Workload};
use crate::pods::pod_info::{ContainerInfo, Role};

/// A Unix socket `sidecar` serves to app containers that mount its volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedSocket {
    /// In the sidecar's filesystem: the socket file, or the directory it creates its
    /// sockets in (`in_dir`).
    pub path: String,
    pub in_dir: bool,
    pub volume: String,
    /// App containers that mount the volume.
    pub clients: Vec<String>,
}

impl SharedSocket {
    /// The shell test that passes once the socket exists (`test -S` for a file; for a
    /// directory, any socket in it).
    pub fn test(&self) -> String {
        if self.in_dir {
            format!("find {} -type s | grep -q .", self.path)
        } else {
            format!("test -S {}", self.path)
        }
    }

    /// `a Unix socket at P` / `Unix sockets in D`, with its volume.
    pub fn describe(&self) -> String {
        if self.in_dir {
            format!("Unix sockets in {} (volume {})", self.path, self.volume)
        } else {
            format!("a Unix socket at {} (volume {})", self.path, self.volume)
        }
    }
}

/// The Unix sockets `sidecar` serves that an app container can reach (it mounts the
/// same volume), the sidecar's own first.
pub fn shared(w: &Workload, sidecar: &ContainerInfo) -> Vec<SharedSocket> {
    let Some(t) = w.container(&sidecar.name) else {
        return Vec::new();
    };
    let apps: Vec<&Container> = w
        .info
        .containers
        .iter()
        .filter(|c| c.role == Role::App)
        .filter_map(|c| w.container(&c.name))
        .collect();
    // (volume, path relative to its mount, in_dir), in the sidecar's terms.
    let mut found: Vec<(String, String, bool)> = Vec::new();
    let own = known::socket_dirs(sidecar, t)
        .into_iter()
        .map(|d| (d, true))
        .chain(named_sockets(t).into_iter().map(|p| (p, false)));
    for (path, in_dir) in own {
        if let Some((volume, rel)) = in_volume(t, &path) {
            found.push((volume, rel, in_dir));
        }
    }
    for app in &apps {
        for path in named_sockets(app) {
            if let Some((volume, rel)) = in_volume(app, &path) {
                found.push((volume, rel, false));
            }
        }
    }
    let mut out: Vec<SharedSocket> = Vec::new();
    for (volume, rel, in_dir) in found {
        let Some(mount) = mounts(t).find(|m| m.name == volume) else {
            continue;
        };
        let clients: Vec<String> = apps
            .iter()
            .filter(|a| mounts(a).any(|m| m.name == volume))
            .map(|a| a.name.clone())
            .collect();
        let path = join(&mount.mount_path, &rel);
        if clients.is_empty() || out.iter().any(|s| s.path == path) {
            continue;
        }
        out.push(SharedSocket {
            path,
            in_dir,
            volume,
            clients,
        });
    }
    out
}

fn mounts(c: &Container) -> impl Iterator<Item = &VolumeMount> {
    // A subPath mount shows part of the volume at another root: not followed.
    c.volume_mounts
        .iter()
        .flatten()
        .filter(|m| m.sub_path.is_none() && m.sub_path_expr.is_none())
}

/// The volume holding `path` in `c` (the deepest mount containing it) and the path
/// relative to that mount.
fn in_volume(c: &Container, path: &str) -> Option<(String, String)> {
    mounts(c)
        .filter_map(|m| {
            let root = m.mount_path.trim_end_matches('/');
            let rel = path.strip_prefix(root)?;
            (rel.is_empty() || rel.starts_with('/')).then(|| {
                (
                    root.len(),
                    m.name.clone(),
                    rel.trim_start_matches('/').to_string(),
                )
            })
        })
        .max_by_key(|(depth, ..)| *depth)
        .map(|(_, volume, rel)| (volume, rel))
}

fn join(root: &str, rel: &str) -> String {
    let root = root.trim_end_matches('/');
    if rel.is_empty() {
        root.to_string()
    } else {
        format!("{root}/{rel}")
    }
}

/// Socket paths `c` names in its command, args or env values: `unix:` URLs
/// (`unix:///var/run/x.sock`, `unix:/x.sock`) and absolute paths ending in `.sock` or
/// `.socket`, also as a `--flag=` value.
pub fn named_sockets(c: &Container) -> Vec<String> {
    let words = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .flat_map(|a| a.split_whitespace())
        .map(|w| w.split_once('=').map_or(w, |(_, v)| v));
    let env = c.env.iter().flatten().filter_map(|e| e.value.as_deref());
    let mut out: Vec<String> = Vec::new();
    for w in words.chain(env) {
        let w = w.trim_matches(|ch| ch == '"' || ch == '\'');
        let path = match w.strip_prefix("unix:") {
            Some(rest) => format!("/{}", rest.trim_start_matches('/')),
            None if w.starts_with('/') && (w.ends_with(".sock") || w.ends_with(".socket")) => {
                w.to_string()
            }
            None => continue,
        };
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(yaml: &str) -> Container {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn sockets_are_named_by_unix_urls_and_socket_paths() {
        let c = container(
            "name: app\nargs: [\"--otlp=unix:///var/run/otel/otlp.sock\", \"--x\", \"/tmp/a.socket\", \"/etc/config.yaml\"]\nenv:\n- {name: DAPR, value: \"unix:/tmp/dapr/dapr-http.socket\"}\n",
        );
        assert_eq!(
            named_sockets(&c),
            [
                "/var/run/otel/otlp.sock",
                "/tmp/a.socket",
                "/tmp/dapr/dapr-http.socket"
            ]
        );
    }

    #[test]
    fn a_path_lies_in_the_deepest_mount_that_holds_it() {
        let c = container(
            "name: s\nvolumeMounts:\n- {name: root, mountPath: /var}\n- {name: sockets, mountPath: /var/run/otel/}\n- {name: part, mountPath: /p, subPath: x}\n",
        );
        assert_eq!(
            in_volume(&c, "/var/run/otel/otlp.sock"),
            Some(("sockets".into(), "otlp.sock".into()))
        );
        assert_eq!(
            in_volume(&c, "/var/runner.sock"),
            Some(("root".into(), "runner.sock".into()))
        );
        assert_eq!(
            in_volume(&c, "/p/a.sock"),
            None,
            "subPath mounts are not followed"
        );
        assert_eq!(in_volume(&c, "/variable.sock"), None);
    }
}
