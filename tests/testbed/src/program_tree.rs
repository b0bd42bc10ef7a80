//! Picks programs out of a Debian root tree with everything they load: each program,
//! its ELF interpreter and every `NEEDED` library, transitively (binutils' `readelf`,
//! which reads any architecture's), each library under its soname in the first of the
//! library directories that has it.
//!
//! Used for the kernel tier's arm64 guest (xtask/src/guest_userland.rs: packages
//! unpacked with `dpkg-deb -x`) and for the glibc test image (`images.rs`: the host's
//! own binaries, root `/`). Nothing is installed or run; the files are only read.

use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
    process::Command,
};

use thiserror::Error;

/// Where a tree's files come from.
pub struct Source<'a> {
    /// The root the programs' paths, the interpreter's and the libraries' are under
    /// (`/` for the host's own binaries).
    pub root: &'a Path,
    /// The directories under `root` a soname is looked up in, in order (Debian's
    /// loader's: `lib/<multiarch>`, `usr/lib/<multiarch>`).
    pub lib_dirs: &'a [&'a str],
}

/// One file of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A regular file: where its bytes are (symbolic links followed) and its mode.
    File { from: PathBuf, mode: u32 },
    /// A symbolic link kept as it is (inside a copied directory).
    Link(PathBuf),
}

/// The tree: each file's path relative to the tree's root (no leading `/`), sorted.
pub type Tree = BTreeMap<String, Item>;

#[derive(Debug, Error)]
pub enum TreeError {
    #[error("{} is missing: {source}", path.display())]
    Missing { path: PathBuf, source: io::Error },
    #[error("{} is a symbolic link loop", path.display())]
    LinkLoop { path: PathBuf },
    #[error("readelf -l -d {} failed (Debian: binutils): {why}", path.display())]
    Readelf { path: PathBuf, why: String },
    #[error("{} needs {soname}, which none of {dirs:?} under {} has", elf.display(), root.display())]
    NoLibrary {
        elf: PathBuf,
        soname: String,
        dirs: Vec<String>,
        root: PathBuf,
    },
    #[error("cannot copy {} to {}: {source}", from.display(), to.display())]
    Copy {
        from: PathBuf,
        to: PathBuf,
        source: io::Error,
    },
}

impl Source<'_> {
    /// The tree of `programs` ((path in the tree, path under the root)), the files of
    /// `dirs` (paths under the root, copied whole, symbolic links kept) and every ELF
    /// file's interpreter and libraries, transitively.
    pub fn collect(&self, programs: &[(&str, &str)], dirs: &[&str]) -> Result<Tree, TreeError> {
        let mut tree = Tree::new();
        let mut pending: Vec<PathBuf> = Vec::new();
        for (at, from) in programs {
            self.add(&mut tree, &mut pending, at, Path::new(from))?;
        }
        for dir in dirs {
            self.add_dir(&mut tree, &mut pending, dir)?;
        }
        while let Some(elf) = pending.pop() {
            let (interpreter, needed) = dynamic_needs(&elf)?;
            if let Some(interpreter) = interpreter {
                let rel = interpreter.trim_start_matches('/');
                self.add(&mut tree, &mut pending, rel, Path::new(rel))?;
            }
            for soname in needed {
                let Some(dir) = self
                    .lib_dirs
                    .iter()
                    .find(|d| fs::symlink_metadata(self.root.join(d).join(&soname)).is_ok())
                else {
                    return Err(TreeError::NoLibrary {
                        elf,
                        soname,
                        dirs: self.lib_dirs.iter().map(|d| d.to_string()).collect(),
                        root: self.root.to_path_buf(),
                    });
                };
                let rel = format!("{dir}/{soname}");
                self.add(&mut tree, &mut pending, &rel, Path::new(&rel))?;
            }
        }
        Ok(tree)
    }

    /// `from` (under the root, links followed) at `at`, unless `at` is there already;
    /// an ELF file is queued for its needs.
    fn add(
        &self,
        tree: &mut Tree,
        pending: &mut Vec<PathBuf>,
        at: &str,
        from: &Path,
    ) -> Result<(), TreeError> {
        if tree.contains_key(at) {
            return Ok(());
        }
        let file = self.resolve(from)?;
        let mode = mode_of(&file)?;
        if is_elf(&file) {
            pending.push(file.clone());
        }
        tree.insert(at.to_string(), Item::File { from: file, mode });
        Ok(())
    }

    /// Every file under `dir` (relative to the root) at the same path in the tree.
    fn add_dir(
        &self,
        tree: &mut Tree,
        pending: &mut Vec<PathBuf>,
        dir: &str,
    ) -> Result<(), TreeError> {
        let path = self.resolve(Path::new(dir))?;
        let entries = fs::read_dir(&path).map_err(|source| TreeError::Missing {
            path: path.clone(),
            source,
        })?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let rel = format!("{dir}/{name}");
            let at = path.join(&name);
            let meta = fs::symlink_metadata(&at).map_err(|source| TreeError::Missing {
                path: at.clone(),
                source,
            })?;
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&at).map_err(|source| TreeError::Missing {
                    path: at.clone(),
                    source,
                })?;
                tree.insert(rel, Item::Link(target));
            } else if meta.is_dir() {
                self.add_dir(tree, pending, &rel)?;
            } else {
                self.add(tree, pending, &rel, Path::new(&rel))?;
            }
        }
        Ok(())
    }

    /// `rel` under the root, following symbolic links inside the root (absolute ones
    /// included).
    fn resolve(&self, rel: &Path) -> Result<PathBuf, TreeError> {
        let rel = rel.strip_prefix("/").unwrap_or(rel);
        let mut at = self.root.join(rel);
        for _ in 0..40 {
            let meta = fs::symlink_metadata(&at).map_err(|source| TreeError::Missing {
                path: at.clone(),
                source,
            })?;
            if !meta.file_type().is_symlink() {
                return Ok(at);
            }
            let target = fs::read_link(&at).map_err(|source| TreeError::Missing {
                path: at.clone(),
                source,
            })?;
            at = match target.strip_prefix("/") {
                Ok(inside) => self.root.join(inside),
                Err(_) => at.parent().expect("a parent").join(target),
            };
        }
        Err(TreeError::LinkLoop {
            path: rel.to_path_buf(),
        })
    }
}

/// Copies `tree` into the directory `to` (made if missing), modes kept.
pub fn lay_out(tree: &Tree, to: &Path) -> Result<(), TreeError> {
    for (at, item) in tree {
        let dest = to.join(at);
        let copy_err = |from: &Path| {
            let (from, to) = (from.to_path_buf(), dest.clone());
            move |source| TreeError::Copy { from, to, source }
        };
        let parent = dest.parent().expect("a parent");
        fs::create_dir_all(parent).map_err(copy_err(parent))?;
        match item {
            Item::File { from, .. } => {
                fs::copy(from, &dest).map_err(copy_err(from))?;
            }
            Item::Link(target) => {
                std::os::unix::fs::symlink(target, &dest).map_err(copy_err(target))?;
            }
        }
    }
    Ok(())
}

fn mode_of(file: &Path) -> Result<u32, TreeError> {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(file)
        .map(|m| m.permissions().mode() & 0o7777)
        .map_err(|source| TreeError::Missing {
            path: file.to_path_buf(),
            source,
        })
}

fn is_elf(file: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    fs::File::open(file)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// The program interpreter and `NEEDED` libraries of an ELF file.
fn dynamic_needs(elf: &Path) -> Result<(Option<String>, Vec<String>), TreeError> {
    let failed = |why: String| TreeError::Readelf {
        path: elf.to_path_buf(),
        why,
    };
    let out = Command::new("readelf")
        .args(["-W", "-l", "-d"])
        .arg(elf)
        .output()
        .map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let bracketed = |line: &str, key: &str| {
        let rest = &line[line.find(key)? + key.len()..];
        Some(rest[..rest.find(']')?].to_string())
    };
    let interpreter = text
        .lines()
        .find_map(|l| bracketed(l, "[Requesting program interpreter: "));
    let needed = text
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| bracketed(l, "Shared library: ["))
        .collect();
    Ok((interpreter, needed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::HOST_LIB_DIRS;

    fn host() -> Source<'static> {
        Source {
            root: Path::new("/"),
            lib_dirs: &HOST_LIB_DIRS,
        }
    }

    #[test]
    fn a_program_comes_with_its_loader_and_libraries() {
        let tree = host()
            .collect(&[("usr/bin/getent", "/usr/bin/getent")], &[])
            .unwrap();
        let names: Vec<&str> = tree.keys().map(String::as_str).collect();
        assert!(names.contains(&"usr/bin/getent"), "{names:?}");
        assert!(names.iter().any(|n| n.ends_with("/libc.so.6")), "{names:?}");
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("lib") && n.contains("/ld-linux")),
            "the loader: {names:?}"
        );
        // Links are followed: the loader is a file, with its mode.
        assert!(
            tree.values()
                .all(|i| matches!(i, Item::File { mode, .. } if mode & 0o400 != 0))
        );
    }

    #[test]
    fn a_missing_loader_names_it() {
        let root = std::env::temp_dir().join(format!("sr-program-tree-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        fs::copy("/usr/bin/getent", root.join("usr/bin/getent")).unwrap();
        let source = Source {
            root: &root,
            lib_dirs: &HOST_LIB_DIRS,
        };
        let err = source
            .collect(&[("bin/getent", "usr/bin/getent")], &[])
            .unwrap_err();
        let _ = fs::remove_dir_all(&root);
        // The interpreter comes first: with no loader in the root, that is what is missing.
        let text = err.to_string();
        assert!(
            matches!(err, TreeError::Missing { .. }) && text.contains("ld-linux"),
            "{text}"
        );
    }

    #[test]
    fn a_missing_soname_is_a_clear_error() {
        let root = std::env::temp_dir().join(format!("sr-program-tree-so-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        // The host's loader is a static ELF file: give it to a root that has no libc.
        let tree = host().collect(&[("g", "/usr/bin/getent")], &[]).unwrap();
        for (at, item) in &tree {
            if let Item::File { from, .. } = item
                && !at.ends_with("libc.so.6")
            {
                let dest = root.join(at);
                fs::create_dir_all(dest.parent().unwrap()).unwrap();
                fs::copy(from, dest).unwrap();
            }
        }
        let source = Source {
            root: &root,
            lib_dirs: &HOST_LIB_DIRS,
        };
        let err = source.collect(&[("getent", "g")], &[]).unwrap_err();
        let _ = fs::remove_dir_all(&root);
        assert!(
            matches!(&err, TreeError::NoLibrary { soname, .. } if soname == "libc.so.6"),
            "{err}"
        );
        assert!(err.to_string().contains("needs libc.so.6"), "{err}");
    }
}
