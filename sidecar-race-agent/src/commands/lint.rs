//! `sidecar-race-agent lint`: findings on manifests, or their fix. Exit status: 0
//! when no finding reaches `--fail-on`, 1 when one does, 2 when an input could not be
//! read or analysed.

use std::io::Write;

use crate::{
    cli::{FixMode, LintArgs},
    lint::{self, input, render, rewrite},
};

/// Exit status when an input could not be read or analysed.
pub const EXIT_INPUT_ERROR: i32 = 2;
/// Exit status when a finding reaches `--fail-on`.
pub const EXIT_FINDINGS: i32 = 1;

pub async fn run(args: LintArgs) -> anyhow::Result<i32> {
    let mut opts = args.options();
    opts.assume_native(&args.assume_native_mesh);
    let loaded = if args.cluster {
        from_cluster(&args, &mut opts).await
    } else {
        input::read_sources(&args.paths)
            .map(|sources| {
                let (w, e) = lint::load(&sources, &opts);
                (sources, w, e)
            })
            .map_err(|e| e.to_string())
    };
    let (sources, workloads, errors) = match loaded {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(EXIT_INPUT_ERROR);
        }
    };
    if let Some(mode) = args.fix {
        opts.namespaces = lint::namespaces(&sources);
        return fix(mode, &sources, &workloads, &errors, &opts);
    }
    let mut outcome = lint::lint(&workloads, &opts);
    outcome.errors = errors;
    write_stdout(&render::render(&outcome, args.format))?;
    Ok(exit_status(&outcome, args.fail_on.severity()))
}

type Loaded = (Vec<input::Source>, Vec<lint::Workload>, Vec<String>);

/// The cluster's workloads; its version unless `--kube-version` says otherwise.
async fn from_cluster(args: &LintArgs, opts: &mut lint::Options) -> Result<Loaded, String> {
    if args.fix.is_some_and(|m| m != FixMode::Patch) {
        return Err("with --cluster, --fix writes patches only: use --fix=patch".into());
    }
    let client = lint::cluster::client().await.map_err(|e| e.to_string())?;
    lint::cluster::settings(&client, opts)
        .await
        .map_err(|e| e.to_string())?;
    let (workloads, errors) =
        lint::cluster::workloads(&client, args.namespace.as_deref(), &opts.site_sidecars)
            .await
            .map_err(|e| e.to_string())?;
    Ok((Vec::new(), workloads, errors))
}

/// 2 on input errors, else 1 when a finding reaches `fail_on`, else 0.
pub fn exit_status(outcome: &lint::Outcome, fail_on: Option<lint::Severity>) -> i32 {
    if !outcome.errors.is_empty() {
        EXIT_INPUT_ERROR
    } else if fail_on.is_some_and(|f| outcome.worst().is_some_and(|w| w >= f)) {
        EXIT_FINDINGS
    } else {
        0
    }
}

fn fix(
    mode: FixMode,
    sources: &[input::Source],
    workloads: &[lint::Workload],
    errors: &[String],
    opts: &lint::Options,
) -> anyhow::Result<i32> {
    for e in errors {
        eprintln!("error: {e}");
    }
    if !errors.is_empty() {
        return Ok(EXIT_INPUT_ERROR);
    }
    match mode {
        FixMode::Patch => {
            match rewrite::kustomize_patches(workloads, opts) {
                Some(text) => write_stdout(&text)?,
                None => eprintln!("nothing to fix"),
            }
            Ok(0)
        }
        FixMode::Stdout => {
            let mut text = String::new();
            for source in sources {
                let (fixed, _) = rewrite::fixed_source(source, opts)?;
                if !text.is_empty() && !fixed.starts_with("---") {
                    text.push_str("---\n");
                }
                text.push_str(&fixed);
            }
            write_stdout(&text)?;
            Ok(0)
        }
        FixMode::InPlace => {
            for source in sources {
                if source.name == "-" {
                    anyhow::bail!("--fix=in-place cannot rewrite stdin: use --fix");
                }
                let (fixed, changed) = rewrite::fixed_source(source, opts)?;
                if changed > 0 {
                    std::fs::write(&source.name, fixed)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", source.name))?;
                    eprintln!("fixed {changed} workload(s) in {}", source.name);
                }
            }
            Ok(0)
        }
    }
}

/// Writes to stdout; a closed pipe (`| head`) is the reader's choice, not a failure.
pub fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
