//! The commands in the docs' fenced code blocks (tests/tests/doc_commands.rs runs them).
//!
//! A block's info string says what it holds: `sh` (also `bash`, `shell`) every line a
//! command, `console` the lines that start with `$ `, any other language no command.
//! A block without a language is an error, so no command hides in one. The word
//! `cluster` in the info string (```` ```sh cluster ````), or a line ending in
//! `# on your cluster`, marks commands for the user's cluster, nodes or registry.

use std::path::{Path, PathBuf};

/// One command as the docs give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocCommand {
    /// Where it is: `README.md:18`.
    pub at: String,
    /// The command, continuation lines joined, without its trailing comment.
    pub text: String,
    /// Marked as meant for the user's cluster, its nodes or a registry.
    pub cluster: bool,
}

/// The Markdown files whose commands are checked: the README, the contributor and
/// security guides, `docs/*.md` and `deploy/README.md`.
pub fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "README.md",
        "CONTRIBUTING.md",
        "SECURITY.md",
        "deploy/README.md",
    ]
    .iter()
    .map(|f| root.join(f))
    .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .collect()
        })
        .unwrap_or_default();
    docs.sort();
    files.extend(docs);
    files
}

/// Every command of `text` (the Markdown file `name`), or where a block has no language.
pub fn commands(name: &str, text: &str) -> Result<Vec<DocCommand>, String> {
    let mut out = Vec::new();
    let mut block: Option<Block> = None;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            block = match block {
                Some(_) => None,
                None => Some(Block::open(info.trim()).ok_or_else(|| {
                    format!(
                        "{name}:{n}: a code block without a language (sh, console, text, yaml, …)"
                    )
                })?),
            };
            continue;
        }
        let Some(b) = &block else { continue };
        let command = match (b.kind, &mut pending) {
            (_, Some((_, so_far))) => {
                so_far.push(' ');
                so_far.push_str(trimmed);
                None
            }
            (Kind::Shell, None) => Some(trimmed),
            (Kind::Console, None) => trimmed.strip_prefix("$ "),
            (Kind::Other, None) => None,
        };
        if let Some(c) = command.filter(|c| !c.is_empty() && !c.starts_with('#')) {
            pending = Some((n, c.to_string()));
        }
        let continues = pending.as_ref().is_some_and(|(_, c)| c.ends_with('\\'));
        if let Some((start, c)) = pending.take_if(|_| !continues) {
            out.push(DocCommand::new(format!("{name}:{start}"), &c, b.cluster));
        } else if let Some((_, c)) = pending.as_mut() {
            c.pop();
            c.truncate(c.trim_end().len());
        }
    }
    Ok(out)
}

#[derive(Clone, Copy)]
enum Kind {
    Shell,
    Console,
    Other,
}

struct Block {
    kind: Kind,
    cluster: bool,
}

impl Block {
    /// The block an info string opens; `None` without a language.
    fn open(info: &str) -> Option<Block> {
        let mut words = info.split_whitespace();
        let kind = match words.next()? {
            "sh" | "bash" | "shell" => Kind::Shell,
            "console" => Kind::Console,
            _ => Kind::Other,
        };
        Some(Block {
            kind,
            cluster: words.any(|w| w == "cluster"),
        })
    }
}

impl DocCommand {
    fn new(at: String, line: &str, cluster_block: bool) -> Self {
        let (text, comment) = split_comment(line);
        DocCommand {
            at,
            text: text.to_string(),
            cluster: cluster_block || comment.contains("on your cluster"),
        }
    }
}

/// The command and its trailing `# comment` (a `#` after a space, outside quotes).
fn split_comment(line: &str) -> (&str, &str) {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return (line[..i].trim_end(), &line[i..]),
            _ => {}
        }
        prev = c;
    }
    (line.trim_end(), "")
}

/// Splits a command into words as `sh` would for the commands the docs hold: quotes
/// group, `$(…)` and `~` are kept as written (the runner expands what it knows).
pub fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut in_word = false;
    for c in command.chars() {
        match (quote, c) {
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (Some(q), _) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            _ => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(md: &str) -> Vec<(String, bool)> {
        commands("x.md", md)
            .unwrap()
            .into_iter()
            .map(|c| (c.text, c.cluster))
            .collect()
    }

    #[test]
    fn shell_lines_console_prompts_and_marks() {
        let md = "intro\n```sh\n# a comment\ncargo xtask demo   # what it does\n\nls \\\n  -l\n```\n\
                  ```console\n$ sidecar-race-agent lint deploy/\n#  OUTPUT\n```\n\
                  ```yaml\nkind: Pod\n```\n```sh cluster\nkubectl apply -k deploy/\n```\n\
                  ```sh\nkubectl get pods   # on your cluster\n```\n";
        assert_eq!(
            texts(md),
            [
                ("cargo xtask demo".into(), false),
                ("ls -l".into(), false),
                ("sidecar-race-agent lint deploy/".into(), false),
                ("kubectl apply -k deploy/".into(), true),
                ("kubectl get pods".into(), true),
            ]
        );
        let at: Vec<String> = commands("x.md", md)
            .unwrap()
            .into_iter()
            .map(|c| c.at)
            .collect();
        assert_eq!(at[0], "x.md:4");
        assert_eq!(at[1], "x.md:6");
    }

    #[test]
    fn a_block_without_a_language_is_an_error() {
        let err = commands("x.md", "a\n```\ncargo xtask demo\n```\n").unwrap_err();
        assert!(err.starts_with("x.md:2:"), "{err}");
    }

    #[test]
    fn words_group_quotes() {
        assert_eq!(
            words(r#"ln -s "$(command -v a b)" ~/x  'c d'"#),
            ["ln", "-s", "$(command -v a b)", "~/x", "c d"]
        );
    }
}
