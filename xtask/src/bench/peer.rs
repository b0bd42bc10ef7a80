//! The simplest peer: a bpftrace script on the same tracepoint, remembering sockets
//! that enter SYN_SENT in a map and deleting them when they leave it.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use anyhow::{Context, bail};

const SCRIPT: &str = r#"
tracepoint:sock:inet_sock_set_state /args->protocol == 6 && args->newstate == 2/ { @c[args->skaddr] = nsecs; }
tracepoint:sock:inet_sock_set_state /args->protocol == 6 && args->oldstate == 2/ { delete(@c[args->skaddr]); }
"#;

pub struct Bpftrace(Child);

impl Bpftrace {
    /// Installs Debian's bpftrace when missing; a failure only means no peer row.
    pub fn install() {
        if !Self::available() {
            eprintln!("bench: installing bpftrace (the peer row)");
            let _ = Command::new("apt-get")
                .args(["install", "-y", "bpftrace"])
                .stdout(Stdio::null())
                .status();
        }
    }

    /// Whether bpftrace is installed.
    pub fn available() -> bool {
        Command::new("bpftrace")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts the script and waits until its probes are attached.
    pub fn start() -> anyhow::Result<Self> {
        let mut child = Command::new("bpftrace")
            .args(["-e", SCRIPT])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("start bpftrace")?;
        let stdout = child.stdout.take().context("bpftrace stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("Attaching") {
                    let _ = tx.send(());
                }
            }
        });
        let peer = Bpftrace(child);
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            bail!("bpftrace did not attach within 60 s");
        }
        // "Attaching" is printed just before the attach itself.
        std::thread::sleep(Duration::from_millis(300));
        Ok(peer)
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
