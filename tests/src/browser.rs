//! A page in a real browser: Debian's `chromium`, headless (`cargo xtask setup`
//! installs it), with a fresh profile and every way out of the machine closed, for
//! `report --format html` (tests/tests/report_html.rs). Two proofs that the page
//! fetches nothing: [`off_page_references`] reads the page for anything that points
//! off it, and [`Chromium`] runs with host names unresolvable and a proxy that is a
//! listener of the test's own ([`NetTrap`]), so any fetch the browser tries arrives
//! there and is counted. [`elements`] reads the DOM chromium dumps.

use std::{
    io::Read,
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

/// Where Debian's package puts it.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// A loopback listener standing in for every server on the network: what connected
/// to it, by the first line each connection sent.
pub struct NetTrap {
    pub port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl NetTrap {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => s.lock().unwrap().push(first_line(conn)),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Self {
            port,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// The connections so far, each as the first line it sent (`CONNECT host:443
    /// HTTP/1.1`, `GET http://host/x HTTP/1.1`), "" when it sent none.
    pub fn connections(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    /// The connections a page made: all but those to the browser's own services.
    pub fn page_fetches(&self) -> Vec<String> {
        self.connections()
            .into_iter()
            .filter(|line| !host(line).is_some_and(|h| BROWSER_OWN.contains(&h.as_str())))
            .collect()
    }
}

/// Chromium's own services, which it calls whatever it shows and however many of its
/// background features are turned off (the component updater, sign-in, Safe
/// Browsing, network time): fetches to these hosts are the browser's, not a page's.
/// Content Google serves to pages (fonts.googleapis.com, fonts.gstatic.com,
/// www.googleapis.com) is not among them.
pub const BROWSER_OWN: [&str; 9] = [
    "update.googleapis.com",
    "accounts.google.com",
    "clients1.google.com",
    "clients2.google.com",
    "android.clients.google.com",
    "safebrowsing.googleapis.com",
    "optimizationguide-pa.googleapis.com",
    "redirector.gvt1.com",
    "edgedl.me.gvt1.com",
];

/// The host a proxy request names: `CONNECT host:443 …`, `GET http://host/… …`.
pub fn host(request_line: &str) -> Option<String> {
    let target = request_line.split_whitespace().nth(1)?;
    let authority = match target.split_once("://") {
        Some((_, rest)) => rest.split('/').next()?,
        None => target,
    };
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => authority,
    };
    Some(host.to_ascii_lowercase())
}

impl Drop for NetTrap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn first_line(mut conn: TcpStream) -> String {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 512];
    let n = conn.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

/// Headless chromium with a fresh profile, its network closed: host names resolve to
/// nothing, and everything (loopback included) goes through the trap as its proxy.
pub struct Chromium {
    pub trap: NetTrap,
    profile: PathBuf,
}

impl Default for Chromium {
    fn default() -> Self {
        Self::new()
    }
}

impl Chromium {
    pub fn new() -> Self {
        assert!(
            Path::new(CHROMIUM).exists(),
            "{CHROMIUM} is missing: `cargo xtask setup` installs Debian's chromium (apt-get install chromium)"
        );
        let trap = NetTrap::start();
        // The trap's port tells this browser's profile apart while it lives.
        let profile =
            std::env::temp_dir().join(format!("sr-chromium-{}-{}", std::process::id(), trap.port));
        std::fs::create_dir_all(&profile).unwrap();
        Self { trap, profile }
    }

    fn command(&self) -> Command {
        let mut c = Command::new(CHROMIUM);
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-pings",
            "--disable-default-apps",
            "--disable-domain-reliability",
            "--disable-client-side-phishing-detection",
            "--disable-breakpad",
            "--password-store=basic",
            "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,Translate,AutofillServerCommunication",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            // `<-loopback>`: loopback too goes through the proxy, not around it.
            "--proxy-bypass-list=<-loopback>",
        ])
        .arg(format!("--proxy-server=http://127.0.0.1:{}", self.trap.port))
        .arg(format!("--user-data-dir={}", self.profile.display()));
        c
    }

    fn run(&self, mut c: Command) -> String {
        let out = c.output().expect("run chromium");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "chromium failed ({}): {}{stdout}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// The DOM chromium built from `page`, serialised.
    pub fn dump_dom(&self, page: &Path) -> String {
        let mut c = self.command();
        c.arg("--dump-dom").arg(file_url(page));
        self.run(c)
    }

    /// A PNG of `page` at `width`×`height` into `png`.
    pub fn screenshot(&self, page: &Path, png: &Path, width: u32, height: u32) {
        let mut c = self.command();
        c.arg(format!("--screenshot={}", png.display()))
            .arg(format!("--window-size={width},{height}"))
            .arg(file_url(page));
        self.run(c);
        let bytes = std::fs::read(png).expect("chromium wrote the screenshot");
        assert!(
            bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
            "not a PNG: {}",
            png.display()
        );
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn file_url(page: &Path) -> String {
    format!("file://{}", page.canonicalize().unwrap().display())
}

/// Everything in `html` that would make a browser fetch: the value of each `src`,
/// `href`, `srcset`, `action`, `poster`, `data`, `xlink:href` attribute, `url(...)` and
/// `@import` in styles, that is not a fragment of the page itself (`#id`) or inline
/// (`data:`). Empty for a self-contained page.
pub fn off_page_references(html: &str) -> Vec<String> {
    let lower = html.to_ascii_lowercase();
    let mut out = Vec::new();
    for attr in [
        "src",
        "href",
        "srcset",
        "action",
        "poster",
        "data",
        "xlink:href",
    ] {
        let mut from = 0;
        while let Some(at) = lower[from..].find(&format!("{attr}=")) {
            let start = from + at;
            from = start + attr.len() + 1;
            // A whole attribute name: after a space or a quote, not `data-src=`.
            let before = lower[..start].chars().next_back();
            if !matches!(before, Some(c) if c.is_whitespace() || c == '"' || c == '\'') {
                continue;
            }
            out.extend(value_at(html, from).filter(|v| !inline(v)));
        }
    }
    for opener in ["url(", "@import"] {
        let mut from = 0;
        while let Some(at) = lower[from..].find(opener) {
            from += at + opener.len();
            let rest = html[from..].trim_start().trim_start_matches(['\'', '"']);
            let v: String = rest
                .chars()
                .take_while(|c| !matches!(c, ')' | '\'' | '"' | ';' | ' '))
                .collect();
            if !inline(&v) {
                out.push(v);
            }
        }
    }
    out
}

/// An attribute's value starting at `at` (quoted or not).
fn value_at(html: &str, at: usize) -> Option<String> {
    let rest = &html[at..];
    let quote = rest.chars().next()?;
    let v = if quote == '"' || quote == '\'' {
        rest[1..].split(quote).next()?
    } else {
        rest.split(|c: char| c.is_whitespace() || c == '>').next()?
    };
    Some(v.to_string())
}

fn inline(v: &str) -> bool {
    let v = v.trim();
    v.starts_with('#') || v.to_ascii_lowercase().starts_with("data:")
}

/// One element of a serialised DOM: its tag and its attributes, in document order.
#[derive(Debug, Clone, PartialEq)]
pub struct Element {
    pub tag: String,
    pub attrs: Vec<(String, String)>,
    /// Where its start tag is in the text.
    pub at: usize,
}

impl Element {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Every start tag of `dom` (chromium's `--dump-dom`: attributes double-quoted, with
/// `&quot;` inside), in document order; the text between them is skipped.
pub fn elements(dom: &str) -> Vec<Element> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(lt) = dom[i..].find('<') {
        let at = i + lt;
        let body = &dom[at + 1..];
        let Some(end) = tag_end(body) else { break };
        i = at + 1 + end + 1;
        let tag_text = &body[..end];
        if tag_text.starts_with(['/', '!', '?']) {
            continue;
        }
        let name: String = tag_text
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '/')
            .collect();
        out.push(Element {
            tag: name.to_ascii_lowercase(),
            attrs: attributes(&tag_text[name.len()..]),
            at,
        });
    }
    out
}

/// The `>` that ends a tag, outside quoted values.
fn tag_end(s: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

fn attributes(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() && !rest.starts_with('/') {
        let name: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '=' && *c != '/')
            .collect();
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        let mut value = String::new();
        if let Some(r) = rest.strip_prefix('=') {
            let q = r.chars().next().unwrap_or(' ');
            if q == '"' || q == '\'' {
                let v = r[1..].split(q).next().unwrap_or("");
                value = unescape(v);
                rest = &r[1 + v.len() + 1..];
            } else {
                let v: String = r.chars().take_while(|c| !c.is_whitespace()).collect();
                rest = &r[v.len()..];
                value = unescape(&v);
            }
        }
        out.push((name.to_ascii_lowercase(), value));
        rest = rest.trim_start();
    }
    out
}

fn unescape(v: &str) -> String {
    v.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_request_names_its_host() {
        assert_eq!(
            host("CONNECT update.googleapis.com:443 HTTP/1.1").as_deref(),
            Some("update.googleapis.com")
        );
        assert_eq!(
            host("GET http://example.com/pixel.png HTTP/1.1").as_deref(),
            Some("example.com")
        );
        assert_eq!(
            host("GET http://fonts.googleapis.com:80/css HTTP/1.1").as_deref(),
            Some("fonts.googleapis.com")
        );
        assert_eq!(host(""), None);
        assert!(!BROWSER_OWN.contains(&"fonts.googleapis.com"));
    }

    #[test]
    fn an_external_image_is_an_off_page_reference() {
        let page = r#"<html><body><p>hi</p><img src="http://example.com/x.png"></body></html>"#;
        assert_eq!(off_page_references(page), ["http://example.com/x.png"]);
    }

    #[test]
    fn scripts_styles_and_fonts_from_elsewhere_are_caught() {
        let page = r#"<link rel="stylesheet" href="//cdn.example/s.css"><script src=https://x/y.js></script>
            <style>@font-face { src: url('https://fonts.example/f.woff2') } @import "other.css";</style>
            <a HREF="page2.html">next</a>"#;
        assert_eq!(
            off_page_references(page),
            [
                "https://x/y.js",
                "//cdn.example/s.css",
                "page2.html",
                "https://fonts.example/f.woff2",
                "other.css"
            ]
        );
    }

    #[test]
    fn fragments_inline_data_and_hooks_are_no_reference() {
        let page = r##"<a href="#top">up</a><img src="data:image/png;base64,AAAA"><g data-src="x" data-lane="app"></g><p>src= in text is not an attribute</p>"##;
        assert_eq!(off_page_references(page), Vec::<String>::new());
    }

    #[test]
    fn elements_in_document_order_with_their_attributes() {
        let dom = r#"<html><body><tr data-rank="1" data-workload="Deployment shop/&lt;x&gt;"><td>1</td></tr><g data-lane="app" data-refusals="14"><line data-mark="refusal" data-count="13"></line></g></body></html>"#;
        let found: Vec<(String, Option<String>)> = elements(dom)
            .iter()
            .map(|e| (e.tag.clone(), e.attr("data-workload").map(str::to_string)))
            .collect();
        assert_eq!(found[2], ("tr".into(), Some("Deployment shop/<x>".into())));
        let lane = elements(dom).into_iter().find(|e| e.tag == "g").unwrap();
        assert_eq!(lane.attr("data-refusals"), Some("14"));
        assert_eq!(elements(dom).len(), 6, "html, body, tr, td, g, line");
    }
}
