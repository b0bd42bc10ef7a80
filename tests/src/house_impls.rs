//! Which files hold an `impl` of a type: where its fields can be reached. The agent's
//! `Pipeline` keeps them to one file (pipeline/state.rs, as CONTRIBUTING's layout
//! says): its stages own their state and are handed what they read, and no other file
//! grows methods on the pipeline again. tests/tests/house.rs checks it.

use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::house::rust_files;

/// The files below `src` with an `impl` of `type_name`, relative to `src`, sorted.
pub fn files_implementing(src: &Path, type_name: &str) -> Vec<PathBuf> {
    rust_files(src)
        .into_iter()
        .filter(|f| has_impl_of(&fs::read_to_string(f).unwrap_or_default(), type_name))
        .map(|f| f.strip_prefix(src).expect("under src").to_path_buf())
        .collect()
}

/// Whether `code` (a file's text) has an `impl` block of `type_name`, inherent or of a
/// trait (`impl T`, `impl<'a> a::T<'a>`, `impl Trait for T`), comments aside; test
/// code counts too (a test could reach the fields only from the type's own file).
pub fn has_impl_of(code: &str, type_name: &str) -> bool {
    code.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .filter_map(impl_target)
        .any(|t| t == type_name)
}

/// The type an `impl` line is for, as its path's last segment without generics.
fn impl_target(line: &str) -> Option<&str> {
    let line = line.trim_start();
    let rest = line
        .strip_prefix("unsafe ")
        .unwrap_or(line)
        .strip_prefix("impl")?;
    let rest = match rest.strip_prefix('<') {
        Some(generics) => after_closing_angle(generics)?,
        // `impl X`, not `implement`.
        None => rest.strip_prefix(char::is_whitespace)?,
    };
    let ty = rest.rsplit(" for ").next().unwrap_or(rest).trim_start();
    let path = ty
        .split(|c: char| c == '<' || c == '{' || c.is_whitespace())
        .next()?;
    let last = path.rsplit("::").next()?;
    (!last.is_empty()).then_some(last)
}

/// The text after the `>` that closes an already opened `<`.
fn after_closing_angle(text: &str) -> Option<&str> {
    let mut depth = 1;
    for (i, c) in text.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            return Some(&text[i + 1..]);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_an_impl_of_the_type_is_found() {
        for code in [
            "impl Pipeline {\n}",
            "  impl Pipeline{}",
            "impl Default for Pipeline {",
            "impl<'a> crate::pipeline::Pipeline {",
            "impl<T: Into<u8>> From<T> for super::state::Pipeline {",
            "unsafe impl Send for Pipeline {}",
            "fn f() {}\nimpl Pipeline\n{\n}",
        ] {
            assert!(has_impl_of(code, "Pipeline"), "{code:?} was not found");
        }
    }

    #[test]
    fn other_types_comments_and_words_are_not() {
        for code in [
            "impl PipelineSnapshot {",
            "impl From<Pipeline> for Totals {",
            "// impl Pipeline {",
            "/// The only `impl Pipeline`.",
            "fn implement(p: Pipeline) {}",
            "impl Accounts { fn pipeline() {} }",
        ] {
            assert!(!has_impl_of(code, "Pipeline"), "{code:?} was taken for one");
        }
    }
}
