//! Manifests in: files, directories (walked for `.yaml`, `.yml`, `.json`), or `-` for
//! stdin (`kustomize build` / `helm template` output). Multi-document YAML is split at
//! its `---` markers so every object keeps its file, document number and line; a
//! `List` (`kind: List`, `PodList`, `DeploymentList` …) gives one object per item.

use std::{
    io::Read,
    path::{Path, PathBuf},
};

use serde::Serialize;
use thiserror::Error;

use super::node::Node;

#[derive(Debug, Error)]
pub enum InputError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{file}:{line} (document {document}): not valid YAML: {message}")]
    Yaml {
        file: String,
        document: usize,
        line: usize,
        message: String,
    },
}

/// Where an object was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    /// The path as given (or `-` for stdin).
    pub file: String,
    /// 1-based document number in the file.
    pub document: usize,
    /// 1-based line of the document's first content line.
    pub line: usize,
    /// 0-based index in a `List`'s `items`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<usize>,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if let Some(i) = self.item {
            write!(f, " items[{i}]")?;
        }
        Ok(())
    }
}

/// One Kubernetes object from the input.
#[derive(Debug, Clone)]
pub struct Object {
    pub location: Location,
    pub node: Node,
}

/// A text to lint, with the name it is reported under.
#[derive(Debug)]
pub struct Source {
    pub name: String,
    pub text: String,
}

/// Reads every input: `-` is stdin, a directory is walked (sorted, recursively).
pub fn read_sources(paths: &[PathBuf]) -> Result<Vec<Source>, InputError> {
    let mut sources = Vec::new();
    for path in paths {
        if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|source| InputError::Read {
                    path: "-".into(),
                    source,
                })?;
            sources.push(Source {
                name: "-".into(),
                text,
            });
        } else if path.is_dir() {
            for file in manifest_files(path)? {
                sources.push(read_file(&file)?);
            }
        } else {
            sources.push(read_file(path)?);
        }
    }
    Ok(sources)
}

fn read_file(path: &Path) -> Result<Source, InputError> {
    let name = path.display().to_string();
    std::fs::read_to_string(path)
        .map(|text| Source {
            name: name.clone(),
            text,
        })
        .map_err(|source| InputError::Read { path: name, source })
}

fn manifest_files(dir: &Path) -> Result<Vec<PathBuf>, InputError> {
    let err = |source| InputError::Read {
        path: dir.display().to_string(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(err)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    entries.sort();
    let mut files = Vec::new();
    for path in entries {
        if path.is_dir() && path.join("Chart.yaml").is_file() {
            // A chart's templates are not manifests until rendered.
            tracing::warn!(
                "skipping Helm chart {}: render it first (helm template {} | sidecar-race-agent lint -)",
                path.display(),
                path.display()
            );
        } else if path.is_dir() {
            files.extend(manifest_files(&path)?);
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            files.push(path);
        }
    }
    Ok(files)
}

/// A document's text and where it starts.
struct Document {
    number: usize,
    first_line: usize,
    text: String,
}

/// Splits at `---` (and `...`) markers in column 0, which YAML reserves for documents.
fn documents(text: &str) -> Vec<Document> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut first_line = None;
    let mut number = 0;
    let mut flush = |current: &mut String, first_line: &mut Option<usize>| {
        if let Some(line) = first_line.take() {
            number += 1;
            docs.push(Document {
                number,
                first_line: line,
                text: std::mem::take(current),
            });
        }
        current.clear();
    };
    for (i, line) in text.lines().enumerate() {
        let marker = line == "---"
            || line.starts_with("--- ")
            || line.starts_with("---\t")
            || line == "..."
            || line.starts_with("... ");
        if marker {
            flush(&mut current, &mut first_line);
            // `--- {inline: doc}` carries content after the marker.
            if let Some(rest) = line.strip_prefix("---")
                && !rest.trim().is_empty()
                && !rest.trim_start().starts_with('#')
            {
                first_line = Some(i + 1);
                current.push_str(rest);
                current.push('\n');
            }
            continue;
        }
        let trimmed = line.trim();
        if first_line.is_none()
            && !trimmed.is_empty()
            && !trimmed.starts_with('#')
            && !trimmed.starts_with('%')
        {
            first_line = Some(i + 1);
        }
        if !trimmed.starts_with('%') || first_line.is_some() {
            current.push_str(line);
            current.push('\n');
        }
    }
    flush(&mut current, &mut first_line);
    docs
}

/// One parsed document of a source.
#[derive(Debug, Clone)]
pub struct ParsedDocument {
    pub location: Location,
    /// The document's text as read (without its `---` marker).
    pub text: String,
    pub node: Node,
}

impl ParsedDocument {
    /// The `items` of a `List` (`kind: List`, `PodList` …), if it is one.
    pub fn list_items(&self) -> Option<&[Node]> {
        let is_list = self
            .node
            .get("kind")
            .and_then(Node::as_str)
            .is_some_and(|k| k.ends_with("List"));
        if is_list {
            self.node.get("items").and_then(Node::as_seq)
        } else {
            None
        }
    }
}

/// The non-empty documents of a source.
pub fn parse(source: &Source) -> Result<Vec<ParsedDocument>, InputError> {
    let mut out = Vec::new();
    for doc in documents(&source.text) {
        let node: Node = crate::kube_yaml::from_str(&doc.text).map_err(|e| InputError::Yaml {
            file: source.name.clone(),
            document: doc.number,
            line: doc.first_line,
            message: e.to_string().lines().next().unwrap_or_default().to_string(),
        })?;
        if node == Node::Null {
            continue;
        }
        out.push(ParsedDocument {
            location: Location {
                file: source.name.clone(),
                document: doc.number,
                line: doc.first_line,
                item: None,
            },
            text: doc.text,
            node,
        });
    }
    Ok(out)
}

/// The Kubernetes objects of one source, `List`s expanded.
pub fn objects(source: &Source) -> Result<Vec<Object>, InputError> {
    let mut out = Vec::new();
    for doc in parse(source)? {
        match doc.list_items() {
            Some(items) => out.extend(items.iter().enumerate().map(|(i, item)| Object {
                location: Location {
                    item: Some(i),
                    ..doc.location.clone()
                },
                node: item.clone(),
            })),
            None => out.push(Object {
                location: doc.location,
                node: doc.node,
            }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(text: &str) -> Source {
        Source {
            name: "m.yaml".into(),
            text: text.into(),
        }
    }

    #[test]
    fn documents_keep_their_number_and_line() {
        let text = "# leading comment\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n\n---\n# c\nkind: Service\nmetadata:\n  name: b\n  annotations:\n    x: |\n      --- not a marker, indented\n...\n--- {kind: ConfigMap}\n";
        let objs = objects(&source(text)).unwrap();
        let got: Vec<(usize, usize, &str)> = objs
            .iter()
            .map(|o| {
                (
                    o.location.document,
                    o.location.line,
                    o.node.get("kind").and_then(Node::as_str).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [(1, 3, "Pod"), (2, 10, "Service"), (3, 17, "ConfigMap")]
        );
    }

    #[test]
    fn lists_give_one_object_per_item() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- {kind: Pod, metadata: {name: a}}\n- {kind: Deployment, metadata: {name: b}}\n";
        let objs = objects(&source(text)).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].location.item, Some(1));
        assert_eq!(objs[1].location.to_string(), "m.yaml:1 items[1]");
    }

    #[test]
    fn json_and_broken_yaml() {
        let objs = objects(&source(r#"{"kind": "Pod", "metadata": {"name": "j"}}"#)).unwrap();
        assert_eq!(objs.len(), 1);
        let err = objects(&source("kind: Pod\n---\nkind: [unclosed\n")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("m.yaml:3 (document 2): not valid YAML"),
            "{text}"
        );
    }
}
