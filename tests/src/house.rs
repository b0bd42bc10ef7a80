//! The house's rules, read from the source as text (tests/tests/house.rs): a crate's
//! modules and the arrows between them, for "no import cycle, no arrow back up"; a
//! file's non-test length; the module names CONTRIBUTING's layout gives.
//!
//! A module is a file (`a/b.rs` is `a::b`, `a/mod.rs` is `a`). An arrow goes from the
//! module that names a path (`use crate::x::y`, `super::z`, a `crate::…` path in code)
//! to the deepest module that path names. Between two modules that are not each
//! other's ancestors, the arrow is lifted to their ancestors that are siblings (the
//! children of their lowest common ancestor), and a cycle is a strongly connected set
//! of siblings. An arrow back up goes from a module to one of its own ancestors: the
//! item it uses lives in the parent's file, which also declares the child. Test-only
//! modules and `#[cfg(test)]` items are left out.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// `["kernel", "probes"]` for `src/kernel/probes.rs`; empty for the crate root.
pub type ModPath = Vec<String>;

pub struct Crate {
    /// Each live (non-test) module and its file.
    pub modules: BTreeMap<ModPath, PathBuf>,
    /// The files of test-only modules (declared under `#[cfg(test)]`, and their
    /// children): they do not count toward the size rule.
    pub test_files: BTreeSet<PathBuf>,
}

/// What the house rules check in one crate.
#[derive(Default, Debug)]
pub struct Graph {
    /// Lifted sibling arrows, `from -> to`.
    pub arrows: BTreeSet<(ModPath, ModPath)>,
    /// Each cycle: a strongly connected set of siblings, sorted.
    pub cycles: Vec<Vec<ModPath>>,
    /// `module -> ancestor` arrows.
    pub back_up: BTreeSet<(ModPath, ModPath)>,
}

pub fn show(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

impl Crate {
    pub fn read(src: &Path) -> Crate {
        let mut all = BTreeMap::new();
        for file in rust_files(src) {
            let rel = file.strip_prefix(src).expect("under src");
            let mut path: ModPath = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                path.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                path.pop();
            }
            // A binary's own root (src/bin/x.rs, or main.rs beside a lib.rs) is a
            // crate of its own: the library's tree is the one read.
            if path.first().is_some_and(|p| p == "bin")
                || rel == Path::new("main.rs") && src.join("lib.rs").exists()
            {
                continue;
            }
            all.insert(path, file);
        }
        let test_only: Vec<ModPath> = all
            .iter()
            .flat_map(|(m, file)| {
                let text = fs::read_to_string(file).unwrap_or_default();
                test_declared(&text)
                    .into_iter()
                    .map(|child| {
                        let mut p = m.clone();
                        p.push(child);
                        p
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let is_test = |m: &ModPath| test_only.iter().any(|t| m.starts_with(t));
        let test_files = all
            .iter()
            .filter(|(m, _)| is_test(m))
            .map(|(_, f)| f.clone())
            .collect();
        all.retain(|m, _| !is_test(m));
        Crate {
            modules: all,
            test_files,
        }
    }

    /// Every non-test file below `src` (binaries' roots included) whose lines before its
    /// first `#[cfg(test)]` exceed `limit`, with that count. A file is a test file by
    /// the module tree (declared under `#[cfg(test)]`), never by its path's names: a
    /// path is read relative to `src`, so a crate that itself sits in a folder named
    /// `tests` is checked like any other.
    pub fn long_files(src: &Path, limit: usize) -> Vec<(PathBuf, usize)> {
        let krate = Crate::read(src);
        rust_files(src)
            .into_iter()
            .filter(|f| !krate.test_files.contains(f))
            .filter_map(|f| {
                let lines = non_test_lines(&fs::read_to_string(&f).unwrap_or_default());
                (lines > limit).then_some((f, lines))
            })
            .collect()
    }

    pub fn graph(&self) -> Graph {
        let mut edges: BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<ModPath>>> = BTreeMap::new();
        let mut graph = Graph::default();
        for (module, file) in &self.modules {
            let text = live_code(&fs::read_to_string(file).unwrap_or_default());
            for path in named_paths(&text) {
                let Some(target) = self.resolve(module, &path) else {
                    continue;
                };
                if &target == module {
                    continue;
                }
                let common = module
                    .iter()
                    .zip(&target)
                    .take_while(|(a, b)| a == b)
                    .count();
                if common == target.len() {
                    graph.back_up.insert((module.clone(), target));
                    continue;
                }
                if common == module.len() {
                    continue; // down, into its own child
                }
                let (from, to) = (module[..=common].to_vec(), target[..=common].to_vec());
                edges
                    .entry(module[..common].to_vec())
                    .or_default()
                    .entry(from.clone())
                    .or_default()
                    .insert(to.clone());
                graph.arrows.insert((from, to));
            }
        }
        for siblings in edges.values() {
            graph.cycles.extend(strongly_connected(siblings));
        }
        graph
    }

    /// The deepest module `path` names, seen from `module`; None for other crates.
    fn resolve(&self, module: &ModPath, path: &[String]) -> Option<ModPath> {
        let (mut base, rest): (ModPath, &[String]) = match path.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &path[1..]),
            Some("super" | "self") => {
                let mut base = module.clone();
                let mut i = 0;
                while let Some(s) = path.get(i).map(String::as_str) {
                    match s {
                        "super" => {
                            base.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    i += 1;
                }
                (base, &path[i..])
            }
            // A child module named without `self::` (uniform paths).
            Some(first) => {
                let mut child = module.clone();
                child.push(first.to_string());
                if !self.modules.contains_key(&child) {
                    return None;
                }
                (module.clone(), path)
            }
            None => return None,
        };
        let mut deepest = base.clone();
        for segment in rest {
            base.push(segment.clone());
            if self.modules.contains_key(&base) {
                deepest = base.clone();
            } else {
                break;
            }
        }
        Some(deepest)
    }
}

/// Every `.rs` file below `dir`, sorted.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The lines of a file before its first `#[cfg(test)]`: what counts toward its size.
pub fn non_test_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .count()
}

/// Children declared as `#[cfg(test)] mod name;` (or with `{`).
fn test_declared(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with("#[cfg(test)]") {
            continue;
        }
        let Some(item) = lines[i + 1..].iter().find(|l| !l.starts_with("#[")) else {
            continue;
        };
        if let Some(name) = mod_name(item) {
            out.push(name);
        }
    }
    out
}

fn mod_name(item: &str) -> Option<String> {
    let rest = item.strip_prefix("pub ").unwrap_or(item);
    let rest = rest
        .strip_prefix("pub(crate) ")
        .or_else(|| rest.strip_prefix("pub(super) "))
        .unwrap_or(rest);
    let name: String = rest
        .strip_prefix("mod ")?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The code without comments and without `#[cfg(test)]` items.
fn live_code(text: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    let mut depth: i64 = 0;
    let mut opened = false;
    for raw in text.lines() {
        let line = match raw.find("//") {
            Some(i) if !raw[..i].contains('"') => &raw[..i],
            _ => raw,
        };
        if !skipping && line.trim_start().starts_with("#[cfg(test)]") {
            skipping = true;
            depth = 0;
            opened = false;
            continue;
        }
        if skipping {
            if line.trim_start().starts_with("#[") && !opened {
                continue;
            }
            depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
            opened |= line.contains('{');
            if depth <= 0 && (opened || line.contains(';')) {
                skipping = false;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out_of_inline_modules(&out)
}

/// Inside an inline `mod x { … }`, `super` names the file's own module: the first
/// `super::` of a chain per level of nesting becomes `self::`, so each path is read
/// as the file's module would write it.
fn out_of_inline_modules(code: &str) -> String {
    let mut out = String::new();
    // The brace depth at which each open inline module started.
    let mut inline: Vec<i64> = Vec::new();
    let mut depth: i64 = 0;
    for line in code.lines() {
        let mut line = line.to_string();
        let levels = inline.len();
        if levels > 0 && line.contains("super::") {
            line = rewrite_super(&line, levels);
        }
        if mod_name(line.trim()).is_some() && line.contains('{') {
            inline.push(depth);
        }
        depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
        while inline.last().is_some_and(|&d| depth <= d) {
            inline.pop();
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn rewrite_super(line: &str, levels: usize) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find("super::") {
        out.push_str(&rest[..i]);
        let mut chain = 0;
        let mut after = &rest[i..];
        while let Some(r) = after.strip_prefix("super::") {
            chain += 1;
            after = r;
        }
        if chain <= levels {
            out.push_str("self::");
        } else {
            out.push_str(&"super::".repeat(chain - levels));
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Every path a file names through `crate`, `super` or `self`, and every `use` path
/// (braces expanded).
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = find_word(rest, "use") {
        let after = &rest[i + 3..];
        let Some(end) = after.find(';') else { break };
        // `x as y` keeps `x`: the alias is cut at `@`, then white space goes.
        let words: Vec<&str> = after[..end].split_whitespace().collect();
        let tree: String = words.join(" ").replace(" as ", "@").replace(' ', "");
        for path in expand(&tree) {
            out.push(split_path(&path));
        }
        rest = &after[end..];
    }
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start).map(|i| i + from) {
            from = i + start.len();
            if i > 0
                && (bytes[i - 1].is_ascii_alphanumeric()
                    || bytes[i - 1] == b'_'
                    || bytes[i - 1] == b':')
            {
                continue;
            }
            let path: String = code[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            // `crate::{…}` or `crate::a::{…}` opens a use tree, read above.
            if path.ends_with("::") {
                continue;
            }
            let path = split_path(&path);
            if path.len() > 1 {
                out.push(path);
            }
        }
    }
    out
}

fn find_word(text: &str, word: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find(word).map(|i| i + from) {
        let before = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let after = bytes
            .get(i + word.len())
            .is_some_and(|b| b.is_ascii_whitespace());
        if before && after {
            return Some(i);
        }
        from = i + word.len();
    }
    None
}

/// `a::{b,c::{d,e}}` → `a::b`, `a::c::d`, `a::c::e`; `self` in a group names the prefix.
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.split('@').next().unwrap_or(tree).to_string()];
    };
    let prefix = &tree[..open];
    // Text that only looked like a `use` (in a string) may not close its brace.
    let close = tree.rfind('}').filter(|&c| c > open).unwrap_or(tree.len());
    let inner = &tree[open + 1..close];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(expand)
        .map(|e| {
            if e == "self" {
                prefix.trim_end_matches(':').to_string()
            } else {
                format!("{prefix}{e}")
            }
        })
        .collect()
}

fn split_path(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(|s| s.split('@').next().unwrap_or(s).to_string())
        .collect()
}

/// Tarjan's strongly connected components of more than one node.
fn strongly_connected(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<ModPath, usize>,
        low: BTreeMap<ModPath, usize>,
        stack: Vec<ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    fn visit(s: &mut State, v: &ModPath) {
        let i = s.index.len();
        s.index.insert(v.clone(), i);
        s.low.insert(v.clone(), i);
        s.stack.push(v.clone());
        for w in s.edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                let done = &w == v;
                component.push(w);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    let nodes: BTreeSet<ModPath> = edges
        .iter()
        .flat_map(|(k, v)| std::iter::once(k.clone()).chain(v.iter().cloned()))
        .collect();
    for v in &nodes {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_trees_expand_to_every_path() {
        assert_eq!(
            expand("crate::{a::{b,c},d::{self},e}"),
            ["crate::a::b", "crate::a::c", "crate::d", "crate::e"]
        );
    }

    #[test]
    fn test_items_and_comments_are_not_code() {
        let code = "use crate::a;\n// use crate::b;\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\nfn f() { crate::d::g(); }\n";
        let paths = named_paths(&live_code(code));
        assert!(paths.contains(&split_path("crate::a")));
        assert!(paths.contains(&split_path("crate::d::g")));
        assert!(
            !paths
                .iter()
                .any(|p| p.last().is_some_and(|l| l == "b" || l == "c"))
        );
    }

    #[test]
    fn a_nested_use_tree_names_its_leaves_not_its_prefix() {
        let paths = named_paths("use crate::a::{b::C, d::E};\n");
        assert_eq!(
            paths,
            [split_path("crate::a::b::C"), split_path("crate::a::d::E")]
        );
    }

    #[test]
    fn super_in_an_inline_module_names_the_files_own_module() {
        let code = "use super::a;\npub mod inner {\n    use super::b;\n    use super::super::c;\n}\nuse super::d;\n";
        let read = live_code(code);
        assert_eq!(
            read,
            "use super::a;\npub mod inner {\n    use self::b;\n    use super::c;\n}\nuse super::d;\n"
        );
    }

    #[test]
    fn a_cycle_between_two_siblings_is_found_and_a_chain_is_not() {
        let m = |s: &str| vec![s.to_string()];
        let mut edges = BTreeMap::new();
        edges.insert(m("a"), BTreeSet::from([m("b")]));
        edges.insert(m("b"), BTreeSet::from([m("c")]));
        assert!(strongly_connected(&edges).is_empty());
        edges.insert(m("c"), BTreeSet::from([m("a")]));
        assert_eq!(
            strongly_connected(&edges),
            vec![vec![m("a"), m("b"), m("c")]]
        );
    }
}
