//! Starting a child process in a cgroup, as a container runtime puts a container's
//! processes in the container's cgroup.

use std::{ffi::CString, io, os::unix::process::CommandExt, path::Path, process::Command};

/// Makes `cmd` start in the cgroup `dir` (the v2 tree or one v1 hierarchy): between
/// fork and exec the child writes itself into `dir/cgroup.procs`, so everything it runs
/// is charged there from its first instruction.
pub fn start_in(cmd: &mut Command, dir: &Path) -> io::Result<()> {
    let procs = CString::new(
        dir.join("cgroup.procs")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: only async-signal-safe calls (open, write, close) between fork and exec;
    // `procs` is moved into the closure and outlives it.
    unsafe {
        cmd.pre_exec(move || {
            let f = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if f < 0 || libc::write(f, b"0".as_ptr().cast(), 1) != 1 {
                return Err(io::Error::last_os_error());
            }
            libc::close(f);
            Ok(())
        });
    }
    Ok(())
}
