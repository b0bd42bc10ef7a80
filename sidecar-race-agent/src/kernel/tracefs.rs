//! tracefs: where it is mounted, and the `format` files that document each
//! tracepoint's record layout on the running kernel.

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
};

use sidecar_race_mountinfo as mountinfo;
use thiserror::Error;

pub const DEFAULT_TRACEFS: &str = "/sys/kernel/tracing";

#[derive(Debug, Error)]
pub enum TracefsError {
    #[error(
        "tracefs is not mounted and mounting it at {path} failed ({source}); mount it on the host \
         (`mount -t tracefs nodev {path}`) or into the agent's container"
    )]
    NotMounted { path: PathBuf, source: io::Error },
    #[error("kernel tracepoint {0} is not available (no {1})")]
    MissingTracepoint(String, PathBuf),
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("malformed tracefs format for {event}: {reason}")]
    Malformed { event: String, reason: String },
}

/// One field of a tracepoint record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub decl: String,
    pub offset: u16,
    pub size: u16,
}

/// The parsed `format` file of one tracepoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFormat {
    pub fields: HashMap<String, Field>,
    /// The `print fmt:` line, whose `__print_symbolic` tables number this kernel's
    /// enums (a drop reason's number differs between kernels).
    pub print_fmt: String,
}

impl EventFormat {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.get(name)
    }

    /// The number `__print_symbolic` gives `symbol` (`{ 3, "NO_SOCKET" }`), if any.
    pub fn symbol_value(&self, symbol: &str) -> Option<u32> {
        let quoted = format!("\"{symbol}\"");
        let at = self.print_fmt.find(&quoted)?;
        let before = &self.print_fmt[..at];
        let open = before.rfind('{')?;
        before[open + 1..]
            .trim()
            .trim_end_matches(',')
            .trim()
            .parse()
            .ok()
    }
}

/// Parses a tracefs `format` file. `event` only names the tracepoint in errors.
pub fn parse_format(event: &str, text: &str) -> Result<EventFormat, TracefsError> {
    let malformed = |reason: String| TracefsError::Malformed {
        event: event.to_string(),
        reason,
    };
    let mut fields = HashMap::new();
    let mut print_fmt = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(fmt) = line.strip_prefix("print fmt:") {
            print_fmt = fmt.trim().to_string();
            continue;
        }
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut decl = None;
        let mut offset = None;
        let mut size = None;
        for part in rest.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.parse::<u16>().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse::<u16>().ok();
            } else if part.starts_with("signed:") {
            } else if decl.is_none() {
                decl = Some(part.to_string());
            }
        }
        let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) else {
            return Err(malformed(format!("cannot read field line `{line}`")));
        };
        let name = field_name(&decl).ok_or_else(|| malformed(format!("no name in `{decl}`")))?;
        fields.insert(name, Field { decl, offset, size });
    }
    if fields.is_empty() {
        return Err(malformed("no fields".into()));
    }
    Ok(EventFormat { fields, print_fmt })
}

/// `__u8 saddr_v6[16]` → `saddr_v6`; `__data_loc char[] path` → `path`.
fn field_name(decl: &str) -> Option<String> {
    let last = decl.split_whitespace().last()?;
    let name = last.split('[').next()?.trim_start_matches('*');
    (!name.is_empty()).then(|| name.to_string())
}

/// A mounted tracefs.
#[derive(Debug, Clone)]
pub struct Tracefs {
    root: PathBuf,
}

impl Tracefs {
    /// Uses `root` as it is (tests, or `--tracefs`).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Finds tracefs in mountinfo (or under debugfs), mounting it at the default
    /// place when the host has not.
    pub fn find_or_mount() -> Result<Self, TracefsError> {
        let mounts = mountinfo::read_self().unwrap_or_default();
        if let Some(m) = mounts.iter().find(|m| m.fs_type == "tracefs") {
            return Ok(Self::at(&m.mount_point));
        }
        if let Some(m) = mounts.iter().find(|m| m.fs_type == "debugfs") {
            let tracing = m.mount_point.join("tracing");
            if tracing.join("events").is_dir() {
                return Ok(Self::at(tracing));
            }
        }
        let path = PathBuf::from(DEFAULT_TRACEFS);
        mount_tracefs(&path).map_err(|source| TracefsError::NotMounted {
            path: path.clone(),
            source,
        })?;
        Ok(Self::at(path))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The format of `category:name`, or why it cannot be had.
    pub fn format(&self, category: &str, name: &str) -> Result<EventFormat, TracefsError> {
        let path = self
            .root
            .join("events")
            .join(category)
            .join(name)
            .join("format");
        let text = std::fs::read_to_string(&path).map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                TracefsError::MissingTracepoint(format!("{category}:{name}"), path.clone())
            } else {
                TracefsError::Read {
                    path: path.clone(),
                    source,
                }
            }
        })?;
        parse_format(&format!("{category}:{name}"), &text)
    }
}

fn mount_tracefs(path: &Path) -> io::Result<()> {
    use std::ffi::CString;
    let target = CString::new(path.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
    // SAFETY: valid NUL-terminated strings; a plain mount(2).
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_with_arrays_pointers_and_data_loc() {
        let f = parse_format(
            "x:y",
            "name: y\nID: 1\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\
             \tfield:const void * skaddr;\toffset:8;\tsize:8;\tsigned:0;\n\
             \tfield:__u8 saddr_v6[16];\toffset:40;\tsize:16;\tsigned:0;\n\
             \tfield:__data_loc char[] path;\toffset:24;\tsize:4;\tsigned:0;\n\nprint fmt: \"\"\n",
        )
        .unwrap();
        assert_eq!(f.field("skaddr").unwrap().offset, 8);
        assert_eq!(f.field("saddr_v6").unwrap().size, 16);
        assert_eq!(f.field("path").unwrap().offset, 24);
        assert_eq!(f.field("common_type").unwrap().size, 2);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_format("x:y", "name: y\nformat:\n").is_err());
        assert!(parse_format("x:y", "field:int a; offset:zz; size:4;").is_err());
    }

    #[test]
    fn missing_tracepoint_names_it() {
        let dir = std::env::temp_dir().join(format!("sr-tracefs-{}", std::process::id()));
        let err = Tracefs::at(&dir).format("tcp", "tcp_nope").unwrap_err();
        assert!(err.to_string().contains("tcp:tcp_nope"), "{err}");
    }
}
