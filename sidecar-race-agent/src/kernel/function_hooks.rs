//! Programs on kernel functions, in sets attached all or none: `fexit`/`fentry`
//! (BPF trampolines, named by BTF id) or kprobes and kretprobes (with where this
//! architecture's `pt_regs` keeps their arguments). The Unix socket hooks
//! and the TCP listen hooks are each such a set; a set that fails part-way unloads
//! what it loaded, so the next set (or the fallback) starts clean.

use aya::{
    Btf as AyaBtf, Ebpf,
    programs::{FEntry, FExit, KProbe},
};
use sidecar_race_ebpf::unix::KprobeRegs;

use super::attach::{chain, verifier_gist};

/// Where a kprobe's `pt_regs` keeps a function's first three arguments and its return
/// value: the kernel's calling convention, for the agent's own architecture (which is
/// the kernel's). Unset elsewhere: the kprobes then see nothing.
pub(super) const KPROBE_REGS: KprobeRegs = if cfg!(target_arch = "x86_64") {
    // di, si, dx; ax
    KprobeRegs {
        args: [112, 104, 96],
        ret: 80,
    }
} else if cfg!(target_arch = "aarch64") {
    // regs[0..3]; regs[0]
    KprobeRegs {
        args: [0, 8, 16],
        ret: 0,
    }
} else {
    KprobeRegs::UNSET
};

/// Where the kernel's perf PMU for kprobes is (4.17+; absent without CONFIG_KPROBES).
pub(super) const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe/type";

/// Loads and attaches the `fexit` programs of `fexits` and the `fentry` ones of
/// `fentries`, each `(program, kernel function)`: all, or none (and why).
pub(super) fn attach_trampolines(
    ebpf: &mut Ebpf,
    btf: &Result<AyaBtf, String>,
    fexits: &[(&str, &str)],
    fentries: &[(&str, &str)],
) -> Result<(), String> {
    let btf = btf.as_ref().map_err(Clone::clone)?;
    let result = (|| {
        for &(program, function) in fexits {
            let p: &mut FExit = program_mut(ebpf, program)?;
            p.load(function, btf)
                .map_err(|e| format!("load {program}: {}", chain(&e)))?;
            p.attach()
                .map_err(|e| format!("attach {program}: {}", chain(&e)))?;
        }
        for &(program, function) in fentries {
            let p: &mut FEntry = program_mut(ebpf, program)?;
            p.load(function, btf)
                .map_err(|e| format!("load {program}: {}", chain(&e)))?;
            p.attach()
                .map_err(|e| format!("attach {program}: {}", chain(&e)))?;
        }
        Ok(())
    })();
    if result.is_err() {
        for &(program, _) in fexits {
            if let Ok(p) = program_mut::<FExit>(ebpf, program) {
                let _ = p.unload();
            }
        }
        for &(program, _) in fentries {
            if let Ok(p) = program_mut::<FEntry>(ebpf, program) {
                let _ = p.unload();
            }
        }
    }
    result
}

/// Loads and attaches the kprobes and kretprobes of `probes`, each `(program, kernel
/// function)`, entries before returns: all, or none (and why).
pub(super) fn attach_kprobes(ebpf: &mut Ebpf, probes: &[(&str, &str)]) -> Result<(), String> {
    if KPROBE_REGS == KprobeRegs::UNSET {
        return Err("the agent does not know this architecture's registers".into());
    }
    if !std::path::Path::new(KPROBE_PMU).exists() {
        return Err(format!("this kernel has no kprobes: no {KPROBE_PMU}"));
    }
    let result = (|| {
        for &(program, function) in probes {
            let p: &mut KProbe = program_mut(ebpf, program)?;
            if p.fd().is_err() {
                p.load()
                    .map_err(|e| verifier_gist(&format!("load {program}: {}", chain(&e))))?;
            }
            p.attach(function, 0)
                .map_err(|e| format!("attach {program} to {function}: {}", chain(&e)))?;
        }
        Ok(())
    })();
    if result.is_err() {
        for &(program, _) in probes {
            if let Ok(p) = program_mut::<KProbe>(ebpf, program) {
                let _ = p.unload();
            }
        }
    }
    result
}

/// Program `name` of the object, in the form this kernel loads, typed.
pub(super) fn program_mut<'a, P>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut P, String>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    super::variant::program_mut(ebpf, name)
        .ok_or_else(|| format!("no program {name} in the object"))?
        .try_into()
        .map_err(|e| chain(&e))
}

/// A kernel for the hook choosers' tests: takes the sets `ok` names and refuses the
/// others, recording what was tried.
#[cfg(test)]
pub(super) struct Fake {
    ok: &'static [&'static str],
    pub tried: Vec<&'static str>,
}

#[cfg(test)]
impl Fake {
    pub fn taking(ok: &'static [&'static str]) -> Self {
        Fake {
            ok,
            tried: Vec::new(),
        }
    }

    pub fn try_set(&mut self, set: &'static str) -> Result<(), String> {
        self.tried.push(set);
        if self.ok.contains(&set) {
            Ok(())
        } else {
            Err(format!("{set} refused"))
        }
    }
}
