//! The OpenMetrics text `/metrics` serves, read back into families and samples, so
//! that the OTLP export carries exactly what a scrape at the same moment would.

use std::fmt;

/// An OpenMetrics metric type, as `# TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    /// `unknown`, `info` and the types the agent never writes, exported as gauges.
    Other,
}

/// A sample's labels, in the order written.
pub type Labels = Vec<(String, String)>;

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's own name (`<family>_total`, `<family>_bucket`, ...).
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: String,
    pub kind: Kind,
    pub help: String,
    /// `# UNIT`, if given.
    pub unit: String,
    pub samples: Vec<Sample>,
}

/// Why the text could not be read (a bug of ours: the agent wrote it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {} of the exposition: {}", self.line, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// Every family of `text`, in order, with its samples.
pub fn parse(text: &str) -> Result<Vec<Family>, ParseError> {
    let mut families: Vec<Family> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let err = |reason: String| ParseError {
            line: i + 1,
            reason,
        };
        if line.is_empty() || line == "# EOF" {
            continue;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let (keyword, rest) = meta
                .split_once(' ')
                .ok_or_else(|| err("bare comment".into()))?;
            let (name, value) = rest.split_once(' ').unwrap_or((rest, ""));
            let family = match families.last_mut() {
                Some(f) if f.name == name => f,
                _ => {
                    families.push(Family {
                        name: name.to_string(),
                        kind: Kind::Other,
                        help: String::new(),
                        unit: String::new(),
                        samples: Vec::new(),
                    });
                    families.last_mut().expect("just pushed")
                }
            };
            match keyword {
                "HELP" => family.help = unescape(value),
                "UNIT" => family.unit = value.to_string(),
                "TYPE" => {
                    family.kind = match value {
                        "counter" => Kind::Counter,
                        "gauge" => Kind::Gauge,
                        "histogram" => Kind::Histogram,
                        _ => Kind::Other,
                    }
                }
                _ => {}
            }
            continue;
        }
        let sample = parse_sample(line).map_err(err)?;
        match families.last_mut() {
            Some(f) if sample.name.starts_with(&f.name) => f.samples.push(sample),
            _ => {
                return Err(err(format!(
                    "sample {} outside its family's metadata",
                    sample.name
                )));
            }
        }
    }
    Ok(families)
}

/// `name{a="x",b="y"} value [timestamp]`.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(['{', ' '])
        .ok_or_else(|| format!("no value in `{line}`"))?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, tail) = parse_labels(after)?;
        labels = parsed;
        rest = tail;
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or_else(|| format!("no value in `{line}`"))?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v
            .parse::<f64>()
            .map_err(|e| format!("value `{v}` of {name}: {e}"))?,
    };
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// The labels after `{`, and what follows the closing `}`.
fn parse_labels(mut s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches(',');
        if let Some(tail) = s.strip_prefix('}') {
            return Ok((labels, tail));
        }
        let (key, after) = s
            .split_once("=\"")
            .ok_or_else(|| format!("a label without a quoted value in `{s}`"))?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("a label value ends in a backslash".into()),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err(format!("label {key}'s value is not closed")),
            }
        };
        labels.push((key.to_string(), value));
        s = &after[end + 1..];
    }
}

/// HELP text escapes: `\\`, `\n`, `\"`.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}
