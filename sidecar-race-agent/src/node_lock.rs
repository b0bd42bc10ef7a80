//! One agent per node: an exclusive `flock` on `<state dir>/lock`, held for the
//! agent's life and dropped by the kernel when it exits, however it exits. The
//! pinned kernel state and the checkpoint have one owner at a time; a second agent
//! (a surge pod, one started by hand) waits for the first to go.

use std::{
    fs::File,
    io::{Seek, Write},
    os::{fd::AsRawFd, unix::fs::OpenOptionsExt},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use thiserror::Error;

use crate::state_file;

/// The most of the lock file read for its holder's pid.
const HOLDER_BYTES: usize = 64;

#[derive(Debug, Error)]
pub enum LockError {
    #[error("cannot use the state directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot use the node lock: {why}")]
    NotUsable { path: PathBuf, why: String },
    #[error(
        "another agent ({holder}) still holds {path} after {waited:?}: one agent runs per \
         node; stop it, or give this one --pin=off"
    )]
    Held {
        path: PathBuf,
        holder: String,
        waited: Duration,
    },
}

/// The held lock; released when dropped or when the process ends.
#[derive(Debug)]
pub struct NodeLock {
    _file: File,
}

impl NodeLock {
    /// Takes the lock in `state_dir` (made, mode 0700, if missing), waiting up to
    /// `wait` for another agent to release it.
    pub fn acquire(state_dir: &Path, wait: Duration) -> Result<Self, LockError> {
        let path = state_dir.join("lock");
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(state_dir)
                .map_err(io)?;
        }
        // A FIFO or a device in its place is no lock: refused (the agent goes on
        // without pins), never waited on or read without end.
        let mut file = state_file::open_regular(
            &path,
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600),
        )
        .map_err(|e| LockError::NotUsable {
            path: path.clone(),
            why: e.to_string(),
        })?;
        let start = Instant::now();
        let mut told = false;
        loop {
            // SAFETY: flock on an fd this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                break;
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io(err));
            }
            let holder = holder(&mut file, &path);
            if start.elapsed() >= wait {
                return Err(LockError::Held {
                    path,
                    holder,
                    waited: wait,
                });
            }
            if !told {
                tracing::info!(
                    "waiting for another agent ({holder}) to release {}",
                    path.display()
                );
                told = true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Who holds it, for the next one's message.
        let pid = std::process::id();
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{pid}"))
            .map_err(io)?;
        Ok(Self { _file: file })
    }
}

/// The holder's pid as it wrote it (a line; more is not read).
fn holder(file: &mut File, path: &Path) -> String {
    let bytes = file
        .rewind()
        .ok()
        .and_then(|()| state_file::read_bounded(file, path, HOLDER_BYTES).ok())
        .unwrap_or_default();
    match String::from_utf8_lossy(&bytes).trim() {
        "" => "pid unknown".to_string(),
        pid => format!("pid {pid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_agent_waits_then_names_the_holder_and_gets_the_lock_once_it_goes() {
        let dir = crate::test_facts::temp_dir("node-lock").join("state");
        let first = NodeLock::acquire(&dir, Duration::ZERO).unwrap();
        let err = NodeLock::acquire(&dir, Duration::from_millis(250)).unwrap_err();
        let said = err.to_string();
        assert!(
            said.contains(&format!("pid {}", std::process::id())),
            "{said}"
        );
        assert!(said.contains("one agent runs per node"), "{said}");
        drop(first);
        NodeLock::acquire(&dir, Duration::ZERO).expect("free once the first is gone");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_lock_file_that_is_a_fifo_is_refused_at_once() {
        let dir = crate::test_facts::temp_dir("node-lock-fifo").join("state");
        std::fs::create_dir_all(&dir).unwrap();
        let c = std::ffi::CString::new(dir.join("lock").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = NodeLock::acquire(&dir, Duration::ZERO).unwrap_err();
        assert!(matches!(err, LockError::NotUsable { .. }), "{err}");
        assert!(err.to_string().contains("a FIFO"), "{err}");
    }
}
