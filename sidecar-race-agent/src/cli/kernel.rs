//! The flags of the kernel side and the pod source, shared by `trace` and `run`.

use std::{path::PathBuf, time::Duration};

use clap::Args;

use super::values::{clean_names, parse_poll_seconds};
use crate::{
    agent::AgentOptions,
    inventory::sources::{PodSourceSpec, SourceOptions},
    kernel::{
        options::ProbeOptions, tcp_hooks::TcpHookChoice, udp_hook::UdpHookChoice,
        unix_hooks::UnixHookChoice,
    },
};

#[derive(Debug, Args)]
pub struct KernelArgs {
    /// tracefs mount point (default: found in /proc/self/mountinfo, mounted at
    /// /sys/kernel/tracing when missing).
    #[arg(long, env = "SIDECAR_RACE_TRACEFS")]
    pub tracefs: Option<PathBuf>,
    /// cgroup v2 mount point (default: found in /proc/self/mountinfo).
    #[arg(long, env = "SIDECAR_RACE_CGROUP_ROOT")]
    pub cgroup_root: Option<PathBuf>,
    /// Size of the kernel→agent ring buffer in bytes: a power of two, a multiple of
    /// the page size.
    #[arg(long, env = "SIDECAR_RACE_RING_BUFFER_BYTES", default_value_t = 1 << 20)]
    pub ring_buffer_bytes: u32,
    /// Decoded events buffered between the reader and the pipeline; beyond this they
    /// are dropped and counted.
    #[arg(long, env = "SIDECAR_RACE_CHANNEL_CAPACITY", default_value_t = 65_536)]
    pub channel_capacity: usize,
    /// Refusal records one container (cgroup) may send at once; beyond its budget the
    /// kernel counts its refusals instead of sending them. 0: no budget.
    #[arg(long, env = "SIDECAR_RACE_REFUSAL_BURST", default_value_t = sidecar_race_ebpf::layout::REFUSAL_BURST)]
    pub refusal_burst: u32,
    /// Refusal records per second one container may send once its burst is spent.
    #[arg(long, env = "SIDECAR_RACE_REFUSAL_REFILL_PER_SECOND", default_value_t = sidecar_race_ebpf::layout::REFUSAL_REFILL_PER_SECOND, value_parser = clap::value_parser!(u32).range(1..))]
    pub refusal_refill_per_second: u32,
    /// Seconds a removed cgroup or deleted pod stays resolvable (late and drain-time
    /// events still attribute).
    #[arg(long, env = "SIDECAR_RACE_GRACE_SECONDS", default_value_t = 600)]
    pub grace_seconds: u64,
    /// Hook TCP state changes and dropped skbs (UDP refusals) with BTF tracepoints where
    /// the kernel has BTF (cheaper per event); `--tp-btf=false` keeps the tracefs ones.
    #[arg(
        long,
        env = "SIDECAR_RACE_TP_BTF",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub tp_btf: bool,
    /// TCP listener hooks: `auto` takes fexit/fentry on listen start and stop where the
    /// kernel allows them, else kprobes on the same functions, and then no program runs
    /// on a TCP connection that succeeds; else the `inet_sock_set_state` tracepoint,
    /// which runs on every TCP state change of the node (one `degraded:` line says so,
    /// with its cost). `fentry`, `kprobes` and `set-state` take that one only (an
    /// explicit hook the kernel refuses falls back to the tracepoint, said so).
    #[arg(long, env = "SIDECAR_RACE_TCP_HOOKS", value_enum, default_value_t = TcpHookChoice::Auto)]
    pub tcp_hooks: TcpHookChoice,
    /// Unix domain socket hooks: `auto` takes fexit/fentry on the AF_UNIX operations
    /// where the kernel allows them, else kprobes on the same functions, else none
    /// (one `degraded:` line says so); `kprobes` takes the kprobes even where fexit
    /// works; `syscalls` takes the connect/sendto/bind/listen syscall tracepoints
    /// (refusals and listeners up, not their closes), which put every syscall of every
    /// process on the node on the kernel's slow path, so `auto` never does; `off`
    /// attaches no Unix socket hook.
    #[arg(long, env = "SIDECAR_RACE_UNIX_HOOKS", value_enum, default_value_t = UnixHookChoice::Auto)]
    pub unix_hooks: UnixHookChoice,
    /// UDP refusal hook: `auto` takes `icmp:icmp_send` where the kernel has it,
    /// which runs only when the kernel answers a datagram with a port unreachable, and
    /// sees IPv4 only (one `degraded:` line says IPv6 is not seen), else `skb:kfree_skb`
    /// (5.17+), which sees both families and runs on every dropped skb of the node;
    /// `icmp-send` and `kfree-skb` take that one only; `off` attaches neither.
    #[arg(long, env = "SIDECAR_RACE_UDP_HOOK", value_enum, default_value_t = UdpHookChoice::Auto)]
    pub udp_hook: UdpHookChoice,
    /// Entries of every kernel LRU table (connects in flight, listeners, local
    /// refusals, budgets) instead of their built-in sizes, with the connect slots in
    /// front of the connects' table down to one; for tests that fill them.
    #[arg(long, hide = true, value_parser = clap::value_parser!(u32).range(16..))]
    pub kernel_lru_entries: Option<u32>,
    #[command(flatten)]
    pub pods: PodSourceArgs,
}

#[derive(Debug, Args)]
pub struct PodSourceArgs {
    /// Pod metadata source: api, kubelet, file:PATH or none (default: api in a
    /// cluster, none elsewhere).
    #[arg(long, env = "SIDECAR_RACE_PODS_FROM")]
    pub pods_from: Option<PodSourceSpec>,
    /// This node's name (downward API `spec.nodeName`); the api source watches its pods.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// This node's IP (downward API `status.hostIP`); the kubelet source polls it.
    #[arg(long, env = "NODE_IP")]
    pub node_ip: Option<String>,
    #[arg(long, env = "SIDECAR_RACE_KUBELET_PORT", default_value_t = 10250)]
    pub kubelet_port: u16,
    /// CA bundle for the kubelet's serving certificate (default: the service account's CA).
    #[arg(long, env = "SIDECAR_RACE_KUBELET_CA")]
    pub kubelet_ca: Option<PathBuf>,
    /// Skip verifying the kubelet's certificate (only when asked: self-signed kubelets).
    #[arg(long, env = "SIDECAR_RACE_KUBELET_INSECURE")]
    pub kubelet_insecure: bool,
    /// Bearer token for the kubelet (default: the service-account token), re-read as it rotates.
    #[arg(long, env = "SIDECAR_RACE_KUBELET_TOKEN_FILE")]
    pub kubelet_token_file: Option<PathBuf>,
    /// Seconds between polls of the kubelet, and between checks of a pods file.
    #[arg(long, env = "SIDECAR_RACE_PODS_POLL_SECONDS", default_value_t = 5.0, value_parser = parse_poll_seconds)]
    pub pods_poll_seconds: f64,
    /// Container names that are classic sidecars in every pod (site-wide, besides the
    /// built-in list and the `sidecar-race.io/sidecars` annotation), comma-separated.
    #[arg(long, env = "SIDECAR_RACE_SIDECAR_NAMES", value_delimiter = ',')]
    pub sidecar_names: Vec<String>,
}

impl PodSourceArgs {
    pub fn spec(&self) -> PodSourceSpec {
        self.pods_from
            .clone()
            .unwrap_or_else(PodSourceSpec::default_for_environment)
    }

    pub fn options(&self) -> SourceOptions {
        SourceOptions {
            node_name: self.node_name.clone(),
            node_ip: self.node_ip.clone(),
            kubelet_port: self.kubelet_port,
            kubelet_ca: self.kubelet_ca.clone(),
            kubelet_insecure: self.kubelet_insecure,
            token_file: self.kubelet_token_file.clone(),
            poll_interval: Duration::from_secs_f64(self.pods_poll_seconds.max(0.1)),
            refresh: Default::default(),
        }
    }
}

impl KernelArgs {
    pub fn options(&self) -> AgentOptions {
        AgentOptions {
            tracefs: self.tracefs.clone(),
            cgroup_root: self.cgroup_root.clone(),
            probes: ProbeOptions {
                ring_buffer_bytes: self.ring_buffer_bytes,
                refusal_budget: sidecar_race_ebpf::layout::RefusalBudget::new(
                    self.refusal_burst,
                    self.refusal_refill_per_second,
                ),
                set_state_btf: self.tp_btf,
                tcp_hooks: self.tcp_hooks,
                unix_hooks: self.unix_hooks,
                udp_hook: self.udp_hook,
                lru_entries: self.kernel_lru_entries,
                ..ProbeOptions::default()
            },
            channel_capacity: self.channel_capacity.max(1),
            pins: None,
            grace: Duration::from_secs(self.grace_seconds),
            pods_from: self.pods.spec(),
            source: self.pods.options(),
            sidecar_names: clean_names(&self.pods.sidecar_names),
        }
    }
}
