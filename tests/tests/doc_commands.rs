//! Every command in the docs' code blocks (README.md, CONTRIBUTING.md, SECURITY.md,
//! docs/*.md, deploy/README.md) runs here, or is proven to exist and parse, so none goes
//! stale unseen. The conventions (which blocks hold commands, how commands for a user's
//! cluster are marked) are in `tests/src/docs.rs` and CONTRIBUTING.md.
//!
//! - `lint` runs on a copy of the repository's `deploy/` (so `--fix=in-place` rewrites
//!   the copy); `report --prometheus`/`--agent` runs against a real Prometheus scraping
//!   an agent started here (root); `trace` runs until it is attached, then stops and
//!   must print its summary (root).
//! - `cargo xtask VERB …` runs `cargo xtask VERB --help` (running `cargo xtask test`
//!   inside the suite would recurse) and every flag the command uses must be in it;
//!   `cargo test -p P --test T` must name a test target that exists.
//! - Commands marked for a cluster are listed as skipped by design; any other command
//!   this test does not know how to run fails it.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::json;
use sidecar_race_tests::{
    agent::{RunAgent, agent_binary},
    docs::{DocCommand, commands, doc_files, words},
    http::free_port,
    prometheus::Prometheus,
    root::is_root_or_skip,
    tools::{on_path, workspace},
};

#[test]
fn every_command_in_the_docs_runs() {
    let root = workspace();
    let all = all_commands(&root);
    assert!(all.len() > 10, "too few commands found: {all:?}");
    let mut runner = Runner::new(&root);
    let mut failures = Vec::new();
    for c in &all {
        let outcome = if c.cluster {
            Outcome::Skipped("by design: for your cluster, its nodes or a registry".into())
        } else {
            runner.run(c)
        };
        eprintln!("{:<26} {:<40} {}", c.at, outcome.to_string(), c.text);
        if let Outcome::Failed(why) = outcome {
            failures.push(format!("{}: `{}`: {why}", c.at, c.text));
        }
    }
    assert!(
        failures.is_empty(),
        "commands in the docs that do not run:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_readme_opens_with_the_two_commands() {
    let root = workspace();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let first: Vec<String> = commands("README.md", &readme)
        .unwrap()
        .into_iter()
        .take(2)
        .map(|c| c.text)
        .collect();
    assert_eq!(first, ["cargo xtask demo", "cargo xtask test"]);
}

/// The front door stays short enough to read in five minutes: details go to docs/.
const README_MAX_LINES: usize = 300;

#[test]
fn the_readme_is_at_most_300_lines() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, over {README_MAX_LINES}: move detail to docs/"
    );
}

#[test]
fn every_verb_has_help_and_is_documented() {
    let root = workspace();
    let docs: String = doc_files(&root)
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let agent = agent_binary();
    for verb in verbs(&output(Command::new(&agent).arg("--help"))) {
        output(Command::new(&agent).args([&verb, "--help"]));
        let named = format!("sidecar-race-agent {verb}");
        assert!(docs.contains(&named), "no doc names `{named}`");
    }
    for verb in verbs(&output(xtask(&root).arg("--help"))) {
        output(xtask(&root).args([&verb, "--help"]));
        let named = format!("cargo xtask {verb}");
        assert!(docs.contains(&named), "no doc names `{named}`");
    }
}

fn all_commands(root: &Path) -> Vec<DocCommand> {
    let mut all = Vec::new();
    for file in doc_files(root) {
        let name = file.strip_prefix(root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        all.extend(commands(&name, &text).unwrap_or_else(|e| panic!("{e}")));
    }
    all
}

/// The subcommands a clap `--help` lists under `Commands:` (but `help`).
fn verbs(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| *v != "help")
        .map(String::from)
        .collect()
}

/// `cargo xtask` as a user runs it, from the workspace root.
fn xtask(root: &Path) -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root).arg("xtask");
    cmd
}

/// stdout of a command that must succeed.
fn output(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

enum Outcome {
    Ran(String),
    Checked(String),
    Skipped(String),
    Failed(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Outcome::Ran(how) => write!(f, "ran: {how}"),
            Outcome::Checked(how) => write!(f, "checked: {how}"),
            Outcome::Skipped(why) => write!(f, "skipped {why}"),
            Outcome::Failed(_) => write!(f, "FAILED"),
        }
    }
}

/// The agent or the kubectl plugin (the same binary, named as kubectl finds it).
#[derive(Clone, Copy, PartialEq)]
enum Bin {
    Agent,
    Plugin,
}

/// Runs doc commands in a scratch directory: its own `HOME` and a copy of `deploy/`.
struct Runner {
    root: PathBuf,
    scratch: Scratch,
    agent: PathBuf,
    help: HashMap<Vec<String>, Result<String, String>>,
    evidence: Option<Evidence>,
}

/// An agent and a Prometheus scraping it, for `report`.
struct Evidence {
    agent: RunAgent,
    prometheus: Prometheus,
}

impl Runner {
    fn new(root: &Path) -> Self {
        let scratch = Scratch::new();
        copy_dir(&root.join("deploy"), &scratch.work.join("deploy"));
        Runner {
            root: root.to_path_buf(),
            scratch,
            agent: agent_binary(),
            help: HashMap::new(),
            evidence: None,
        }
    }

    fn run(&mut self, c: &DocCommand) -> Outcome {
        let w = words(&c.text);
        let w: Vec<&str> = w.iter().map(String::as_str).collect();
        match w.as_slice() {
            ["cargo", "xtask", verb, rest @ ..] => self.xtask(verb, rest),
            ["cargo", "test", rest @ ..] => self.cargo_test(rest),
            ["sidecar-race-agent", verb, rest @ ..] => self.agent(Bin::Agent, verb, rest),
            ["kubectl", "sidecar-race", verb, rest @ ..] => self.agent(Bin::Plugin, verb, rest),
            ["kubectl", "plugin", "list"] => self.plugin_list(),
            ["ln", "-s", src, dst] if dst.ends_with("kubectl-sidecar_race") => {
                self.install_plugin(src, dst)
            }
            _ => Outcome::Failed(
                "no way to run this on one machine: mark it `# on your cluster` (or its block \
                 ```sh cluster) if it is for a cluster, or teach tests/tests/doc_commands.rs"
                    .into(),
            ),
        }
    }

    /// `--help` of `program args…`, once per distinct command.
    fn help(&mut self, cmd: Vec<String>) -> Result<String, String> {
        let root = self.root.clone();
        let agent = self.agent.clone();
        let plugin = self.scratch.plugin();
        self.help
            .entry(cmd.clone())
            .or_insert_with(|| {
                let mut run = match cmd[0].as_str() {
                    "xtask" => xtask(&root),
                    "plugin" => Command::new(plugin),
                    _ => Command::new(agent),
                };
                let out = run
                    .args(&cmd[1..])
                    .arg("--help")
                    .output()
                    .map_err(|e| e.to_string())?;
                if out.status.success() {
                    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
                } else {
                    Err(String::from_utf8_lossy(&out.stderr).into_owned())
                }
            })
            .clone()
    }

    fn xtask(&mut self, verb: &str, rest: &[&str]) -> Outcome {
        match self.help(vec!["xtask".into(), verb.into()]) {
            Ok(help) => match unknown_flag(&help, rest) {
                Some(flag) => {
                    Outcome::Failed(format!("{flag} is not in `cargo xtask {verb} --help`"))
                }
                None => Outcome::Checked(format!("cargo xtask {verb} --help")),
            },
            Err(e) => Outcome::Failed(format!("cargo xtask {verb} --help failed: {e}")),
        }
    }

    fn cargo_test(&self, rest: &[&str]) -> Outcome {
        let after = |flag: &str| {
            rest.iter()
                .position(|w| *w == flag)
                .and_then(|i| rest.get(i + 1))
        };
        let Some(package) = after("-p") else {
            return Outcome::Checked("a cargo test of the workspace".into());
        };
        let Some(dir) = package_dir(&self.root, package) else {
            return Outcome::Failed(format!("no package {package} in the workspace"));
        };
        match after("--test") {
            Some(t) if dir.join("tests").join(format!("{t}.rs")).is_file() => {
                Outcome::Checked(format!("test target {package}/{t} exists"))
            }
            Some(t) => Outcome::Failed(format!("{package} has no test target {t}")),
            None => Outcome::Checked(format!("package {package} exists")),
        }
    }

    fn agent(&mut self, bin: Bin, verb: &str, rest: &[&str]) -> Outcome {
        if bin == Bin::Plugin && !self.scratch.plugin().exists() {
            self.scratch.link_plugin(&self.agent);
        }
        let program = if bin == Bin::Plugin {
            "plugin"
        } else {
            "agent"
        };
        match self.help(vec![program.into(), verb.into()]) {
            Err(e) => return Outcome::Failed(format!("{verb} --help failed: {e}")),
            Ok(help) => {
                if let Some(flag) = unknown_flag(&help, rest) {
                    return Outcome::Failed(format!("{flag} is not in `{verb} --help`"));
                }
            }
        }
        let binary = match bin {
            Bin::Agent => self.agent.clone(),
            Bin::Plugin => self.scratch.plugin(),
        };
        match verb {
            "lint" => self.lint(&binary, rest),
            "report" => self.report(&binary, rest),
            "trace" | "run" => attach_and_stop(&binary, verb, rest),
            _ => Outcome::Failed(format!("no way to run `{verb}` here")),
        }
    }

    fn lint(&self, binary: &Path, rest: &[&str]) -> Outcome {
        let out = self
            .scratch
            .command(binary)
            .arg("lint")
            .args(rest)
            .output()
            .unwrap();
        match out.status.code() {
            // 1: findings at --fail-on; 2 would be unreadable input.
            Some(0 | 1) => Outcome::Ran(format!("lint on a copy of deploy/, exit {}", out.status)),
            _ => Outcome::Failed(format!(
                "lint exited {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    }

    fn report(&mut self, binary: &Path, rest: &[&str]) -> Outcome {
        if rest
            .iter()
            .any(|w| matches!(*w, "--agents-via-api" | "--cluster"))
        {
            return Outcome::Failed("needs a cluster: mark it `# on your cluster`".into());
        }
        if !is_root_or_skip("doc_commands: report") {
            return Outcome::Skipped("needs root (an agent for Prometheus to scrape)".into());
        }
        let evidence = self.evidence.get_or_insert_with(Evidence::start);
        let prometheus = format!("http://{}", evidence.prometheus.addr);
        let agent = format!("http://{}", evidence.agent.addr);
        let args = replace_values(rest, &[("--prometheus", &prometheus), ("--agent", &agent)]);
        let out = self
            .scratch
            .command(binary)
            .arg("report")
            .args(&args)
            .output()
            .unwrap();
        if out.status.success() {
            Outcome::Ran("report against a Prometheus and an agent started here".into())
        } else {
            Outcome::Failed(format!(
                "report failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    fn install_plugin(&self, src: &str, dst: &str) -> Outcome {
        if src != "$(command -v sidecar-race-agent)" || !dst.starts_with("~/") {
            return Outcome::Failed("an unexpected plugin install".into());
        }
        let link = self.scratch.home.join(&dst[2..]);
        if link != self.scratch.plugin() {
            return Outcome::Failed(format!("kubectl looks on PATH, not in {dst}"));
        }
        self.scratch.link_plugin(&self.agent);
        Outcome::Ran("the link, in a scratch HOME".into())
    }

    fn plugin_list(&self) -> Outcome {
        let kubectl = on_path("kubectl");
        if !self.scratch.plugin().exists() {
            return Outcome::Failed("no plugin installed before `kubectl plugin list`".into());
        }
        let out = self
            .scratch
            .command(&kubectl)
            .args(["plugin", "list"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        if stdout.contains("kubectl-sidecar_race") {
            Outcome::Ran("kubectl finds the plugin".into())
        } else {
            Outcome::Failed(format!(
                "not listed: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }
}

impl Evidence {
    fn start() -> Self {
        let agent = RunAgent::start(&["--pods-from", "none"]);
        let prometheus = Prometheus::start(&json!({
            "job_name": "sidecar-race-agent",
            "honor_labels": true,
            "static_configs": [{"targets": [agent.addr]}],
        }));
        prometheus.value("sidecar_race_build_info", Duration::from_secs(30));
        Evidence { agent, prometheus }
    }
}

/// `trace` or `run` with the doc's arguments (`run` on a free loopback port): it must
/// attach, then stop cleanly on SIGINT, `trace` printing its summary.
fn attach_and_stop(binary: &Path, verb: &str, rest: &[&str]) -> Outcome {
    if !is_root_or_skip(&format!("doc_commands: {verb}")) {
        return Outcome::Skipped("needs root (eBPF)".into());
    }
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = replace_values(rest, &[("--listen", &listen)]);
    if verb == "run" && !rest.iter().any(|a| a.starts_with("--listen")) {
        args.extend(["--listen".into(), listen]);
    }
    if verb == "run" && !rest.iter().any(|a| a.starts_with("--events")) {
        args.push("--events=false".into());
    }
    let mut child = Command::new(binary)
        .arg(verb)
        .args(&args)
        // A documented `run` must not pin on the host running the tests.
        .env("SIDECAR_RACE_PIN", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen
        .iter()
        .any(|l: &String| l.contains("watching the kernel"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    // Its signal handlers are installed just after that line: give them a moment.
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let status = child.wait().unwrap();
    reader.join().unwrap();
    seen.extend(lines.try_iter());
    let seen = seen.join("\n");
    let attached = seen.contains("watching the kernel");
    let summary = verb != "trace" || seen.contains("{\"summary\":");
    if attached && summary && status.success() {
        Outcome::Ran(format!("{verb} attached and stopped cleanly"))
    } else {
        Outcome::Failed(format!("{verb} ({status}):\n{seen}"))
    }
}

/// The flag of `args` that `help` does not list, if any.
fn unknown_flag<'a>(help: &str, args: &[&'a str]) -> Option<&'a str> {
    args.iter()
        .filter(|a| a.starts_with('-') && *a != &"-")
        .map(|a| a.split('=').next().unwrap())
        .find(|flag| {
            !help
                .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == '=')
                .any(|w| w == *flag)
        })
}

/// `args` with the value after each of `flags` (or after `flag=`) replaced.
fn replace_values(args: &[&str], flags: &[(&str, &str)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut replace_next: Option<&str> = None;
    for a in args {
        if let Some(v) = replace_next.take() {
            out.push(v.into());
            continue;
        }
        let (flag, inline) = a.split_once('=').map_or((*a, false), |(f, _)| (f, true));
        match flags.iter().find(|(f, _)| *f == flag) {
            Some((f, v)) if inline => out.push(format!("{f}={v}")),
            Some((f, v)) => {
                out.push((*f).into());
                replace_next = Some(v);
            }
            None => out.push((*a).into()),
        }
    }
    out
}

/// The directory of workspace package `name`.
fn package_dir(root: &Path, name: &str) -> Option<PathBuf> {
    ["sidecar-race-agent", "sidecar-race-ebpf", "xtask", "tests"]
        .iter()
        .map(|d| root.join(d))
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml"))
                .is_ok_and(|t| t.contains(&format!("name = \"{name}\"")))
        })
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A scratch directory: `home/` (HOME, with `~/.local/bin` first on PATH) and `work/`
/// (the current directory, with a copy of `deploy/`); removed on drop.
struct Scratch {
    dir: PathBuf,
    home: PathBuf,
    work: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("sr-doc-commands-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (home, work) = (dir.join("home"), dir.join("work"));
        std::fs::create_dir_all(home.join(".local/bin")).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        Scratch { dir, home, work }
    }

    fn plugin(&self) -> PathBuf {
        self.home.join(".local/bin/kubectl-sidecar_race")
    }

    fn link_plugin(&self, agent: &Path) {
        let _ = std::fs::remove_file(self.plugin());
        std::os::unix::fs::symlink(agent, self.plugin()).unwrap();
    }

    /// `program` in `work/` with the scratch HOME and PATH.
    fn command(&self, program: &Path) -> Command {
        let path = std::env::var("PATH").unwrap_or_default();
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.work)
            .env("HOME", &self.home)
            .env(
                "PATH",
                format!("{}:{path}", self.home.join(".local/bin").display()),
            )
            .stdin(Stdio::null());
        cmd
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
