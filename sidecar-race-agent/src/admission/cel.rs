//! CEL for the admission policy: the known-sidecar table ([`crate::pods::catalog`]) and
//! lint's text scanners ([`crate::lint::refs`]) written as CEL expressions over a
//! container `c`, so that the policy recognises the sidecars and the dials lint does.
//!
//! Only libraries Kubernetes has offered since 1.29 are used (optional types, the
//! strings extension, `lists.indexOf`), so the policy loads wherever
//! ValidatingAdmissionPolicy is GA (1.30).

use crate::lint::known;
use crate::pods::catalog::{CATALOG, Sidecar};

/// A CEL string literal.
pub fn string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A CEL list of string literals.
pub fn strings<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(string).collect();
    format!("[{}]", items.join(", "))
}

fn ints(items: &[u16]) -> String {
    let items: Vec<String> = items.iter().map(u16::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// An RE2 alternation matching exactly one of `words`.
fn alternation<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    const SPECIAL: &[char] = &[
        '\\', '.', '+', '*', '?', '(', ')', '|', '[', ']', '{', '}', '^', '$',
    ];
    let escaped: Vec<String> = words
        .into_iter()
        .map(|w| {
            w.chars()
                .flat_map(|ch| {
                    let escape = SPECIAL.contains(&ch).then_some('\\');
                    escape.into_iter().chain([ch])
                })
                .collect()
        })
        .collect();
    format!("({})", escaped.join("|"))
}

/// `c`'s image names one of `images` as its repository (the last path segment, tag
/// and digest aside), like `catalog::repository_name`.
fn image_is<'a>(c: &str, images: impl IntoIterator<Item = &'a str>) -> String {
    let re = format!("^([^@]*/)?{}(:[^/@]*)?(@.*)?$", alternation(images));
    format!("(has({c}.image) && {c}.image.matches({}))", string(&re))
}

/// Every container name of a known sidecar, once: the value of
/// `variables.knownNames` (the injectors' names are their sidecars').
pub fn known_names() -> String {
    let mut names: Vec<&str> = CATALOG.container_names().collect();
    names.sort_unstable();
    names.dedup();
    strings(names)
}

/// `c` is known sidecar `s` (lint's `known::sidecar`: by name first, then image).
fn is_sidecar(c: &str, s: &Sidecar) -> String {
    let by_name = format!(
        "{c}.name in {}",
        strings(s.containers.iter().map(String::as_str))
    );
    if s.images.is_empty() {
        return by_name;
    }
    format!(
        "({by_name} || (!({c}.name in variables.knownNames) && {}))",
        image_is(c, s.images.iter().map(String::as_str))
    )
}

/// `c` (in `containers[]`) is recognised as a classic sidecar: named in
/// `variables.sidecarNames` (the `sidecar-race.io/sidecars` annotation), by a known
/// name or name pattern, or by a known image (`pods::sidecars`).
pub fn is_classic(c: &str) -> String {
    let images: Vec<&str> = CATALOG.image_names().collect();
    format!(
        "{c}.name in variables.sidecarNames || {c}.name in variables.knownNames || {c}.name in ['proxy', 'sidecar'] || {c}.name.endsWith('-proxy') || {c}.name.endsWith('-sidecar') || {}",
        image_is(c, images)
    )
}

/// `c` is a known sidecar that serves the app (a proxy or an agent with a port), as
/// against one that only ships logs or telemetry (`known::serves_app`).
pub fn is_known_server(c: &str) -> String {
    let conditions: Vec<String> = CATALOG
        .sidecars
        .iter()
        .filter(|s| known::serves_app(s))
        .map(|s| is_sidecar(c, s))
        .collect();
    format!("({})", conditions.join(" || "))
}

/// `c` is a known sidecar given one of its socket flags (`--unix-socket=/cloudsql`):
/// lint judges such a proxy by its socket (SR012), which the policy does not, rather
/// than as a server of a port it never names (SR001). Lint looks further (is the
/// socket's volume mounted by an app?); the policy stays silent on both.
pub fn serves_socket(c: &str) -> String {
    let conditions: Vec<String> = CATALOG
        .sidecars
        .iter()
        .filter(|s| !s.socket_flags.is_empty())
        .map(|s| {
            let flags = strings(s.socket_flags.iter().map(String::as_str));
            format!(
                "({} && ({c}.?command.orValue([]) + {c}.?args.orValue([])).exists(w, w in {flags} || {flags}.exists(f, w.startsWith(f + '='))))",
                is_sidecar(c, s)
            )
        })
        .collect();
    if conditions.is_empty() {
        return "false".into();
    }
    format!("({})", conditions.join(" || "))
}

/// `c` declares a TCP port (`PodInfo`'s ports).
pub fn declares_tcp(c: &str) -> String {
    format!("{c}.?ports.orValue([]).exists(p, p.?protocol.orValue('TCP') == 'TCP')")
}

/// The ports `c` serves that CEL can see: its declared TCP ports, and the ports a
/// known sidecar serves whatever its flags (redirects, fixed ports).
pub fn seen_ports(c: &str) -> String {
    let mut known = String::new();
    for s in &CATALOG.sidecars {
        let fixed: Vec<u16> = s.redirect_ports.iter().chain(&s.ports).copied().collect();
        if !fixed.is_empty() {
            known.push_str(&format!("({}) ? {} : ", is_sidecar(c, s), ints(&fixed)));
        }
    }
    format!(
        "{c}.?ports.orValue([]).filter(p, p.?protocol.orValue('TCP') == 'TCP').map(p, p.containerPort) + ({known}[])"
    )
}

/// The loopback hosts `lint::refs` knows, as an RE2 alternation.
fn local_hosts() -> String {
    alternation(crate::lint::refs::LOCAL_HOSTS.iter().copied())
}

/// Container `c` dials loopback port `p` (an int expression) per its command, args
/// or env, as `lint::refs::dialed_ports` reads them: `localhost:P`, `127.0.0.1 P`,
/// `-p P`/`--port=P` beside a loopback host, an env var named `…PORT` set to P.
pub fn dials(c: &str, p: &str) -> String {
    let host = format!("(^|[^A-Za-z0-9.]){}", local_hosts());
    let end = "([^A-Za-z0-9]|$)";
    let host_port = format!(
        "{} + string({p}) + {}",
        string(&format!("{host}(:|[ ]\\s*)")),
        string(end)
    );
    let flag_port = format!(
        "{} + string({p}) + {}",
        string("(^|\\s)(--port=|-p=|(-p|--port|-port)\\s+)"),
        string(end)
    );
    let texts = format!(
        "([{c}.?command.orValue([]).join(' '), {c}.?args.orValue([]).join(' ')] + {c}.?env.orValue([]).filter(e, has(e.value)).map(e, e.value))"
    );
    format!(
        "({texts}.exists(t, t.matches({host_port}) || (t.matches({}) && t.matches({flag_port}))) || {c}.?env.orValue([]).exists(e, has(e.value) && e.name.upperAscii().endsWith('PORT') && e.value.matches('^\\\\s*[+]?0*' + string({p}) + '\\\\s*$')))",
        string(&host)
    )
}

/// Container `c` runs `sleep N` before its own command in a shell script
/// (`lint::refs::sleep_wrap`): the word after the shell's first `-…c…` flag
/// starts with `sleep N &&` or `sleep N;` and goes on.
pub fn sleeps_first(c: &str) -> String {
    let words = format!("({c}.command + {c}.?args.orValue([]))");
    let flags = format!("{words}.filter(w, w.startsWith('-') && w.contains('c'))");
    let at = format!("({words}.indexOf({flags}[0]) + 1)");
    format!(
        "(has({c}.command) && size({c}.command) > 0 && {c}.command[0].matches({}) && size({flags}) > 0 && {at} < size({words}) && {words}[{at}].matches({}))",
        string(&format!(
            "(^|/){}$",
            alternation(crate::lint::refs::SHELLS.iter().copied())
        )),
        string("^\\s*sleep \\s*[0-9][0-9.s]*\\s*(&&|;)\\s*\\S")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(string(r"a'b\c"), r"'a\'b\\c'");
        assert_eq!(alternation(["a.b", "c"]), r"(a\.b|c)");
        assert_eq!(strings(["x", "y"]), "['x', 'y']");
    }
}
