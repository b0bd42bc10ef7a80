//! Files the agent reads back from its state directory (the checkpoint, the pins'
//! manifests, the node lock's holder): opened once, without blocking (a FIFO there
//! would hold the start before the health server answers, and the liveness probe
//! would restart the agent for ever), required to be regular files (a symlink to
//! `/dev/zero` reads until memory runs out), and read through a bound.

use std::{
    fs::{File, OpenOptions},
    io::{self, Read},
    os::unix::fs::{FileTypeExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("{} does not exist", .0.display())]
    Missing(PathBuf),
    #[error("{} is {kind}, not a regular file", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{} holds more than {cap} bytes", path.display())]
    TooLarge { path: PathBuf, cap: usize },
    #[error("cannot read {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

impl StateFileError {
    fn io(path: &Path, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::NotFound {
            return Self::Missing(path.to_path_buf());
        }
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// `path` opened with `options` (never blocking in `open`), when it is a regular file.
pub fn open_regular(path: &Path, options: &mut OpenOptions) -> Result<File, StateFileError> {
    let file = options
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| StateFileError::io(path, e))?;
    let kind = file
        .metadata()
        .map_err(|e| StateFileError::io(path, e))?
        .file_type();
    if !kind.is_file() {
        return Err(StateFileError::NotRegular {
            path: path.to_path_buf(),
            kind: describe(kind),
        });
    }
    Ok(file)
}

/// All of `file` (named `path` in errors), at most `cap` bytes: one more is an error,
/// whatever its size claimed.
pub fn read_bounded(file: &mut File, path: &Path, cap: usize) -> Result<Vec<u8>, StateFileError> {
    let mut bytes = Vec::new();
    file.take(cap as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| StateFileError::io(path, e))?;
    if bytes.len() > cap {
        return Err(StateFileError::TooLarge {
            path: path.to_path_buf(),
            cap,
        });
    }
    Ok(bytes)
}

/// The regular file at `path`, at most `cap` bytes.
pub fn read(path: &Path, cap: usize) -> Result<Vec<u8>, StateFileError> {
    let mut file = open_regular(path, OpenOptions::new().read(true))?;
    read_bounded(&mut file, path, cap)
}

fn describe(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_or_a_device_is_refused_at_once_and_a_long_file_at_its_cap() {
        let dir = crate::test_facts::temp_dir("state-file");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer ever comes: an `open` that blocked would hang the test.
        let err = read(&fifo, 1024).unwrap_err();
        assert!(
            err.to_string().contains("is a FIFO, not a regular file"),
            "{err}"
        );
        let zero = dir.join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let err = read(&zero, 1024).unwrap_err();
        assert!(matches!(err, StateFileError::NotRegular { .. }), "{err}");
        let long = dir.join("long");
        std::fs::write(&long, [b'x'; 11]).unwrap();
        assert!(matches!(
            read(&long, 10),
            Err(StateFileError::TooLarge { cap: 10, .. })
        ));
        assert_eq!(read(&long, 11).unwrap().len(), 11);
        assert!(matches!(
            read(&dir.join("none"), 10),
            Err(StateFileError::Missing(_))
        ));
    }
}
