//! Tables of the report's text formats: aligned columns for a terminal, a Markdown
//! table for tickets, and the escaping that keeps user-given names from rewriting
//! either.

use std::fmt::Write as _;

/// One column: its header in each format, and whether it holds numbers
/// (right-aligned).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Column {
    pub header: &'static str,
    pub md_header: &'static str,
    pub numeric: bool,
}

/// The header and `rows` as aligned text, two spaces between columns, each line
/// trimmed at its end; cells are made printable here.
pub fn aligned(columns: &[Column], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| printable(c)).collect())
        .collect();
    let mut widths: Vec<usize> = columns.iter().map(|c| c.header.len()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let header: Vec<String> = columns.iter().map(|c| c.header.to_string()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            let sep = if i == 0 { "" } else { "  " };
            if columns[i].numeric {
                let _ = write!(line, "{sep}{}{cell}", " ".repeat(pad));
            } else {
                let _ = write!(line, "{sep}{cell}{}", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The header, the alignment row and `rows` (already escaped) as a Markdown table.
pub fn markdown(columns: &[Column], rows: &[Vec<String>]) -> String {
    let headers: Vec<&str> = columns.iter().map(|c| c.md_header).collect();
    let align: Vec<&str> = columns
        .iter()
        .map(|c| if c.numeric { "---:" } else { "---" })
        .collect();
    let mut out = format!("| {} |\n|{}|\n", headers.join(" | "), align.join("|"));
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out
}

/// Keeps a cell a cell: `|` would split it, a newline would end the row.
pub fn md_escape(s: &str) -> String {
    printable(&s.replace('|', "\\|").replace('\n', " "))
}

/// Names come from users (pods, workloads, containers): control characters (terminal
/// escapes, carriage returns, newlines) and bidirectional overrides are shown escaped
/// (`\x1b`, `\u{202e}`) so they cannot rewrite the terminal or reorder what is read.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() && (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else if c.is_control() || bidi {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}
