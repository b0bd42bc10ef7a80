//! A task's name (`comm`), kept inline: every refusal record carries one, and a heap
//! allocation per record was a measurable share of the agent's CPU per refusal.

use std::{fmt, ops::Deref};

use super::c_string::until_nul;

/// The kernel's `comm` field: at most 15 bytes and a NUL (16 when filled to the end).
const CAPACITY: usize = 16;

/// A process name, as UTF-8. Invalid bytes are replaced as `String::from_utf8_lossy`
/// does, and since each replacement takes 3 bytes, such a name keeps only its first
/// 16 bytes' worth.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Comm {
    len: u8,
    buf: [u8; CAPACITY],
}

impl Comm {
    /// From a kernel `comm` field: the bytes up to the first NUL.
    pub fn from_c_bytes(raw: &[u8]) -> Comm {
        // Borrows, allocating nothing, when the name is valid UTF-8.
        Comm::from(String::from_utf8_lossy(until_nul(raw)).as_ref())
    }

    pub fn as_str(&self) -> &str {
        let bytes = &self.buf[..usize::from(self.len)];
        // Only ever filled from a `&str`, cut at a character boundary.
        std::str::from_utf8(bytes).expect("a Comm holds UTF-8")
    }
}

impl From<&str> for Comm {
    /// Longer names (never from the kernel) are cut at a character boundary.
    fn from(s: &str) -> Comm {
        let mut end = s.len().min(CAPACITY);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let mut buf = [0; CAPACITY];
        buf[..end].copy_from_slice(&s.as_bytes()[..end]);
        Comm {
            len: end as u8,
            buf,
        }
    }
}

impl Deref for Comm {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// As its name: a checkpoint carries it.
impl serde::Serialize for Comm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Comm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Comm::from(name.as_ref()))
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for Comm {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Comm {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_name_ends_at_its_nul_and_keeps_invalid_bytes_visible() {
        assert_eq!(Comm::from_c_bytes(b"envoy\0\0garbage\0\0"), "envoy");
        assert_eq!(Comm::from_c_bytes(b"0123456789abcdef"), "0123456789abcdef");
        let bad = Comm::from_c_bytes(b"ok\xffname");
        assert_eq!(bad.as_str(), "ok\u{fffd}name");
        let all_bad = Comm::from_c_bytes(&[0xff; 16]);
        assert_eq!(
            all_bad.as_str(),
            "\u{fffd}".repeat(5),
            "cut at a character boundary"
        );
        assert_eq!(format!("{:?}", Comm::from("app")), "\"app\"");
    }

    #[test]
    fn long_names_are_cut_at_a_character_boundary() {
        let long = "é".repeat(9);
        let c = Comm::from(long.as_str());
        assert_eq!(c.len(), CAPACITY);
        assert!(long.starts_with(c.as_str()));
    }
}
