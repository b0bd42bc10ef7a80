//! The host machine's package manager and tools: what is installed, and installing
//! what is missing with apt-get. Shared by the set-up (`setup.rs`) and the kernel
//! tier's set-up (`kernels.rs`), so neither imports the other.

use std::process::Command;

use anyhow::{Context, bail};

use crate::run::{checked, output, succeeds};

/// apt-get packages to install, with one `apt-get update` at most.
#[derive(Default)]
pub struct Apt {
    wanted: Vec<String>,
    updated: bool,
}

impl Apt {
    pub fn want(&mut self, packages: &[&str]) {
        for p in packages {
            if !self.wanted.iter().any(|w| w == p) {
                self.wanted.push(p.to_string());
            }
        }
    }

    /// The package of each `(tool, package)` whose tool is not on the PATH.
    pub fn want_tools(&mut self, tools: &[(&str, &str)]) {
        for (tool, package) in tools {
            if !have(tool) {
                self.want(&[package]);
            }
        }
    }

    pub fn update(&mut self) -> anyhow::Result<()> {
        if !self.updated {
            if !have("apt-get") {
                bail!(
                    "missing {}, and this is not a Debian/Ubuntu machine (no apt-get): install them by hand",
                    self.wanted.join(", ")
                );
            }
            checked(Command::new("apt-get").args(["update", "-q"]))?;
            self.updated = true;
        }
        Ok(())
    }

    /// Index of the first package apt knows about.
    pub fn first_available(&mut self, packages: &[String]) -> Option<usize> {
        self.update().ok()?;
        packages.iter().position(|p| {
            output(Command::new("apt-cache").args(["policy", p]))
                .is_some_and(|o| o.contains("Candidate:") && !o.contains("Candidate: (none)"))
        })
    }

    pub fn install(&mut self) -> anyhow::Result<()> {
        if self.wanted.is_empty() {
            return Ok(());
        }
        self.update()?;
        eprintln!("xtask: installing {}", self.wanted.join(" "));
        checked(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&self.wanted)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
        .context("apt-get install failed (are you root?)")?;
        self.wanted.clear();
        Ok(())
    }
}

pub fn package_installed(package: &str) -> bool {
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))
        .is_some_and(|s| s.ends_with("installed") && !s.contains("not-installed"))
}

pub fn have(tool: &str) -> bool {
    succeeds(Command::new("sh").args(["-c", &format!("command -v {tool}")]))
}
