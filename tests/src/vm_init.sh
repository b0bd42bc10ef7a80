#!/bin/busybox sh
# /init of the kernel tier's initramfs (tests/src/vm.rs): runs the scenario on the
# booted kernel and prints machine-readable lines `@@SR <key> <value>` on the serial
# console, then powers off. /scenario.env (written by the host) sets the pod UIDs and
# container IDs. Every wait is bounded; the host also kills a VM that runs too long.
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /usr/bin /usr/sbin /sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t devtmpfs dev /dev 2>/dev/null
mount -t sysfs sys /sys
mount -t tmpfs tmp /tmp
. /scenario.env
# Agents here do not pin, but section 5b's, which asks.
export SIDECAR_RACE_LOG_FORMAT=json SIDECAR_RACE_LOG=info SIDECAR_RACE_PIN=off
AGENT=/bin/sidecar-race-agent
CG=/sys/fs/cgroup

say() { echo "@@SR $*"; }
# Prefixes every line of file $2 with `@@SR $1 `.
emit() { sed "s/^/@@SR $1 /" "$2"; }
# Waits up to $3 tenths of a second for file $1 to contain $2.
wait_for() {
    i=0
    while [ "$i" -lt "$3" ]; do
        grep -q "$2" "$1" 2>/dev/null && return 0
        usleep 100000
        i=$((i + 1))
    done
    return 1
}
# Runs the agent with "$@" expecting it to refuse to start; prints its exit code and
# stderr under `$1_rc` / `$1_err`.
must_fail() {
    key=$1
    shift
    timeout 60 $AGENT "$@" >/tmp/$key.out 2>/tmp/$key.err
    say "${key}_rc" $?
    emit "${key}_err" /tmp/$key.err
}
# Starts "$@" as a process of the cgroup directory $1 (prints nothing); its pid is in $!.
in_cgroup() {
    dir=$1
    shift
    sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$dir" "$@" &
}

# Waits (bounded) until the agent on 127.0.0.1:9965 is ready; $i: the 100 ms waits.
wait_ready() {
    i=0
    until wget -q -O /dev/null http://127.0.0.1:9965/readyz 2>/dev/null; do
        i=$((i + 1))
        [ "$i" -gt 600 ] && break
        usleep 100000
    done
}

# The agent's incidents (query $1) on 127.0.0.1:9965.
incidents() { wget -q -O - "http://127.0.0.1:9965/api/v1/incidents$1" 2>/dev/null; }
# Waits up to $2 tenths of a second until pod $1 has a resolved incident.
wait_resolved() {
    i=0
    until incidents "?state=resolved" | grep -q "$1"; do
        i=$((i + 1))
        [ "$i" -gt "$2" ] && break
        usleep 100000
    done
}
# Prints every incident, one JSON document, under `@@SR $1`.
emit_incidents() {
    incidents "" >"/tmp/$1.json"
    echo >>"/tmp/$1.json"
    emit "$1" "/tmp/$1.json"
}
# The cgroup dir of the Burstable pod with UID $1, as the kubelet's systemd driver
# lays it out.
pod_dir() {
    echo "$CG/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod$(echo "$1" | tr - _).slice"
}
# Makes the cgroup dirs of containers $2 and $3 in pod dir $1.
make_containers() {
    mkdir -p "$1/cri-containerd-$2.scope" "$1/cri-containerd-$3.scope"
}
# Starts `trace` with the arguments after $1, its output in /tmp/$1.out and
# /tmp/$1.err, its pid in $TRACE; says $1_ready once it watches the kernel.
start_trace() {
    local k=$1
    shift
    $AGENT trace "$@" >"/tmp/$k.out" 2>"/tmp/$k.err" &
    TRACE=$!
    if wait_for "/tmp/$k.err" 'watching the kernel' 600; then say "${k}_ready" yes; else say "${k}_ready" no; fi
}
# Lets the agent's attribution wait and reader catch up, stops `trace` (its summary
# on stderr), and says its exit code and output as $1_rc, $1_out and $1_err.
stop_trace() {
    sleep 3
    kill -INT $TRACE
    wait $TRACE
    say "$1_rc" $?
    emit "$1_out" "/tmp/$1.out"
    emit "$1_err" "/tmp/$1.err"
}
# Runs the startup race of pod $1 (its cgroup dir) with containers $2 (the proxy,
# listening 1 s late) and $3 (the app, dialing every 50 ms until it connects, its
# output in file $4); the proxy's pid is in $P.
startup_race() {
    make_containers "$1" "$2" "$3"
    in_cgroup "$1/cri-containerd-$2.scope" sr-proxy --listen 127.0.0.1:15001 --delay-ms 1000 >/dev/null
    P=$!
    in_cgroup "$1/cri-containerd-$3.scope" sr-app --connect 127.0.0.1:15001 --interval-ms 50 >"$4"
    wait $!
}

say kernel "$(uname -r)"

# Booted with lockdown=confidentiality: the agent runs on the BTF tracepoints' direct
# reads and says what it cannot see in one `degraded:` sentence, told by securityfs,
# and again without securityfs (as in a pod), told by a probe program. A pod made while
# `trace` watches gets its refusals with its container's id; `run` tells a startup
# race's exact count and /readyz says it is degraded.
if grep -q 'lockdown=confidentiality' /proc/cmdline; then
    ip link set lo up
    mount -t cgroup2 cgroup2 $CG
    mount -t securityfs none /sys/kernel/security
    say lockdown "$(cat /sys/kernel/security/lockdown)"
    start_trace lockdown_trace
    POD1=$(pod_dir "$POD1_UID")
    make_containers "$POD1" "$POD1_PROXY" "$POD1_APP"
    say cgid "${POD1#$CG}/cri-containerd-$POD1_APP.scope" "$(stat -c %i "$POD1/cri-containerd-$POD1_APP.scope")"
    in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-app --connect 127.0.0.1:15001 --attempts 3 --interval-ms 0 >/dev/null
    wait $!
    in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-app --connect '[::1]:15002' --attempts 1 >/dev/null
    wait $!
    in_cgroup "$POD1/cri-containerd-$POD1_PROXY.scope" sr-proxy --listen 127.0.0.1:15003 --close-after-ms 300 >/dev/null
    wait $!
    stop_trace lockdown_trace
    # `run`: a startup race (the proxy listens 1 s late), its count against the app's.
    $AGENT run --listen 127.0.0.1:9965 --pods-from none --events=false >/tmp/lockdown_run.out 2>/tmp/lockdown_run.err &
    LR=$!
    wait_ready
    wget -q -O /tmp/lockdown_readyz http://127.0.0.1:9965/readyz 2>/dev/null
    emit lockdown_readyz /tmp/lockdown_readyz
    startup_race "$(pod_dir "$POD2_UID")" "$POD2_PROXY" "$POD2_APP" /tmp/lockdown_app.out
    emit lockdown_app /tmp/lockdown_app.out
    wait_resolved "$POD2_UID" 200
    emit_incidents lockdown_incidents
    kill $P
    kill -TERM $LR
    wait $LR
    say lockdown_run_rc $?
    emit lockdown_run_err /tmp/lockdown_run.err
    # Without securityfs, told by the probe program: it starts and says how it knew.
    umount /sys/kernel/security
    $AGENT trace >/dev/null 2>/tmp/lockdown_probe.err &
    LP=$!
    wait_for /tmp/lockdown_probe.err 'watching the kernel' 600
    kill -INT $LP
    wait $LP
    say lockdown_probe_rc $?
    emit lockdown_probe_err /tmp/lockdown_probe.err
    say done
    sync
    poweroff -f
fi
ip link set lo up
say ipv6 "$([ -e /proc/net/if_inet6 ] && echo yes || echo no)"

# 1. Only cgroup v1 mounted (no cgroup2 anywhere): one clear sentence.
mount -t tmpfs cgroup $CG
mkdir -p $CG/cpu,cpuacct $CG/systemd
mount -t cgroup -o cpu,cpuacct cgroup $CG/cpu,cpuacct && say v1_mounted cpu,cpuacct
mount -t cgroup -o none,name=systemd cgroup $CG/systemd && say v1_mounted name=systemd
grep -c ' - cgroup2 ' /proc/self/mountinfo | sed 's/^/@@SR v1_cgroup2_mounts /'
must_fail v1 trace
umount $CG/cpu,cpuacct $CG/systemd
umount $CG
# The agent mounted tracefs while checking; the next cases start without it.
umount /sys/kernel/tracing 2>/dev/null

mount -t cgroup2 cgroup2 $CG

# 2. tracefs not mountable: /sys/kernel hidden under an empty read-only tmpfs.
mount -t tmpfs -o ro,size=4k none /sys/kernel
must_fail tracefs trace
umount /sys/kernel

# 2b. No tracefs, the kernel's BTF kept: the tracepoints are hooked as BTF
#     tracepoints; one refused connect must be seen.
mkdir -p /tmp/btf && mount --bind /sys/kernel/btf /tmp/btf
mount -t tmpfs -o size=4k none /sys/kernel && mkdir /sys/kernel/btf &&
    mount --bind /tmp/btf /sys/kernel/btf && mount -o remount,ro /sys/kernel
$AGENT trace >/tmp/notracefs.out 2>/tmp/notracefs.err &
NT=$!
if wait_for /tmp/notracefs.err 'watching the kernel' 600; then say notracefs_ready yes; else say notracefs_ready no; fi
sr-app --connect 127.0.0.1:15009 --attempts 1 >/dev/null
sleep 2
kill -INT $NT
wait $NT
say notracefs_refused "$(grep -c '127.0.0.1:15009' /tmp/notracefs.out)"
grep -o '"tracefs":"[^"]*"' /tmp/notracefs.err | sed 's/^/@@SR notracefs_tracefs /'
umount /sys/kernel/btf
umount /sys/kernel
umount /tmp/btf

# 3. A required tracepoint absent: a tracefs copy without tcp:tcp_receive_reset.
mount -t tracefs nodev /sys/kernel/tracing
for tp in sock/inet_sock_set_state tcp/tcp_send_reset cgroup/cgroup_mkdir cgroup/cgroup_rmdir; do
    mkdir -p /tmp/tracefs-copy/events/$tp
    cat /sys/kernel/tracing/events/$tp/format >/tmp/tracefs-copy/events/$tp/format 2>/dev/null
done
must_fail tracepoint trace --tracefs /tmp/tracefs-copy

# The REDIRECT case's network: modules, a pod address on a dummy interface with the
# default route, and a NAT rule sending 10.96.0.10:80 to local port 15001.
for m in $(cat /redirect/order); do
    insmod /redirect/$m.ko || say insmod_failed $m
done
# (loading `dummy` makes dummy0 already)
[ -e /sys/class/net/dummy0 ] || ip link add dummy0 type dummy
ip addr add 10.200.0.2/24 dev dummy0 && ip link set dummy0 up &&
    ip route add default dev dummy0 && nft -f /redirect/rules.nft && say redirect ready

# 4. `trace`: a pod laid out as the kubelet lays it out, created while the agent
#    watches; 3 refused IPv4 connects, 1 IPv6 one, 1 to a service IP REDIRECTed to
#    local port 15001, a listener up and down.
start_trace trace
POD1=$(pod_dir "$POD1_UID")
make_containers "$POD1" "$POD1_PROXY" "$POD1_APP"
for c in kubepods.slice kubepods.slice/kubepods-burstable.slice; do say cgid "/$c" "$(stat -c %i $CG/$c)"; done
say cgid "${POD1#$CG}" "$(stat -c %i "$POD1")"
for c in "$POD1_PROXY" "$POD1_APP"; do
    say cgid "${POD1#$CG}/cri-containerd-$c.scope" "$(stat -c %i "$POD1/cri-containerd-$c.scope")"
done
in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-app --connect 127.0.0.1:15001 --attempts 3 --interval-ms 0 >/tmp/app1.out
say pid app4 $!
wait $!
in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-app --connect '[::1]:15002' --attempts 1 >/tmp/app2.out
say pid app6 $!
wait $!
in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-app --connect 10.96.0.10:80 --attempts 1 >/tmp/app3.out
say pid appr $!
wait $!
in_cgroup "$POD1/cri-containerd-$POD1_PROXY.scope" sr-proxy --listen 127.0.0.1:15003 --close-after-ms 300 >/tmp/proxy1.out
say pid proxy $!
wait $!
emit app /tmp/app1.out
emit app /tmp/app2.out
emit app /tmp/app3.out
stop_trace trace

# 5. `run`: a classic startup race and a drain race, read back from /api/v1/incidents.
$AGENT run --listen 127.0.0.1:9965 --pods-from none --events=false --stats-interval-seconds 5 \
    >/tmp/run.out 2>/tmp/run.err &
RUN=$!
wait_ready
say run_ready "$i"

# Startup: the proxy listens 1 s late, the app dials at once every 50 ms until it connects.
startup_race "$(pod_dir "$POD2_UID")" "$POD2_PROXY" "$POD2_APP" /tmp/app5.out
emit app /tmp/app5.out
wait_resolved "$POD2_UID" 200
kill $P
wait $P

# Drain: the proxy stops listening after 1 s; the app keeps dialing every 100 ms for
# 2 s more; then the containers and the pod are torn down.
POD3=$(pod_dir "$POD3_UID")
make_containers "$POD3" "$POD3_PROXY" "$POD3_APP"
in_cgroup "$POD3/cri-containerd-$POD3_PROXY.scope" sr-proxy --listen 127.0.0.1:15001 --close-after-ms 1000 >/tmp/proxy3.out
P3=$!
usleep 300000
in_cgroup "$POD3/cri-containerd-$POD3_APP.scope" sr-app --connect 127.0.0.1:15001 --interval-ms 100 --attempts 27 --keep-dialing >/tmp/app4.out
wait $!
wait $P3
emit app /tmp/app4.out
rmdir "$POD3/cri-containerd-$POD3_PROXY.scope" "$POD3/cri-containerd-$POD3_APP.scope" "$POD3"
wait_resolved "$POD3_UID" 200
# REDIRECT: the app dials the service IP; the NAT rule sends it to the proxy's local
# port 15001, where the proxy listens 1 s late.
POD4=$(pod_dir "$POD4_UID")
make_containers "$POD4" "$POD4_PROXY" "$POD4_APP"
in_cgroup "$POD4/cri-containerd-$POD4_PROXY.scope" sr-proxy --listen 127.0.0.1:15001 --delay-ms 1000 >/tmp/proxy4.out
P4=$!
in_cgroup "$POD4/cri-containerd-$POD4_APP.scope" sr-app --connect 10.96.0.10:80 --interval-ms 50 >/tmp/app6.out
wait $!
emit app /tmp/app6.out
wait_resolved "$POD4_UID" 50
kill $P4
wait $P4

emit_incidents incidents
kill -TERM $RUN
wait $RUN
say run_rc $?
emit run_err /tmp/run.err

# 5b. A restart mid-race (#33): an agent that pins (a bpffs of its own) is stopped
# 1 s into a startup race (the proxy listens 3 s late) and a new one starts at once.
mkdir -p /tmp/bpf && mount -t bpf bpf /tmp/bpf
PIN="--pin auto --bpffs /tmp/bpf --state-dir /tmp/state"
start_run() {
    $AGENT run --listen 127.0.0.1:9965 --pods-from none --events=false $PIN >"/tmp/$1.out" 2>"/tmp/$1.err" &
    RUN=$!
    wait_ready
}
start_run restart_old
POD5=$(pod_dir "$POD5_UID")
make_containers "$POD5" "$POD5_PROXY" "$POD5_APP"
in_cgroup "$POD5/cri-containerd-$POD5_PROXY.scope" sr-proxy --listen 127.0.0.1:15001 --delay-ms 3000 >/tmp/proxy5.out
P5=$!
in_cgroup "$POD5/cri-containerd-$POD5_APP.scope" sr-app --connect 127.0.0.1:15001 --interval-ms 100 >/tmp/app7.out
A5=$!
sleep 1
kill -TERM $RUN
wait $RUN
say restart_old_rc $?
start_run restart_new
wait $A5
emit restart_app /tmp/app7.out
wait_resolved "$POD5_UID" 200
emit_incidents incidents_restart
kill $P5
kill -TERM $RUN
wait $RUN
say restart_new_rc $?
emit restart_old_err /tmp/restart_old.err
emit restart_new_err /tmp/restart_new.err

# 6. Least privilege: uid 0 with only capabilities $2 (bounding, inheritable, ambient;
#    no_new_privs), as the DaemonSet runs it; `trace` must see one refused connect.
lp() {
    key=$1
    caps=$2
    /opt/setpriv --reuid=0 --regid=0 --clear-groups --no-new-privs --bounding-set=-all,$caps \
        --inh-caps=-all,$caps --ambient-caps=-all,$caps -- $AGENT trace --kinds refused \
        >/tmp/$key.out 2>/tmp/$key.err &
    pid=$!
    i=0
    while kill -0 $pid 2>/dev/null && ! grep -q 'watching the kernel' /tmp/$key.err; do
        i=$((i + 1))
        [ "$i" -gt 600 ] && break
        usleep 100000
    done
    if kill -0 $pid 2>/dev/null; then
        say "${key}_capeff" "$(grep CapEff /proc/$pid/status | cut -f2)"
        say "${key}_nnp" "$(grep NoNewPrivs /proc/$pid/status | cut -f2)"
        in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-app --connect 127.0.0.1:15004 --attempts 1 >/dev/null
        wait $!
        sleep 2
        kill -INT $pid
    fi
    wait $pid
    say "${key}_rc" $?
    emit "${key}_out" /tmp/$key.out
    emit "${key}_err" /tmp/$key.err
}
say perf_event_paranoid "$(cat /proc/sys/kernel/perf_event_paranoid)"
lp lp "$CAPS"
lp lp_sa "$CAPS,+sys_resource,+sys_admin"
echo 2 >/proc/sys/kernel/perf_event_paranoid
lp lp2 "$CAPS"
lp lp2_sr "$CAPS,+sys_resource"

# 7. Unix sockets, with each set of hooks: two connects to an absent path (ENOENT), a
#    listener killed so its file stays, a connect to that file (ECONNREFUSED), a
#    datagram to an absent path.
uds() {
    key=$1
    shift
    start_trace "$key" --kinds unix_refused,unix_listen,unix_listen_closed "$@"
    in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-uds connect /tmp/uds.sock --attempts 2 --interval-ms 0 >/dev/null
    wait $!
    in_cgroup "$POD1/cri-containerd-$POD1_PROXY.scope" sr-uds listen /tmp/uds.sock >/tmp/$key.listener
    listener=$!
    # Killed once it listens (it says so after listen(); the socket file exists from
    # bind() on, and a slow guest may be between the two).
    wait_for /tmp/$key.listener 'listening on' 100
    kill -KILL $listener
    wait $listener
    in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-uds connect /tmp/uds.sock --attempts 1 >/dev/null
    wait $!
    in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-uds sendto /tmp/statsd.sock --attempts 1 >/dev/null
    wait $!
    rm -f /tmp/uds.sock
    stop_trace "$key"
}
uds uds_auto
uds uds_kprobes --unix-hooks kprobes
uds uds_syscalls --unix-hooks syscalls

# 8. TCP hooks, each path: a listener up, 20 connects that succeed and close with a
#    FIN, 20 that close with a reset, one refused connect, the listener down. The sum
#    of the run counts (bpf_stats) of the agent's programs, read from its fds' fdinfo,
#    after each step: "listen fin rst refused close" runs under `$1_runs`.
echo 1 >/proc/sys/kernel/bpf_stats_enabled
# A program can be open on several of the agent's fds: each counts once, by its id.
runs() {
    for f in /proc/$1/fd/*; do
        [ "$(readlink "$f")" = anon_inode:bpf-prog ] || continue
        echo "$(sed -n 's/^prog_id:[[:space:]]*//p' "/proc/$1/fdinfo/${f##*/}")" \
            "$(sed -n 's/^run_cnt:[[:space:]]*//p' "/proc/$1/fdinfo/${f##*/}")"
    done | sort -u | awk '{ t += $2 } END { print t + 0 }'
}
tcp_hooks() {
    key=$1
    shift
    start_trace "$key" --kinds refused,listen,listen_closed "$@"
    pid=$TRACE
    r0=$(runs $pid)
    in_cgroup "$POD1/cri-containerd-$POD1_PROXY.scope" sr-proxy --listen 127.0.0.1:15005 >/tmp/$key.proxy
    proxy=$!
    wait_for /tmp/$key.proxy 'listening on' 100
    r1=$(runs $pid)
    in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-app --connect 127.0.0.1:15005 --attempts 20 --keep-dialing --interval-ms 0 >/tmp/$key.fin
    wait $!
    # The proxy's side of the last connects closes after the app's (it accepts and
    # drops): let those FINs settle before the next count.
    sleep 1
    r2=$(runs $pid)
    in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-app --connect 127.0.0.1:15005 --attempts 20 --keep-dialing --interval-ms 0 --reset-on-close >/tmp/$key.rst
    wait $!
    sleep 1
    r3=$(runs $pid)
    in_cgroup "$POD1/cri-containerd-$POD1_APP.scope" sr-app --connect 127.0.0.1:15006 --attempts 1 >/dev/null
    wait $!
    r4=$(runs $pid)
    kill -KILL $proxy
    wait $proxy
    sleep 1
    r5=$(runs $pid)
    say "${key}_runs" "$((r1 - r0)) $((r2 - r1)) $((r3 - r2)) $((r4 - r3)) $((r5 - r4))"
    emit "${key}_app" /tmp/$key.fin
    emit "${key}_app" /tmp/$key.rst
    stop_trace "$key"
}
tcp_hooks tcp_auto
tcp_hooks tcp_kprobes --tcp-hooks kprobes
tcp_hooks tcp_set_state --tcp-hooks set-state
say kprobe_pmu "$(cat /sys/bus/event_source/devices/kprobe/type 2>/dev/null || echo none)"

say done
sync
poweroff -f
