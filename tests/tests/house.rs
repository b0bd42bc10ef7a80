//! The house's rules, checked on the source (no root, no build): no import cycle and no
//! arrow back up in any crate of the workspace, no non-test file over 500 lines outside
//! the tests crate (test modules known by the module tree, not by their paths),
//! CONTRIBUTING's layout naming exactly the modules there are, the agent's
//! top-level imports following CONTRIBUTING's layer table, and the agent's `Pipeline`
//! implemented in one file only.

use std::{collections::BTreeSet, fs, path::PathBuf};

use sidecar_race_tests::{
    house::{Crate, rust_files, show},
    house_impls::files_implementing,
    house_layers::Layers,
};

fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Each member of the workspace that has a `src/`, as its path in the workspace.
fn members() -> Vec<String> {
    let manifest = fs::read_to_string(workspace().join("Cargo.toml")).expect("Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.starts_with("members"))
        .expect("workspace members");
    let members: Vec<String> = line
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    assert!(members.len() >= 4, "members parsed from {line:?}");
    members
        .into_iter()
        .filter(|m| workspace().join(m).join("src").is_dir())
        .collect()
}

#[test]
fn no_crate_has_an_import_cycle_or_an_arrow_back_up() {
    let mut problems = Vec::new();
    for member in members() {
        let graph = Crate::read(&workspace().join(&member).join("src")).graph();
        for cycle in &graph.cycles {
            let names: Vec<String> = cycle.iter().map(|m| show(m)).collect();
            problems.push(format!("{member}: cycle {}", names.join(" <-> ")));
        }
        for (from, to) in &graph.back_up {
            problems.push(format!(
                "{member}: {} imports from its ancestor {}",
                show(from),
                show(to)
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the house's arrows must point down and never close a loop; move the item into a \
         leaf module that both sides import:\n{}",
        problems.join("\n")
    );
}

/// The size rule: lines before a file's first `#[cfg(test)]`.
const MAX_LINES: usize = 500;

#[test]
fn no_non_test_file_outside_tests_is_over_500_lines() {
    let mut long = Vec::new();
    let mut checked = 0;
    for member in members().into_iter().filter(|m| !m.starts_with("tests")) {
        let src = workspace().join(&member).join("src");
        checked += rust_files(&src).len();
        for (file, lines) in Crate::long_files(&src, MAX_LINES) {
            long.push(format!("{} ({lines})", file.display()));
        }
    }
    // The agent alone has over 200 files: a guard that read none would pass vacuously.
    assert!(checked > 200, "the size rule read only {checked} files");
    assert!(
        long.is_empty(),
        "split these by job (lines before #[cfg(test)]):\n{}",
        long.join("\n")
    );
}

/// The guard itself, on a tree it must reject: a crate under a folder named `tests`
/// (as every path built from this crate's manifest is) with one 501-line module, one
/// 500-line module, and a 600-line test module.
#[test]
fn the_size_rule_rejects_a_501_line_file_and_only_it() {
    let root = std::env::temp_dir().join(format!("house-size-{}", std::process::id()));
    let src = root.join("tests/../tests/fixture/src");
    fs::create_dir_all(&src).expect("fixture dir");
    let lines = |n: usize| {
        (0..n)
            .map(|i| format!("const C{i}: u8 = 0;\n"))
            .collect::<String>()
    };
    fs::write(
        src.join("lib.rs"),
        "mod big;\nmod fits;\n#[cfg(test)]\nmod tests;\n",
    )
    .unwrap();
    fs::write(src.join("big.rs"), lines(MAX_LINES + 1)).unwrap();
    fs::write(
        src.join("fits.rs"),
        lines(MAX_LINES) + "#[cfg(test)]\nmod t {}\n" + &lines(50),
    )
    .unwrap();
    fs::write(src.join("tests.rs"), lines(600)).unwrap();
    let long = Crate::long_files(&src, MAX_LINES);
    fs::remove_dir_all(&root).ok();
    let names: Vec<(String, usize)> = long
        .iter()
        .map(|(f, n)| (f.file_name().unwrap().to_string_lossy().into_owned(), *n))
        .collect();
    assert_eq!(names, vec![("big.rs".to_string(), MAX_LINES + 1)]);
}

/// CONTRIBUTING's layout: a `### <member>/src` heading per crate, then one bullet per
/// top-level module, `` `name` `` or `` `name/` `` first; a folder's bullet names each
/// of its children in backticks.
#[test]
fn contributing_layout_names_every_module_and_no_other() {
    let text = fs::read_to_string(workspace().join("CONTRIBUTING.md")).expect("CONTRIBUTING.md");
    let layout = text
        .split("\n## Layout")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a `## Layout` section");
    let mut problems = Vec::new();
    for member in members() {
        let src = workspace().join(&member).join("src");
        let heading = format!("### {member}/src");
        let Some(section) = layout
            .split("\n### ")
            .find(|s| s.starts_with(&heading[4..]))
        else {
            problems.push(format!("no `{heading}` section"));
            continue;
        };
        let bullets: Vec<&str> = section
            .split("\n- ")
            .skip(1)
            .map(|b| b.split("\n\n").next().unwrap_or(b))
            .collect();
        let modules = Crate::read(&src).modules;
        let top: BTreeSet<String> = modules
            .keys()
            .filter(|m| m.len() == 1)
            .map(|m| m[0].clone())
            .collect();
        let mut listed = BTreeSet::new();
        for bullet in &bullets {
            let Some(name) = bullet
                .strip_prefix('`')
                .and_then(|b| b.split('`').next())
                .map(|n| n.trim_end_matches('/').trim_end_matches(".rs").to_string())
            else {
                continue;
            };
            let children: BTreeSet<String> = modules
                .keys()
                .filter(|m| m.len() == 2 && m[0] == name)
                .map(|m| m[1].clone())
                .collect();
            let named: BTreeSet<String> = bullet
                .split('`')
                .skip(1)
                .step_by(2)
                .map(|n| n.trim_end_matches('/').trim_end_matches(".rs").to_string())
                .collect();
            for child in children.difference(&named) {
                problems.push(format!(
                    "{member}: `{name}/` does not name its child `{child}`"
                ));
            }
            listed.insert(name);
        }
        for m in top.difference(&listed) {
            problems.push(format!("{member}: module `{m}` is not in the layout"));
        }
        for m in listed.difference(&top) {
            problems.push(format!(
                "{member}: the layout names `{m}`, which is not a module"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "CONTRIBUTING.md's layout and src/ disagree:\n{}",
        problems.join("\n")
    );
}

/// CONTRIBUTING's `### Layers` table: every top-level module of the agent in one layer,
/// and every arrow between them pointing to a layer below.
#[test]
fn the_agent_imports_only_from_the_layers_below() {
    let text = fs::read_to_string(workspace().join("CONTRIBUTING.md")).expect("CONTRIBUTING.md");
    let section = text
        .split("\n### Layers")
        .nth(1)
        .and_then(|s| s.split("\n#").next())
        .expect("a `### Layers` section");
    let layers = Layers::parse(section).expect("the layer table");
    let krate = Crate::read(&workspace().join("sidecar-race-agent/src"));
    let top: BTreeSet<String> = krate
        .modules
        .keys()
        .filter(|m| m.len() == 1)
        .map(|m| m[0].clone())
        .collect();
    let graph = krate.graph();
    let problems = layers.check(&top, &graph.arrows);
    assert!(
        problems.is_empty(),
        "CONTRIBUTING.md's layer table and the agent's imports disagree; move the item \
         down into a module both sides may import, or fix the table:\n{}",
        problems.join("\n")
    );
}

/// The files CONTRIBUTING's layout names as holding the pipeline's fields (`pipeline/`:
/// "`state` holds the `Pipeline` type, the only `impl Pipeline`").
const PIPELINE_IMPLS: &[&str] = &["pipeline/state.rs"];

/// The pipeline's stages own their state and are handed what they read: a method on
/// `Pipeline` elsewhere would reach into every stage again (tests/src/house_impls.rs,
/// with the forms it must find and those it must not).
#[test]
fn only_pipeline_state_implements_the_pipeline() {
    let src = workspace().join("sidecar-race-agent/src");
    let found: Vec<String> = files_implementing(&src, "Pipeline")
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    assert_eq!(
        found, PIPELINE_IMPLS,
        "`impl Pipeline` outside pipeline/state.rs: give the behaviour to the stage that \
         owns the state, and hand it what it reads"
    );
}

/// The guard itself, on a tree it must reject: a second file with an `impl` of the
/// pipeline (a trait's), beside the type's own file and a file naming it in a comment.
#[test]
fn the_impl_rule_rejects_a_second_file_implementing_the_pipeline() {
    let root = std::env::temp_dir().join(format!("house-impls-{}", std::process::id()));
    let src = root.join("src");
    fs::create_dir_all(src.join("pipeline")).expect("fixture dir");
    let write = |path: &str, text: &str| fs::write(src.join(path), text).unwrap();
    write("lib.rs", "mod pipeline;\n");
    write("pipeline/mod.rs", "mod state;\nmod views;\nmod snapshot;\n");
    write(
        "pipeline/state.rs",
        "pub struct Pipeline;\nimpl Pipeline {}\n",
    );
    write(
        "pipeline/views.rs",
        "impl Default for super::state::Pipeline {\n}\n",
    );
    write(
        "pipeline/snapshot.rs",
        "// not an impl Pipeline\nimpl PipelineSnapshot {}\n",
    );
    let found = files_implementing(&src, "Pipeline");
    fs::remove_dir_all(&root).ok();
    assert_eq!(
        found,
        vec![
            PathBuf::from("pipeline/state.rs"),
            PathBuf::from("pipeline/views.rs")
        ]
    );
}
