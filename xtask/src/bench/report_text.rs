//! The prose of BENCHMARKS.md: the machine line, the Method section with this run's
//! plan, and the notes of what the profiles showed (history, checked against the
//! committed report).

use std::fmt::Write as _;

use super::{cpu, plan::Plan};

pub fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim())
        })
        .unwrap_or("unknown CPU");
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")?
                .split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    format!(
        "{cores} × {model}, {mem_gib:.0} GiB, kernel {}",
        read("/proc/sys/kernel/osrelease").trim()
    )
}

/// The "Method" section: how each figure was measured, with this run's plan.
pub fn method(plan: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Method\n\n\
         - **Unrelated syscalls** (the first rows): a `getppid` loop (the raw syscall, which \
         no library caches) pinned to CPU {cpu}, timed by its thread's own CPU time per \
         call. {scr} rounds of {calls} calls; each round runs the loop bare twice (the second \
         is the control: bare / bare is the noise a ratio stands in) and beside a fresh, \
         idle agent (`run --pods-from none --events=false`, {build} build) with \
         `--unix-hooks=auto` (as shipped), `syscalls` and `off`, rotating which goes first. \
         Each run is cut into {chunks} equal chunks and timed by its cheapest: noise (other \
         work on the machine, the hypervisor) only adds CPU time, so it can make a chunk \
         dearer but never cheaper, and cannot flatter the agent; the whole runs' ratios \
         are a secondary row. \
         The ratio is bare CPU per call / CPU per call beside the agent: 1.000 is no tax. \
         Attaching any syscall tracepoint puts every syscall of every process on the \
         kernel's slow path, outside any program, so only these rows see that cost.\n\
         - Hot path (successful connects), three loops run by the bench itself: **TCP connect \
         + FIN close** (the server closes first, the client reads the end of stream and \
         closes, so TIME_WAIT stays on the server side and client ports never run out), \
         **TCP connect + RST close** (SO_LINGER 0), and **UDS connect + close** (a Unix \
         stream socket). One client thread and one accepting thread, both pinned to CPU \
         {cpu} (sched_setaffinity); the agent is not pinned.\n\
         - Each loop: {sr} rounds; each round runs the loop bare, bare again (the control), \
         with the agent (`run --pods-from none --events=false`: as shipped, \
         `--unix-hooks=auto`, for the TCP loops; `--unix-hooks=syscalls` for the UDS loop, \
         because `auto` attaches no Unix hook on a kernel without `fexit` and kprobes, as \
         this one, and the row would measure nothing) and, for the RST loop, with the \
         bpftrace peer, rotating which goes first; each run makes as many connects as a \
         bare run makes in about {secs} s (calibrated once per loop).\n\
         - **The headline is what users pay, measured directly**: the loop threads' CPU per \
         connection, bare / with the agent, beside the same ratio between the two bare runs, \
         in each run's cheapest of {chunks} equal chunks (the client reads both threads' \
         CPU clocks at each chunk's end), as for the syscalls; whole runs are a secondary row. \
         CPU is each thread's own runtime in ns (loopback softirqs run in them and this \
         kernel does not split IRQ time out), not a throughput, so it counts everything the \
         agent makes the loop pay: its programs, the hooks' dispatch, and any slow path its \
         hooks put the syscalls on.\n\
         - **The bpf_stats bound explains it** (tighter, and blind to what runs outside the \
         programs): bare CPU per connection / (bare CPU + the agent's programs' run time per \
         connection). The programs' run time \
         comes from `kernel.bpf_stats_enabled` (`run_time_ns`, `run_cnt` of each program the \
         agent holds) over a quarter-length run right after the agent's throughput run; the \
         statistics themselves cost two clock reads per run, so in that same run a program \
         that returns at once (`r0 = 0; exit`, loaded by the bench with bpf(2)) sits on \
         each hook the agent uses (the BTF tracepoints, the tracefs tracepoints and the \
         `connect` syscall tracepoints of the Unix socket fallback), and its run time per \
         run, times the agent's run count, is taken out. That cost is printed beside the \
         bound; it makes the bound independent of how slow the machine's clock is. No \
         null program loads on an `fexit` hook here (this host's kernel refuses every `fexit` \
         program with EPERM, the agent's too), so a loop where none runs (UDS with `fexit` hooks) takes the previous \
         loop's figure. The bound leaves out the tracepoint's dispatch before the program \
         runs and the syscall slow path (the direct rows count both), and counts other \
         processes' connects on the machine during the run too (an upper bound on the \
         programs' share).\n\
         - **Datagrams: the UDP refusals' hooks** (issue #49): the agent as shipped \
         (`--udp-hook=auto`) takes `icmp:icmp_send` where the kernel has it (this one does), \
         which runs only when the kernel sends an ICMP error, else `skb:kfree_skb`, which \
         fires for every skb the node drops (`--udp-hook=kfree-skb` forces it, for IPv6's \
         refusals): measured by the hot path's method exactly \
         (the same rounds, rotation, cheapest chunks, bare / bare control and bpf_stats \
         run, with a null program on `kfree_skb`; the agent as shipped), with two loops of \
         one thread each, pinned to CPU {cpu} (loopback delivers or drops a packet in the \
         softirq its sender's own send runs, in the sender's task, so that thread's CPU \
         holds the packet's whole path). **UDP send + receive (delivered)**: a connected \
         UDP socket sends 32-byte datagrams to a bound socket on 127.0.0.1 that reads each \
         before the next is sent; a delivered datagram is consumed, not freed, so no \
         program should run (its runs per datagram say whether one did). **Drop storm**: an \
         `AF_PACKET` socket sends 60-byte frames of EtherType 0x88b5 (local experimental, \
         which no protocol handles) on loopback, each dropped with the reason \
         `UNHANDLED_PROTO`: on `icmp_send` none of the agent's programs runs (its runs per \
         drop say so); on `kfree_skb` its program would run once per drop and leave at its \
         first compare (the reason is not `NO_SOCKET`), on the BTF tracepoint where the \
         kernel takes it, else on the tracefs one, which fills its record first (the \
         hook's dispatch is outside bpf_stats, inside the direct row). It is \
         about the cheapest drop the kernel makes, so its ratio is the most a drop pays in \
         proportion; a `NO_SOCKET` drop of another protocol (a TCP segment to a closed \
         port) reads the skb's device and IP header before it leaves, a few loads more, \
         and is not measured here (the agent's TCP hooks run on it too). Each drop-storm \
         round also runs the loop with a null program alone on the tracefs `kfree_skb` and \
         alone on the BTF tracepoint `kfree_skb`: each hook's own cost without the agent's \
         work, what `--udp-hook=kfree-skb` costs at least. Before and after each bare \
         run the bench lists the programs other processes hold on `kfree_skb` (`bpftool \
         perf show`: tests running beside the bench start agents of their own); a round \
         where one was there charged its bare runs the hook's cost too, which flatters \
         the agent, and a row counts those rounds.\n\
         - Secondary rows, same rounds: throughput (wall time) with the agent / bare, and CPU \
         over whole runs: noisy on a shared 2-core machine, shown with their spread.\n\
         - Refused connects come from a pod, as users' do: one simulated pod (cgroups in \
         the kubelet's layout, listed in the agent's pods file) with an `app` container and \
         a classic sidecar `proxy` that declares a TCP port and mounts an emptyDir the app \
         mounts too. The refusing client runs in the app's cgroup, pinned to CPU {cpu}: \
         TCP, `sr-app` dialing the proxy's port, which nobody listens on; UDS, `sr-uds` \
         dialing a path on the shared volume that does not exist (ENOENT), then a stale \
         socket file there (ECONNREFUSED), half each. So each refusal takes the agent's \
         whole path: attribution to the pod and container, the reorder window, the \
         detector and the pod's `sidecar_race` incident. {n} connects per run, {rounds} \
         rounds, a fresh agent each (`--refusal-burst 0`: every record delivered; the \
         storm row has the budget); the TCP rows also run bare, alternating which goes \
         first. Agent CPU is the sum of its threads' runtimes from \
         `/proc/<pid>/task/*/schedstat` (ns), from the agent's first quiet 100 ms after \
         start-up to 300 ms after the last refusal (its 200 ms reorder window and ten of \
         the reader's 10 ms pauses), so the last fact is in its incident; the agent's \
         idle work over that window is charged too, not subtracted. After the window \
         the bench reads `/api/v1/incidents` (an answer costs the agent ~1 ms): a round \
         is exact when the pod's `sidecar_race` incidents of `app` hold every refusal of \
         the run (the port's naming `proxy`; a socket nobody ever bound names no server). On this VM the CPU time of the same work moves with the host's \
         load, 2–3× in busy periods (seen in alternated runs of two builds): the rounds \
         spread over minutes and the median is the figure. Every figure is min / \
         **median** / max over rounds.\n\
         - Storm: `sr-latency --storm` runs startup races (as the latency row) while \
         `sr-flood` in another pod refuses as fast as it can (two threads: thousands of \
         closed ports, and one port in a tight loop), with the default refusal budget.\n\
         - This is a shared 2-core machine with other engineers' builds and tests running: \
         absolute times are noisy, so only same-round ratios are compared.\n",
        cpu = cpu::loop_cpu(),
        sr = plan.success_rounds,
        secs = plan.round.as_secs_f64(),
        n = plan.connects,
        build = if plan.smoke { "debug" } else { "release" },
        rounds = plan.rounds,
        scr = plan.syscall_rounds,
        calls = plan.syscall_calls,
        chunks = cpu::CHUNKS
    );
    s
}

/// What each TCP hook path runs per successful connect, measured by the kernel tier
/// (its guests count the agent's programs' runs with bpf_stats; a bench run cannot
/// boot them), kept beside this host's bench rows, which measure the fallback.
pub const HOOK_PATHS: &str = "## Program runs per successful connect, by hook path (issue #52)\n\
\n\
The agent needs three TCP facts: a connect was refused, a socket started listening, a \
listener closed. Where the kernel lets programs on kernel functions, listeners are seen \
at `inet_csk_listen_start` and `inet_csk_listen_stop` (`fexit`/`fentry`, else kprobes: \
`--tcp-hooks`), a refusal's owner is read from its socket, and `inet_sock_set_state` is \
not attached: nothing of the agent runs on a connection that succeeds. This host's kernel \
refuses `fexit` and has no kprobes, so the agent here runs the fallback, \
`inet_sock_set_state`, which the rows above measure (its cost is unchanged: the same \
programs run on a successful connect as before the listen hooks). The counts below are \
the kernel tier's (section 8 of `tests/src/vm_init.sh`, asserted by \
`tests/tests/kernel_matrix.rs`): in each Debian cloud kernel under QEMU, one agent per \
hook path, 20 connects closed with a FIN and 20 with a reset (SO_LINGER 0) to a listener \
in a pod's sidecar container, one refused connect, then the listener's close, each step \
bracketed by the sum of the agent's programs' `run_cnt` (bpf_stats, one count per program \
id). Counts are exact under TCG; times are not, so no direct CPU ratio is taken in the \
guests: TCG translates each guest instruction, a tracepoint's dispatch and a program's \
body alike, so a loop's CPU there measures the emulator more than the hook, and the \
guests share two host cores with each other. Measured on 2026-12-06.\n\
\n\
| hook path | kernels | runs per connect closed with a FIN | per connect closed with a reset | per refusal | per listen | per listener close |\n\
|---|---|---|---|---|---|---|\n\
| `fentry` (`fexit` on listen start; `auto` on x86_64) | 5.10, 6.1, 6.12 | **0.00** | 0.95 (5.10), 0.85 (6.1), 1.95 (6.12) | 1 (5.10, 6.1), 2 (6.12) | 1 | 1 |\n\
| kprobes (`--tcp-hooks=kprobes`; `auto` on arm64 before 6.5) | 5.10, 6.1, 6.12 | **0.00** | as `fentry` | as `fentry` | 2 (the entry and the return) | 1 |\n\
| `inet_sock_set_state` (the fallback: this host, lockdown for confidentiality, `--tcp-hooks=set-state`) | 5.10, 6.1, 6.12 | 10.00 | 9.00 (5.10, 6.1), 9.50 (6.12) | 3 (5.10, 6.1), 4 (6.12) | 1 | 1 |\n\
| `inet_sock_set_state`, this host (the bench's loops, `--only hot-path` of 2026-12-06: see Method) | 6.18 | 10.00 | 9.39 | | | |\n\
\n\
A reset runs the reset programs whatever it ends: `tcp_receive_reset` on the peer that \
receives it, and from 6.10 `tcp_send_reset` on the one that sends it (attached there for \
`local_dst`, the refused destination behind a NAT REDIRECT, which only the sending side \
sees); each returns at once unless its socket is connecting. A reset that reaches a socket \
already in TIME_WAIT (the server closed first) runs neither, hence fewer than one per \
reset. A refusal is one reset sent and one received.\n\
";

/// What the profiles showed: how the costs were found and cut, with the figures of
/// those one-off runs dated and labelled as history (the tables hold this run's).
pub const NOTES: &str = "## What the profiles showed (history)\n\
\n\
How the costs above were found and cut. The figures in this section are history, not \
this run's: one-off profiling runs measured on 2026-11-30 on a 2 × Intel Xeon, 24 \
GiB VM with kernel 6.18.44, kept to explain the design. This run's figures are the \
tables above.\n\
\n\
- **Refusal path** (`perf record -g` on the release agent during 50,000 refusals to \
a closed port, before the rework): most of the agent's CPU was waking up and \
switching threads once per record — `finish_task_switch` 35 %, futex and epoll \
waits, `try_to_wake_up` — while decoding, attribution and the pipeline together were \
a few percent. The reader now pauses after a drain that found records (1 ms then, 4 ms since 2026-12-01, 10 ms since 2026-12-02; the \
kernel's ring-buffer wakeups are adaptive, so none fire while records queue), the \
daemon takes up to 512 events per wakeup under one lock, and a cgroup id's parsed \
path is cached. Measured on 2026-11-30: 4.0–8.2 µs per refusal before, 0.6–0.8 µs \
after. Counts stay exact: they are the kernel's per-CPU counters, independent of the \
ring buffer. Profiled again on 2026-12-01 (20,000 refusals, release agent, a loaded \
machine): a third of the cost was one more thread switch per batch, because the daemon \
loop ran on the thread blocking on `main` and every hand-over woke it; it runs as a \
task on the runtime's workers now, woken on the reader's own thread, and the pause \
went from 1 to 4 ms: TCP 2056 → 816 ns, UDS 1907 → 867 ns per refusal (medians of 5 \
alternated rounds), detection latency unchanged (p99 215 ms over 80 races either way). \
Profiled again on 2026-12-02 (`perf record --call-graph dwarf`, 300,000 Unix \
refusals): what was left was per record — a heap allocation each for the process \
name and the socket path, freed on another thread, moves of the decoded record, and \
one send on the reader's channel each (its queue slot, semaphore and wake-up, a sixth \
of the total) — plus the wakeups, whose cost on this VM is mostly the timer \
reprogramming in `epoll_wait`. The name is now inline (16 bytes), a path is shared \
with the last eight decoded, the reader hands over one batch per drain, and it pauses \
10 ms: alternated runs of the two builds (8 × 50,000 refusals each, quiet rounds) gave \
UDS 391–501 → 242–282 ns and TCP 459–545 → 273–303 ns per refusal; rounds in the \
host's busy periods reached 1.1–1.8 µs with either build. Until 2026-12-02 the \
refusal rows measured host processes' refusals, which the pipeline counts without a \
pod; a refusal from a pod's app container on its classic sidecar's port, counted into \
an open incident, cost more. Measured by hand that day (one simulated pod, 50,000 \
refusals): 946–954 ns, a third of it the reorder buffer's heap, which moved every \
fact (some 200 bytes) once per level on the way out; facts that arrive in order now \
wait in a queue and only stragglers go to the heap: 710–810 ns. The rows now dial \
from the pod (see Method), and the first such bench run gave TCP 1,408–1,447 ns and \
UDS 1,524–1,707 ns per refusal (medians of two 7-round runs): the target was missed \
on the path users' refusals take. `perf record --call-graph dwarf` of the agent \
during 300,000 Unix and 150,000 TCP refusals put a fifth of its time in SipHash (the \
incident, pod and cgroup maps), a fifth in `malloc`/`free` (the pod uid and container \
id copied per record, a socket path normalised and its volume path joined per record, \
the incident key cloned), a tenth in the released facts' buffer growing anew every \
tick (fresh pages: `clear_page_erms`), and the catalog's wait-tool list scanned per \
refusal. Now: the inventory keeps each cgroup's pod uid and container id as shared \
`Arc<str>` that facts and incident keys clone by count; the per-refusal maps use a \
seeded foldhash; a path already normal is borrowed, not rebuilt; the socket a client's \
last Unix refusal resolved to is kept with its incident key while the pod metadata's \
generation is unchanged; the release buffer is kept from tick to tick (up to 16,384 \
facts); a process name is looked up in the catalog only when new to its incident. \
By hand, same harness, 3 alternated runs each: TCP 1,270–1,541 → 705–1,015 ns and UDS \
1,425–1,741 → 772–943 ns per refusal. Then: the reader reserves each batch at the size \
of the ring's last one (it grew by doubling, a twentieth of the agent's time in \
`realloc` and fresh pages), a loopback refusal counts into its incident before the pod \
is looked up, and the settled-incident check per refusal uses foldhash too. What is \
left is mostly per unit of time, not per refusal: about 100 ns of each is the agent's \
idle work (some 3 ms a second with an open incident: ticks, `advance`), charged over \
the run, and the reader's wake-ups, one per 10 ms drain; a loop refused more slowly \
(TCP here, 0.43 s per 20,000 against UDS's 0.26 s) pays more of both per refusal.\n\
- **Peak memory** (node scale, 110 pods, sampled every 5 ms from spawn on 2026-12-01): \
the peak was the start-up, not the pods. aya's `EbpfLoader::new()` parses the kernel's \
BTF (some 17 MiB of allocations for a 5.5 MB vmlinux), and the BTF tracepoint and the \
fexit hooks each parsed it again while the loader, kept alive for the LRU-size option, \
still held its own: 56 MiB peak, and glibc kept 38 MiB resident after. The loader now \
goes right after loading, one more parse serves both hooks, the agent's own offsets are \
read and freed first, and `malloc_trim` gives back what glibc kept of the freed parses: \
36 MiB peak, 19 MiB after (60 s runs).\n\
- **Successful connects**: the program on `inet_sock_set_state` runs on every TCP \
state change (six per connect and close: three on each end). It filters on the old \
and new state first, with direct context loads (a `match` over the legal offsets, \
each arm one load with the offset as an immediate; the verifier knows the frozen \
config and keeps one arm); only SYN_SENT and LISTEN transitions do more. Measured on \
2026-11-30 per program run with bpf_stats (debug agent, same eBPF object, 10,000 \
connects per run, alternated, medians of 4–5): a program that returns at once cost \
30 ns per run on that VM, almost all of it the statistics' own two clock reads; the \
state filter adds 1 ns; the whole program 81–94 ns, so the cost is in the two runs \
per connect that insert and delete the SYN_SENT entry. Changes and their effect: (1) \
`kernel.bpf_stats_enabled` had been left on on that machine, and with it every \
program run reads the paravirtual clock twice (`pvclock_clocksource_read` was 2 % of \
the loop's CPU in `perf`): the throughput runs now turn it off and only a separate \
quarter-length run turns it on; earlier throughput figures paid for it. (2) The \
SYN_SENT entry reads the destination address, port and family by direct context \
loads instead of three `bpf_probe_read_kernel` calls: 93.7 → 81.8 ns per run \
(medians of 5 alternated runs), about 70 ns per connect. (3) Map type of the \
SYN_SENT table, tried and not kept: LRU (kept) 89, plain hash 90, per-CPU LRU lists \
102 ns per run, no difference beyond noise. **`tp_btf`** (`--tp-btf`, on by default \
where `/sys/kernel/btf/vmlinux` exists; the tracefs tracepoint stays the fallback): \
`perf` (statistics off, loop pinned to one CPU) put the tracefs tracepoint's own \
dispatch — filling the trace record (`perf_trace_inet_sock_set_state`, \
`perf_trace_buf_alloc`) and `trace_call_bpf` — at about 1.9 % of the loop CPU's \
samples, as much as the program itself. The BTF tracepoint gets the socket and both \
states as arguments and fills no record. Rust eBPF has no CO-RE, so the agent reads \
the socket field offsets from the kernel's BTF itself (aya 0.14 does not expose \
member offsets), and the program reads only what a SYN_SENT or LISTEN transition \
needs, with `bpf_probe_read_kernel`: so the program alone is a little dearer \
(bpf_stats, 4 alternated runs: tracefs 94, tp_btf 102 ns per run, medians) while the \
dispatch it saves is not in bpf_stats. A root test runs both hooks side by side and \
compares every event field; the kernel matrix runs on tp_btf on 5.10, 6.1 and 6.12. \
An earlier note said the Debian 6.1 guest ran the 16-bit byte swap (`be16`) of a \
port as a no-op; that did not hold up: dumped in that guest (6.1.0-57), the loaded \
program has `r9 = be16 r9` (xlated) and `ror $0x8,%r15w; movzwl` (JIT), and the \
refused destination and the listener source ports come out right, as on 5.10 and \
6.12. The 32-bit swap that replaced it (0 on a big-endian target) is gone: ports are \
swapped by a helper that follows the target's byte order. Measured on 2026-11-30 once the machine was quiet \
(no other agent attached, `perf` on the pinned loop's CPU, 30,000 connects, \
alternated 3×): the whole tracepoint — dispatch and program — took 3.53 / 3.95 / \
4.54 % of the loop's samples with tracefs and 3.00 / 3.11 / 3.26 % with tp_btf (min \
/ median / max), about a fifth of the hook's cost. The loop with a Rust server cost \
15–25 µs of CPU per connect on that VM; the bpf_stats figure in the table (which \
counts the statistics' own clock reads, ~30 ns per run, but not the dispatch) is the \
noise-robust estimate of the programs' share.\n\
\n\
- **Hot path at ≤ 2 % (issue #23)**, profiled per program with bpf_stats on 2026-12-01 \
(debug agent, same eBPF object, 20,000 connects closed with RST, run counts and ns per \
run statistics included; the machine was shared, so single runs move by ±15 %). Before: \
`inet_sock_set_state` (tp_btf) 6.9 runs per connection at 106–109 ns, \
`tcp_receive_reset` 1.0 at 136 ns, `tcp_send_reset` 1.0 at 45 ns: 0.91 µs per \
connection, of which the statistics' own clock reads (a null program on the same hooks: \
41–45 ns per run) are about 0.38 µs. What was tried:\n\
\n\
| change | effect (bpf_stats) | kept |\n\
|---|---|---|\n\
| take the statistics' own per-run cost out of the bound, measured in the same run by null programs on the same hooks | the headline stops charging ~0.38 µs of clock reads per connection to the agent; the figure no longer depends on the clock's speed | kept (the headline) |\n\
| `tcp_receive_reset`: a socket no longer in SYN_SENT (`skc_state`, offset from the kernel's BTF) is passed over before the `CONNECTING` lookup; without BTF the lookup decides as before | 136 → 79–83 ns per run, once per connection closed by a reset (every reset of an established flow) | kept |\n\
| no `CONNECTING` insert or delete at all (an experiment: refusals then go unseen) | `inet_sock_set_state` 758 → 706 ns per connection in the same conditions: the two hash operations are ~50 ns of a connection, within the noise | measured only: the table is not where the cost is |\n\
| socket-local storage (`BPF_MAP_TYPE_SK_STORAGE`) on the BTF tracepoints, nothing done when a connect succeeds | not measurable with this toolchain: the map needs BTF in the object (`bpf-linker --btf`), and with BTF every program is refused (`number of funcs in func_info doesn't match number of subprogs`: the compiler-builtins `memset`/`memcpy` subprograms carry no BTF function records); with the table measured at ~50 ns, the most it could save is that | dropped |\n\
| the Unix socket fallback (syscall tracepoints, which this host's kernel forces: it refuses `fexit`) hooks only the `connect`/`sendto` exits where the kernel lends a task's registers (`bpf_task_pt_regs`, 5.15+ with BTF): an exit that is no refusal returns at once, a refusal reads its address from the registers the call was entered with; older kernels keep entry and exit, with direct record loads and a node-wide count of AF_UNIX calls in progress so other exits skip the lookup | measured on 2026-12-01 (debug agent, 20,000 connects, 2 alternated rounds, the machine shared with two builds): RST loop `unix_sys_enter_connect` + `unix_sys_exit` 294 → 87 ns per connection (one exit run, statistics included); UDS loop 661 / 629 → 89 / 83 ns per connection | kept |\n\
| `--unix-hooks=syscalls` since the Unix datagram work (#49): `socket()` hooked for every process (an LRU hash insert at each entry, a lookup, delete and a second delete or insert at each exit), and the by-registers `connect` exit refused by the verifier (`R3 !read_ok`: two reads made before either was checked), so entry + exit again; now `socket()`'s entry leaves at once unless AF_UNIX, keeps the call in a per-CPU slot, its exit deletes only what a lookup found, and the exit reads one register at a time | measured on 2026-12-06 (`--only hot-path`, release builds, 9 rounds each): UDS loop 0.855 → 0.869 (`socket()` alone) → 0.973 (both; controls 1.022, 1.000, 1.002), programs 1206 → 710 → 69 ns and 4 → 4 → 3 runs per connection, bound 0.929 → 0.954 → 0.996 | kept |\n\
| the UDP refusals' `kfree_skb` program on the BTF tracepoint where the kernel takes it, the tracefs one the fallback (#49): every skb the node drops runs it, and the tracefs hook fills a trace record first | measured on 2026-12-06 (`--only datagrams`, release builds, 9 rounds each): drop storm 0.919 (tracefs, full run; control 0.998) → 0.955 (control 1.000), beside a null program on the BTF tracepoint at 0.960 in the same rounds; delivered UDP 1.000 → 1.003 | kept |\n\
| UDP refusals at `icmp:icmp_send` where the kernel has it (`--udp-hook=auto`), `kfree_skb` only the fallback or when asked (#49, #52 item 4): the port unreachable the kernel answers a datagram to a port no socket holds with, so nothing runs on a delivered datagram or another drop; IPv4 only (IPv6's refusals need `kfree_skb`) | measured on 2026-12-06 (`--only datagrams`, release builds, 9 rounds each): drop storm 0.955 (`kfree_skb` on its BTF tracepoint, control 1.000) → 0.997 (control 1.000), the agent's program runs per drop 1.00 → 0.00; delivered UDP 0.986 (control 0.994), 0.00 runs per datagram as before | kept (`auto`) |
| a successful connect reads nothing of its socket: a refusal's destination and family come from `tcp_receive_reset`'s record, the connect's start time (a clock read nobody used) is no longer taken, and the SYN_SENT exits skip the protocol read (only TCP and MPTCP sockets pass through SYN_SENT) | same runs: `inet_sock_set_state` + the reset programs 1229 → 1175 ns per connection (statistics included), within the noise of single runs | kept (simpler, and never dearer) |\n\
| the connecting sockets' table, measured apart (same runs, 3 alternated rounds): without its insert and delete `inet_sock_set_state` costs 66–88 ns per run against 124–141 ns with them, i.e. the two hash operations are ~300–400 ns of a connection here, most of the programs' share (the earlier ~50 ns experiment did not hold up) | a plain hash instead of the LRU hash: 105–129 against 115–131 ns per run, no better | measured only |\n\
| connects claim a slot in a direct-mapped array (8,192 slots, Fibonacci hash of the socket's address; the verifier inlines the lookup; one compare-and-exchange claims a free slot, one store frees it, no lock): a socket whose slot another holds, and every socket on kernels before 5.12, goes to the LRU hash as before | `inet_sock_set_state` 141–147 → 88–100 ns per run; all programs together, RST loop 1,550–1,602 → 883–944 ns per connection and FIN loop 1,522–1,564 → 930–933 ns (statistics included, 2 alternated rounds, with the Unix fallback change above) | kept |\n\
\n\
What is left of a connection's cost is the two SYN_SENT runs' own work (the owner: pid, \
cgroup, process name, the leader's `comm` for a thread that does not lead its process; \
a slot claimed and freed) and the early exits of the other state changes (a few ns each \
once the statistics' cost is out).\n\
\n\
- **Detection latency** is bounded below by the reorder window (200 ms): a fact is \
held that long so records from other CPUs can be put back in order. The daemon used \
to release held facts only on its 100 ms tick, so a resolution waited 200–300 ms \
plus scheduling (measured on 2026-11-30: p99 346 ms over 1,000 races, missing the \
300 ms target); it now also wakes when the oldest held fact falls due (rounded up to \
10 ms, so a storm wakes it at most 100 times a second).\n\
\n\
- **Why the bound and the measured ratios can differ**: the throughput and CPU-time \
ratios compare the loop with and without the agent, and on a shared 2-core machine \
they move by more than the programs cost; the bound adds the programs' measured run \
time (the statistics' own clock reads taken out) to the bare loop's CPU. It leaves out \
the tracepoint's dispatch before a program runs (the BTF tracepoint fills no record; \
the tracefs ones do) and counts other processes' state changes during the run: an \
estimate of the programs' own share, not of every cycle a hook costs.\n\
";

#[cfg(test)]
mod tests {
    /// The committed report's notes are what this generator writes (edited by hand
    /// without a full bench run, they must not drift from it).
    #[test]
    fn the_committed_report_carries_the_hook_paths_section() {
        let committed = include_str!("../../../BENCHMARKS.md");
        assert!(
            committed.contains(super::HOOK_PATHS),
            "BENCHMARKS.md's hook paths section differs from report_text.rs's HOOK_PATHS"
        );
    }

    #[test]
    fn the_committed_report_carries_these_notes() {
        let committed = include_str!("../../../BENCHMARKS.md");
        assert!(
            committed.contains(super::NOTES),
            "BENCHMARKS.md's notes differ from report_text.rs's NOTES"
        );
    }
}
