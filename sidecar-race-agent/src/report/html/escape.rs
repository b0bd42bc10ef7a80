//! Text from data (pod and workload names, advice, patches) made safe to place in the
//! page: control and bidi characters shown escaped, as the text formats show them
//! ([`printable`]), then `& < > " '` as entities, so no name can open a tag, end an
//! attribute or reorder what is read.

use crate::report::table::printable;

/// `s` as element text or a double-quoted attribute value.
pub fn text(s: &str) -> String {
    entities(&printable(s))
}

/// Multi-line text (a patch): each line as [`text`], the line breaks kept.
pub fn lines(s: &str) -> String {
    s.split('\n').map(text).collect::<Vec<_>>().join("\n")
}

fn entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_names_is_text() {
        assert_eq!(
            text(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }

    #[test]
    fn control_and_bidi_characters_read_escaped() {
        assert_eq!(text("a\u{202e}b\x1b[2J"), r"a\u{202e}b\x1b[2J");
        assert_eq!(lines("a: <b>\n  c: 1"), "a: &lt;b&gt;\n  c: 1");
    }
}
