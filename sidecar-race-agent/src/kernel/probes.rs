//! Loads the embedded eBPF object with this kernel's layout, attaches what can be
//! attached, and gives access to the ring buffer and the exact per-CPU counters.

use std::{collections::BTreeMap, sync::Arc};

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, Map, MapData, PerCpuArray, RingBuf},
};
use sidecar_race_ebpf::abi::counter;

use super::{
    attach::{ProbeError, chain},
    counters::{KernelCounters, KindCounts, LruTables, SuppressedCounts},
    globals::{Globals, ProcessNames},
    layout::{KernelLayout, Tracepoint},
    options::ProbeOptions,
    pins::{
        PinError, Pins,
        adopt::Adopted,
        handover::{Handover, OldRings},
        key::{LayoutKey, abi_digest, object_digest},
        manifest::{self, Coverage, Manifest},
        pin::pin_all,
    },
    recursion::RecursionMisses,
    tcp_hooks::{self, TcpCoverage, TcpHookChoice},
    tracepoints::{self, BtfReady, Degraded, SetStateHook},
    unix_hooks::{self, UnixCoverage, UnixHookChoice},
};
use crate::ingest::events::Kind;

/// The object built by `build.rs` from `sidecar-race-ebpf`.
pub(super) static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sidecar-race.bpf.o"));

pub struct Probes {
    // Keeps programs and links alive; `None` when adopted (their pins do).
    _ebpf: Option<Ebpf>,
    /// Refusals.
    pub ring: Option<RingBuf<MapData>>,
    /// Control records: cgroups and listeners.
    pub control: Option<RingBuf<MapData>>,
    counters: Arc<KernelCounters>,
    suppressed: BpfHashMap<MapData, u64, u64>,
    charge_points: BpfHashMap<MapData, u64, u8>,
    /// Why budgets are charged per cgroup rather than per container, if they are.
    pub per_cgroup_budgets: Option<String>,
    pub attached: Vec<Tracepoint>,
    pub degraded: Vec<Degraded>,
    /// Which hook serves `inet_sock_set_state`.
    pub set_state_hook: SetStateHook,
    /// Which hooks see TCP listeners (and so whether that tracepoint is attached).
    pub tcp: TcpCoverage,
    /// Whose `comm` names the task behind a socket.
    pub process_names: ProcessNames,
    /// What is seen of Unix domain sockets.
    pub unix: UnixCoverage,
    /// Whether the kernel state was loaded, pinned or adopted.
    pub origin: Origin,
    /// What an earlier build's rings held, when this one replaced its pins.
    pub handover: Option<Handover>,
}

/// Where the kernel state came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Loaded by this agent; it goes with it.
    Loaded,
    /// Loaded by this agent and pinned under the key: it outlives the agent.
    Pinned { key: String },
    /// Adopted from an earlier agent of the same build: nothing was loaded.
    Adopted { key: String, pinned_by: String },
}

impl Probes {
    /// Loads and attaches every usable tracepoint. Fails only when a required one
    /// cannot be attached; optional ones end up in `degraded`.
    pub fn load(layout: &KernelLayout, opts: ProbeOptions) -> Result<Self, ProbeError> {
        Self::load_pinned(layout, opts, None)
    }

    /// Adopts what an earlier agent of this build pinned, or loads and pins anew;
    /// loads unpinned (with a warning) when pinning fails. Old builds' pins go once
    /// this load is attached.
    pub fn start_pinned(
        layout: &KernelLayout,
        opts: ProbeOptions,
        pins: &Pins,
        kernel_release: &str,
    ) -> Result<Self, ProbeError> {
        let key = LayoutKey::new(OBJECT, &opts, layout.hooks(), kernel_release);
        let key = key.as_str();
        match pins.manifest(key) {
            // Whatever stops the adoption, the agent loads its own programs: pins it
            // cannot use would make it exit, and its restarts, until someone unpins.
            Ok(Some(m)) => match Adopted::open(&pins.dir(key), &m)
                .map_err(|e| e.to_string())
                .and_then(|adopted| Self::adopt(adopted, &m).map_err(|e| e.to_string()))
            {
                Ok(probes) => return Ok(probes),
                Err(e) => {
                    tracing::warn!("cannot adopt the pins of {key} ({e}): loading anew");
                    pins.remove(key);
                }
            },
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("{e}: loading anew");
                pins.remove(key);
            }
        }
        // An earlier build's rings, opened before its pins go (see `handover`).
        let old = OldRings::open(pins, key);
        let mut probes = Self::load_pinned(layout, opts, Some((pins, key)))?;
        let cut_boot_ns = crate::clock::boot_now_ns();
        for old in pins.remove_others(Some(key)) {
            tracing::info!(key = %old, "unpinned an earlier build's programs and maps");
        }
        for key in &old.unreadable {
            tracing::warn!(
                %key,
                "what an earlier build's agent left unread in its rings is lost: its record \
                 layout is not this build's"
            );
        }
        if !old.is_empty() {
            // A program that was running at the unpinning finishes its record first.
            std::thread::sleep(std::time::Duration::from_millis(20));
            probes.handover = Some(old.drain(cut_boot_ns));
        }
        Ok(probes)
    }

    fn adopt(mut adopted: Adopted, m: &Manifest) -> Result<Self, ProbeError> {
        let recursion = RecursionMisses::of_programs(std::mem::take(&mut adopted.programs));
        let maps = Maps::take(
            |name| {
                adopted
                    .take(name)
                    .ok_or_else(|| ProbeError::Missing(format!("pinned {name} map")))
            },
            recursion,
        )?;
        let c = &m.coverage;
        Ok(Self::with(
            None,
            maps,
            Origin::Adopted {
                key: m.key.clone(),
                pinned_by: m.agent_version.clone(),
            },
            Attached {
                per_cgroup_budgets: c.per_cgroup_budgets.clone(),
                attached: c.attached(),
                degraded: c.degraded(),
                set_state_hook: c.set_state_hook.clone(),
                tcp: c.tcp.clone(),
                process_names: c.process_names.clone(),
                unix: c.unix.clone(),
            },
        ))
    }

    fn load_pinned(
        layout: &KernelLayout,
        opts: ProbeOptions,
        pins: Option<(&Pins, &str)>,
    ) -> Result<Self, ProbeError> {
        opts.check_ring_size()?;
        let globals = Globals::new(layout, &opts);
        let mut ebpf = {
            // `EbpfLoader::new()` parses the kernel's BTF itself (aya's parse of a 5.5 MB
            // vmlinux is some 17 MiB of allocations) and holds it as long as the loader
            // lives: the loader goes as soon as the object is loaded, so that parse is
            // never held beside the next one.
            let mut loader = EbpfLoader::new();
            globals.set(&mut loader);
            opts.size_maps(&mut loader);
            loader.load(OBJECT).map_err(ProbeError::Load)?
        };
        // The hooks on kernel functions name them by BTF id: one more parse (the
        // loader's is private), shared by the BTF tracepoint and the fexit hooks, and
        // made only when one of them will be tried.
        let btf_tracepoints = layout.without_tracefs;
        let socket = readable_socket(layout, &globals);
        let kernel_btf = if (opts.set_state_btf && globals.sock.is_ok())
            || (opts.tcp_hooks != TcpHookChoice::SetState && socket.is_ok())
            || btf_tracepoints
            || (opts.unix_hooks == UnixHookChoice::Auto && globals.unix_fields.is_ok())
        {
            aya::Btf::from_sys_fs().map_err(|e| format!("kernel BTF: {}", chain(&e)))
        } else {
            Err("not needed".to_string())
        };
        let ready = BtfReady {
            sock: globals.sock.clone(),
            cgroup: globals.cgroup.clone(),
            udp: globals.udp_fields.clone(),
        };
        // The listen hooks first: whether the state-transition tracepoint is needed
        // depends on them.
        let tcp = tcp_hooks::attach(&mut ebpf, opts.tcp_hooks, socket, &kernel_btf);
        let tracepoints = tracepoints::attach_all(
            &mut ebpf,
            layout,
            tcp.needs_set_state(),
            opts.set_state_btf,
            opts.udp_hook,
            &ready,
            &kernel_btf,
        )?;
        let unix = if layout.direct_reads() {
            UnixCoverage::Missing {
                why: "the kernel is locked down for confidentiality, and the Unix hooks \
                      read socket addresses with bpf_probe_read_kernel, which it refuses"
                    .into(),
            }
        } else {
            unix_hooks::attach(
                &mut ebpf,
                opts.unix_hooks,
                &globals.unix_fields,
                &layout.unix_syscalls,
                &kernel_btf,
            )
        };
        drop(kernel_btf);
        return_freed_memory();
        let attached = Attached {
            per_cgroup_budgets: globals.per_cgroup_budgets,
            attached: tracepoints.tracepoints,
            degraded: tracepoints.degraded,
            set_state_hook: tracepoints.set_state_hook,
            tcp,
            process_names: globals.process_names,
            unix,
        };
        let origin = match pins {
            None => Origin::Loaded,
            Some((pins, key)) => match pin(&mut ebpf, pins, key, &attached) {
                Ok(()) => Origin::Pinned {
                    key: key.to_string(),
                },
                Err(e) => {
                    tracing::warn!(
                        "degraded: the programs and maps could not be pinned ({e}): a \
                         restart of the agent loses what happens until the next one runs"
                    );
                    pins.remove(key);
                    Origin::Loaded
                }
            },
        };
        let recursion = RecursionMisses::of(&ebpf);
        let maps = Maps::take(|name| take(&mut ebpf, name), recursion)?;
        Ok(Self::with(Some(ebpf), maps, origin, attached))
    }

    fn with(ebpf: Option<Ebpf>, maps: Maps, origin: Origin, a: Attached) -> Self {
        Self {
            _ebpf: ebpf,
            ring: Some(maps.ring),
            control: Some(maps.control),
            counters: Arc::new(maps.counters),
            suppressed: maps.suppressed,
            charge_points: maps.charge_points,
            per_cgroup_budgets: a.per_cgroup_budgets,
            attached: a.attached,
            degraded: a.degraded,
            set_state_hook: a.set_state_hook,
            tcp: a.tcp,
            process_names: a.process_names,
            unix: a.unix,
            origin,
            handover: None,
        }
    }

    /// Exact kernel counts per kind, summed over CPUs.
    pub fn counts(&self) -> Result<BTreeMap<Kind, KindCounts>, ProbeError> {
        self.counters.counts()
    }

    /// The per-CPU counters, to read them elsewhere (the metrics, at scrape time).
    pub fn counters(&self) -> Arc<KernelCounters> {
        self.counters.clone()
    }

    /// The per-cgroup suppressed counts as they are now.
    pub fn suppressed(&self) -> Result<SuppressedCounts, ProbeError> {
        let map_err = |cause| ProbeError::Map {
            name: "SUPPRESSED",
            cause,
        };
        let by_cgroup = self
            .suppressed
            .iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_err)?;
        let unkeyed = self.counters.sum(counter::SUPPRESSED_UNKEYED)?;
        Ok(SuppressedCounts { by_cgroup, unkeyed })
    }

    /// Deletes a removed cgroup's entry, once its final value was read.
    pub fn forget_suppressed(&mut self, cgroup_id: u64) {
        let _ = self.suppressed.remove(&cgroup_id);
    }

    /// Marks a container or pod cgroup for the kernel to charge budgets to.
    pub fn mark_charge_point(&mut self, cgroup_id: u64) -> Result<(), ProbeError> {
        self.charge_points
            .insert(cgroup_id, 1, 0)
            .map_err(|cause| ProbeError::Map {
                name: "CHARGE_POINTS",
                cause,
            })
    }

    /// The cgroups marked in the kernel now (an adopted map holds the old agent's).
    pub fn charge_point_ids(&self) -> Vec<u64> {
        self.charge_points.keys().flatten().collect()
    }

    pub fn unmark_charge_point(&mut self, cgroup_id: u64) {
        let _ = self.charge_points.remove(&cgroup_id);
    }
}

/// The maps the agent reads and writes, taken from the loaded object.
struct Maps {
    ring: RingBuf<MapData>,
    control: RingBuf<MapData>,
    counters: KernelCounters,
    suppressed: BpfHashMap<MapData, u64, u64>,
    charge_points: BpfHashMap<MapData, u64, u8>,
}

impl Maps {
    /// The maps `take` gives by name (from a load, or from pins), typed.
    fn take(
        mut take: impl FnMut(&'static str) -> Result<Map, ProbeError>,
        recursion: Option<RecursionMisses>,
    ) -> Result<Self, ProbeError> {
        let ring = RingBuf::try_from(take("EVENTS")?).map_err(|cause| ProbeError::Map {
            name: "EVENTS",
            cause,
        })?;
        let control = RingBuf::try_from(take("CONTROL")?).map_err(|cause| ProbeError::Map {
            name: "CONTROL",
            cause,
        })?;
        let counters =
            PerCpuArray::try_from(take("COUNTERS")?).map_err(|cause| ProbeError::Map {
                name: "COUNTERS",
                cause,
            })?;
        let suppressed = hash_map(take("SUPPRESSED")?, "SUPPRESSED")?;
        let charge_points = hash_map(take("CHARGE_POINTS")?, "CHARGE_POINTS")?;
        let tables = LruTables {
            budget: hash_map(take("BUDGET")?, "BUDGET")?,
            control_budget: hash_map(take("CONTROL_BUDGET")?, "CONTROL_BUDGET")?,
            local_refusals: hash_map(take("LOCAL_REFUSALS")?, "LOCAL_REFUSALS")?,
            unix_kprobe_calls: hash_map(take("UNIX_KPROBE_CALLS")?, "UNIX_KPROBE_CALLS")?,
        };
        Ok(Maps {
            ring,
            control,
            counters: KernelCounters::new(counters, tables, recursion),
            suppressed,
            charge_points,
        })
    }
}

/// What a load attached, and how: found by loading, or read from the pins' manifest.
struct Attached {
    per_cgroup_budgets: Option<String>,
    attached: Vec<Tracepoint>,
    degraded: Vec<Degraded>,
    set_state_hook: SetStateHook,
    tcp: TcpCoverage,
    process_names: ProcessNames,
    unix: UnixCoverage,
}

/// Pins `ebpf`'s maps and links for `key`, with the manifest that makes them adoptable.
fn pin(ebpf: &mut Ebpf, pins: &Pins, key: &str, a: &Attached) -> Result<(), PinError> {
    let staging = pins.staging(key)?;
    let (links, maps) = pin_all(ebpf, &staging, &a.attached)?;
    let m = Manifest {
        version: manifest::VERSION,
        key: key.to_string(),
        object: object_digest(OBJECT),
        abi: abi_digest(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        links,
        maps,
        coverage: Coverage::of(
            &a.attached,
            &a.degraded,
            &a.set_state_hook,
            &a.tcp,
            &a.unix,
            &a.process_names,
            &a.per_cgroup_budgets,
        ),
    };
    pins.commit(key, &m)
}

/// Whether the listen hooks can serve: they read a socket's state and local end, and a
/// refusal's owner is then read from its socket's cgroup.
fn readable_socket(layout: &KernelLayout, globals: &Globals) -> Result<(), String> {
    if layout.direct_reads() {
        return Err(
            "the kernel is locked down for confidentiality, and a refusal's owner \
                    would be read from its socket's cgroup, which that refuses"
                .into(),
        );
    }
    let offsets = |what: &str, r: &Result<(), String>| {
        r.clone()
            .map_err(|why| format!("no {what} offsets from the kernel's BTF: {why}"))
    };
    offsets("socket", &globals.sock)?;
    offsets("cgroup", &globals.cgroup)
}

fn take(ebpf: &mut Ebpf, name: &str) -> Result<Map, ProbeError> {
    ebpf.take_map(name)
        .ok_or_else(|| ProbeError::Missing(format!("{name} map")))
}

/// A hash or LRU hash map, typed.
fn hash_map<K: aya::Pod, V: aya::Pod>(
    map: Map,
    name: &'static str,
) -> Result<BpfHashMap<MapData, K, V>, ProbeError> {
    BpfHashMap::try_from(map).map_err(|cause| ProbeError::Map { name, cause })
}

/// Gives the pages of freed allocations back to the kernel. The BTF parses above are
/// freed, but glibc keeps free memory below live allocations resident (it only trims
/// the top of its heap): without this the agent kept some 17 MiB of them for its whole
/// life.
fn return_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions; it only releases free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}
