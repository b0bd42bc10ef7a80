//! The BPF filesystem: whether a path is one, and the two calls aya does not expose
//! for objects it did not make (pinning an fd, opening a pinned program).

use std::{
    ffi::CString,
    io,
    os::fd::{FromRawFd, OwnedFd},
    path::Path,
};

/// `BPF_FS_MAGIC` of `statfs(2)`.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
const BPF_OBJ_PIN: libc::c_int = 6;
const BPF_OBJ_GET: libc::c_int = 7;

/// Whether `path` is the root or a directory of a mounted bpffs.
pub fn is_bpffs(path: &Path) -> io::Result<bool> {
    let c = cstring(path)?;
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a valid statfs to fill.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(st.f_type as i64 == BPF_FS_MAGIC)
}

/// Pins the object behind this process's `fd` (a link here) at `path` on a bpffs.
pub fn pin_raw_fd(fd: i32, path: &Path) -> io::Result<()> {
    obj(BPF_OBJ_PIN, path, fd as u32).map(|_| ())
}

/// An fd of the object pinned at `path` (a program here).
pub fn open_pin(path: &Path) -> io::Result<OwnedFd> {
    let fd = obj(BPF_OBJ_GET, path, 0)?;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `BPF_OBJ_PIN` or `BPF_OBJ_GET` of `path` (with `fd` to pin).
fn obj(cmd: libc::c_int, path: &Path, fd: u32) -> io::Result<libc::c_long> {
    #[repr(C)]
    struct Attr {
        pathname: u64,
        bpf_fd: u32,
        file_flags: u32,
    }
    let c = cstring(path)?;
    let attr = Attr {
        pathname: c.as_ptr() as u64,
        bpf_fd: fd,
        file_flags: 0,
    };
    bpf(cmd, &attr)
}

fn bpf<T>(cmd: libc::c_int, attr: &T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a `repr(C)` prefix of `union bpf_attr` for `cmd`; the kernel
    // reads `size_of::<T>()` bytes of it and zero-fills the rest.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *const T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}
