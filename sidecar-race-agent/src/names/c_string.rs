//! Kernel string fields: fixed-size byte arrays, NUL-terminated unless full.

/// A kernel string field's bytes up to its first NUL (all of them when it has none).
pub fn until_nul(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

/// A kernel string field as text (invalid UTF-8 replaced).
pub fn c_string(b: &[u8]) -> String {
    String::from_utf8_lossy(until_nul(b)).into_owned()
}
