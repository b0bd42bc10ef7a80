//! What a container's command line and environment say: the loopback ports it dials
//! (`localhost:5432`, `nc -z 127.0.0.1 15000`, `DB_PORT=5432`), a `sleep N` wrapped
//! around its command, a `preStop` hook that only sleeps.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Container;

/// Loopback hosts: a port beside one is a port of this pod.
pub const LOCAL_HOSTS: &[&str] = &["localhost", "127.0.0.1", "[::1]", "::1", "0.0.0.0"];
/// Shells whose `-c` script may wrap the app in a `sleep`.
pub const SHELLS: &[&str] = &["sh", "bash", "ash", "dash", "zsh"];

/// Loopback ports `c` dials, per its command, args and env.
pub fn dialed_ports(c: &Container) -> BTreeSet<u16> {
    let mut out = BTreeSet::new();
    let line = |v: &Option<Vec<String>>| v.as_deref().unwrap_or_default().join(" ");
    scan(&line(&c.command), &mut out);
    scan(&line(&c.args), &mut out);
    for e in c.env.iter().flatten() {
        let Some(value) = e.value.as_deref() else {
            continue;
        };
        scan(value, &mut out);
        if e.name.to_ascii_uppercase().ends_with("PORT")
            && let Ok(port) = value.trim().parse::<u16>()
        {
            out.insert(port);
        }
    }
    out
}

/// `c` names a loopback host without a port (`DB_HOST=127.0.0.1`, `--db-host=localhost`):
/// it dials whatever serves there, on a port it leaves to a default.
pub fn names_loopback_host(c: &Container) -> bool {
    let env = c.env.iter().flatten().filter_map(|e| e.value.as_deref());
    let args = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .filter_map(|a| a.split_once('=').map(|(_, v)| v));
    env.chain(args)
        .any(|v| LOCAL_HOSTS.contains(&v.trim()) && v.trim() != "0.0.0.0")
}

fn leading_port(s: &str) -> Option<u16> {
    let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    let rest = &s[digits.len()..];
    let ends = rest
        .chars()
        .next()
        .is_none_or(|ch| !ch.is_ascii_alphanumeric());
    (ends && !digits.is_empty())
        .then(|| digits.parse().ok())
        .flatten()
}

/// `host:PORT`, `host PORT` for a loopback host; `-p N`/`--port N` beside one.
fn scan(text: &str, out: &mut BTreeSet<u16>) {
    let mut local = false;
    for host in LOCAL_HOSTS {
        for (i, _) in text.match_indices(host) {
            // `10.127.0.0.1` or `notlocalhost` are other hosts.
            let before = text[..i].chars().next_back();
            if before.is_some_and(|ch| ch.is_ascii_alphanumeric() || ch == '.') {
                continue;
            }
            local = true;
            let after = &text[i + host.len()..];
            let port = match after.strip_prefix(':') {
                Some(p) => leading_port(p),
                None if after.starts_with(' ') => leading_port(after.trim_start()),
                None => None,
            };
            out.extend(port);
        }
    }
    if local {
        let words: Vec<&str> = text.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            if let Some(v) = w.strip_prefix("--port=").or_else(|| w.strip_prefix("-p=")) {
                out.extend(leading_port(v));
            } else if matches!(*w, "-p" | "--port" | "-port") {
                out.extend(words.get(i + 1).and_then(|n| leading_port(n)));
            }
        }
    }
}

/// A `sleep N` run before the app's own command, in a shell script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SleepWrap {
    /// `sleep 10`.
    pub sleep: String,
    /// The app's own command, as the script ran it after the sleep.
    pub rest: String,
}

fn is_shell(word: &str) -> bool {
    SHELLS.contains(&word.rsplit('/').next().unwrap_or(word))
}

/// Where a container's shell script is: (in `args`?, index).
fn script_position(c: &Container) -> Option<(bool, usize)> {
    let command = c.command.as_deref().unwrap_or_default();
    let args = c.args.as_deref().unwrap_or_default();
    if !command.first().is_some_and(|w| is_shell(w)) {
        return None;
    }
    let all: Vec<&String> = command.iter().chain(args).collect();
    let flag = all
        .iter()
        .position(|w| w.starts_with('-') && w.contains('c'))?;
    let at = flag + 1;
    (at < all.len()).then(|| {
        if at < command.len() {
            (false, at)
        } else {
            (true, at - command.len())
        }
    })
}

fn script(c: &Container) -> Option<&str> {
    let (in_args, i) = script_position(c)?;
    let list = if in_args { &c.args } else { &c.command };
    list.as_ref()?.get(i).map(String::as_str)
}

/// `sleep 10 && exec /app` → (`sleep 10`, `exec /app`).
fn split_sleep(script: &str) -> Option<SleepWrap> {
    let s = script.trim_start();
    let after = s.strip_prefix("sleep ")?.trim_start();
    let n: String = after
        .chars()
        .take_while(|ch| ch.is_ascii_digit() || *ch == '.' || *ch == 's')
        .collect();
    if n.is_empty() || !n.starts_with(|ch: char| ch.is_ascii_digit()) {
        return None;
    }
    let tail = after[n.len()..].trim_start();
    let rest = tail
        .strip_prefix("&&")
        .or_else(|| tail.strip_prefix(';'))
        .or_else(|| tail.strip_prefix('\n'))?
        .trim();
    (!rest.is_empty()).then(|| SleepWrap {
        sleep: format!("sleep {n}"),
        rest: rest.to_string(),
    })
}

pub fn sleep_wrap(c: &Container) -> Option<SleepWrap> {
    split_sleep(script(c)?)
}

/// The command and args once the sleep is gone: the app's own command run directly
/// when the rest is a plain command line (`exec` dropped), else the same shell
/// running the rest of the script.
pub fn unwrapped(c: &Container) -> Option<(Vec<String>, Option<Vec<String>>)> {
    let wrap = sleep_wrap(c)?;
    let (in_args, i) = script_position(c)?;
    let plain = wrap.rest.strip_prefix("exec ").unwrap_or(&wrap.rest).trim();
    let simple = !plain.is_empty()
        && plain
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || "/-_.=:,@+%".contains(ch) || ch == ' ');
    if simple {
        return Some((plain.split_whitespace().map(str::to_string).collect(), None));
    }
    let mut command = c.command.clone().unwrap_or_default();
    let mut args = c.args.clone();
    let list = if in_args {
        args.as_mut()?
    } else {
        &mut command
    };
    list[i] = wrap.rest;
    Some((command, args))
}

/// A `preStop` hook that only sleeps: `sleep N` (exec, or a shell running just that)
/// or the `sleep` action. Its text, e.g. `sleep 15`.
pub fn prestop_sleep(c: &Container) -> Option<String> {
    let hook = c.lifecycle.as_ref()?.pre_stop.as_ref()?;
    if let Some(s) = &hook.sleep {
        return Some(format!("sleep {}", s.seconds));
    }
    let cmd = hook.exec.as_ref()?.command.as_deref()?;
    let words: Vec<&str> = match cmd {
        [shell, flag, script] if is_shell(shell) && flag.starts_with('-') => {
            script.split_whitespace().collect()
        }
        _ => cmd.iter().map(String::as_str).collect(),
    };
    match words.as_slice() {
        [sleep, n] if sleep.rsplit('/').next() == Some("sleep") && leading_port(n).is_some() => {
            Some(format!("sleep {n}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(v: serde_json::Value) -> Container {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn loopback_ports_in_args_and_env() {
        let c = container(serde_json::json!({
            "name": "app",
            "command": ["sh", "-c", "until nc -z 127.0.0.1 5432; do sleep 1; done"],
            "args": ["--upstream=http://localhost:15000/x", "--backend", "10.127.0.0.1:99"],
            "env": [
                {"name": "DB_PORT", "value": "6432"},
                {"name": "URL", "value": "postgres://[::1]:7000/db"},
                {"name": "OTHER", "value": "notlocalhost:1"},
            ],
        }));
        assert_eq!(
            dialed_ports(&c).into_iter().collect::<Vec<_>>(),
            [5432, 6432, 7000, 15000]
        );
        let pg = container(serde_json::json!({
            "name": "wait", "command": ["pg_isready", "-h", "127.0.0.1", "-p", "5432"]}));
        assert_eq!(dialed_ports(&pg).into_iter().collect::<Vec<_>>(), [5432]);
        let iptables = container(serde_json::json!({
            "name": "istio-init", "args": ["istio-iptables", "-p", "15001", "-z", "15006"]}));
        assert!(
            dialed_ports(&iptables).is_empty(),
            "a port number alone is no dial"
        );
    }

    #[test]
    fn loopback_hosts_without_ports() {
        let host = container(serde_json::json!({"name": "app",
            "env": [{"name": "DB_HOST", "value": "127.0.0.1"}, {"name": "DB_NAME", "value": "orders"}]}));
        assert!(names_loopback_host(&host));
        let flag = container(serde_json::json!({"name": "app", "args": ["--db-host=localhost"]}));
        assert!(names_loopback_host(&flag));
        let remote = container(serde_json::json!({"name": "app",
            "env": [{"name": "DB_HOST", "value": "10.0.0.7"}, {"name": "BIND", "value": "0.0.0.0"}]}));
        assert!(!names_loopback_host(&remote));
    }

    #[test]
    fn sleep_wrapped_commands() {
        let c = container(serde_json::json!({
            "name": "app", "command": ["/bin/sh", "-c", "sleep 10 && exec /app/server --port=8080"]}));
        assert_eq!(
            sleep_wrap(&c),
            Some(SleepWrap {
                sleep: "sleep 10".into(),
                rest: "exec /app/server --port=8080".into()
            })
        );
        assert_eq!(
            unwrapped(&c),
            Some((vec!["/app/server".into(), "--port=8080".into()], None))
        );
        let args = container(serde_json::json!({
            "name": "app", "command": ["bash", "-c"], "args": ["sleep 5; python app.py > /tmp/log"]}));
        assert_eq!(
            unwrapped(&args),
            Some((
                vec!["bash".into(), "-c".into()],
                Some(vec!["python app.py > /tmp/log".into()])
            ))
        );
        let plain = container(serde_json::json!({
            "name": "app", "command": ["sh", "-c", "exec /app/server"]}));
        assert_eq!(sleep_wrap(&plain), None);
        let loop_ = container(serde_json::json!({
            "name": "app", "command": ["sh", "-c", "sleep infinity"]}));
        assert_eq!(sleep_wrap(&loop_), None);
    }

    #[test]
    fn prestop_sleeps() {
        let exec = container(serde_json::json!({"name": "p", "lifecycle": {"preStop": {
            "exec": {"command": ["/bin/sh", "-c", "sleep 15"]}}}}));
        assert_eq!(prestop_sleep(&exec).as_deref(), Some("sleep 15"));
        let action = container(serde_json::json!({"name": "p", "lifecycle": {"preStop": {
            "sleep": {"seconds": 5}}}}));
        assert_eq!(prestop_sleep(&action).as_deref(), Some("sleep 5"));
        let real = container(serde_json::json!({"name": "p", "lifecycle": {"preStop": {
            "exec": {"command": ["/app/drain", "--wait"]}}}}));
        assert_eq!(prestop_sleep(&real), None);
    }
}
