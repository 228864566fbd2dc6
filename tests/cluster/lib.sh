# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts sourcing this
# Shared settings and helpers of the Slurm test cluster scripts (install.sh, start.sh,
# stop.sh, status.sh). Sourced, never run. Knows nothing of agent-sandbox itself.
# Facts behind the choices: shared/design/SLURM-TESTBED.md.

TC_NAME=agent-sandbox-testcluster
TC_LOG_DIR=/var/log/$TC_NAME
TC_RUN_DIR=/run/$TC_NAME            # our pid files (one per daemon, the pid we started)
TC_SLURM_RUN_DIR=$TC_RUN_DIR/slurm  # pid files the slurm daemons write themselves

TC_CLUSTER=tc
TC_ACCOUNT=testacct
TC_HOST=$(hostname -s)
TC_CPUS=8                           # declared per node; more than the cores on purpose

TC_SLURM_CONF=/etc/slurm/slurm.conf
TC_SLURMDBD_CONF=/etc/slurm/slurmdbd.conf
TC_STATE_DIR=/var/lib/slurm/slurmctld
TC_SPOOL_BASE=/var/lib/slurm/slurmd  # SlurmdSpoolDir is $TC_SPOOL_BASE/%n

# Second node (--two-nodes): a slurmd in its own network namespace, joined to the host by a
# veth pair on TEST-NET-3 (RFC 5737) so the tests never touch a real private range.
TC_N2=n2
TC_NETNS=asbtc-n2
TC_VETH_HOST=asbtc-h
TC_VETH_NS=asbtc-n
TC_HOST_ADDR=203.0.113.1
TC_N2_ADDR=203.0.113.2
TC_PREFIX=30  # .1 and .2 only: the rest of TEST-NET-3 may be routed elsewhere (a package mirror)

# The one-host cluster (--one-host): a second, small cluster beside tc whose controller and
# only node are this host, reached over loopback, as on a workstation or a VM running Slurm
# whose host name resolves to a loopback address. 127.0.1.1 is the address Debian gives such a
# host name; the session network's listeners are then on 127.0.0.1, the route's source toward
# it. Own ports, files and job ids (the SPANK plugin's markers are per job id); no accounting.
TC1_CLUSTER=tc1
TC1_CONF_DIR=/etc/slurm/$TC1_CLUSTER
TC1_SLURM_CONF=$TC1_CONF_DIR/slurm.conf
TC1_STATE_DIR=/var/lib/slurm/$TC1_CLUSTER
TC1_ADDR=127.0.1.1
TC1_CTLD_PORT=7817
TC1_SLURMD_PORT=7818
TC1_FIRST_JOB=7000000

# Daemons in start order; stop.sh walks it backwards. slurmd-n2 runs only with --two-nodes,
# slurmctld-tc1 and slurmd-tc1 only with --one-host.
TC_DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd slurmd-n2 slurmctld-tc1 slurmd-tc1)

die() {
    printf '%s: %s\n' "${0##*/}" "$*" >&2
    exit 1
}

log() {
    printf '%s: %s\n' "${0##*/}" "$*"
}

need_root() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (it starts system daemons); fix: sudo $0"
}

# Microseconds since the epoch (bash 5, no fork), and seconds between two such values.
now_us() { echo "${EPOCHREALTIME/./}"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1e6 }'; }

# wait_for CMD TIMEOUT MSG [LOG...]
# Polls CMD (a shell string, run with eval in a subshell, output discarded) every 0.1 s until
# it succeeds. After TIMEOUT seconds (an integer) prints MSG and the last lines of each LOG,
# and fails.
wait_for() {
    local cmd=$1 timeout=$2 msg=$3
    shift 3
    local deadline=$((${EPOCHREALTIME/./} + timeout * 1000000))
    while ! (eval "$cmd") >/dev/null 2>&1; do
        if ((${EPOCHREALTIME/./} > deadline)); then
            printf '%s: timeout after %ss: %s\n  (waited for: %s)\n' "${0##*/}" "$timeout" "$msg" "$cmd" >&2
            local f
            for f in "$@"; do
                [[ -e $f ]] || continue
                printf -- '--- last lines of %s ---\n' "$f" >&2
                tail -n 25 "$f" >&2
            done
            return 1
        fi
        sleep 0.1
    done
}

# The binary each daemon name runs; a pid counts as ours only if /proc/PID/exe is it,
# so a recycled pid is never taken for a daemon (and never signalled).
daemon_exe() {
    case $1 in
        munged) echo /usr/sbin/munged ;;
        mariadbd) echo /usr/sbin/mariadbd ;;
        slurmdbd) echo /usr/sbin/slurmdbd ;;
        slurmctld | slurmctld-*) echo /usr/sbin/slurmctld ;;
        slurmd | slurmd-*) echo /usr/sbin/slurmd ;;
        *) die "unknown daemon $1" ;;
    esac
}

pid_file() { echo "$TC_RUN_DIR/$1.pid"; }

# daemon_pid NAME: prints the pid and succeeds if NAME runs (pid file + /proc/PID/exe).
# A zombie has no exe link, so it counts as stopped.
daemon_pid() {
    local pf pid exe
    pf=$(pid_file "$1")
    [[ -r $pf ]] || return 1
    pid=$(<"$pf")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
    # Debian links /usr/sbin/slurmctld to slurmctld-wlm (alternatives): compare real paths.
    [[ $exe == "$(readlink -f "$(daemon_exe "$1")")" ]] || return 1
    echo "$pid"
}

daemon_running() { daemon_pid "$1" >/dev/null; }

# start_daemon NAME CMD...: runs CMD in the foreground of its own session, output appended
# to $TC_LOG_DIR/NAME.out (the slurm daemons also write NAME.log), and records its pid. CMD must exec the daemon in the same process
# (setpriv, nsenter and setsid do: this script is no process group leader, so setsid does
# not fork).
start_daemon() {
    local name=$1
    shift
    # From /: a daemon must not keep the checkout it was started from as its working
    # directory (a later run may delete it, and every slurmstepd forked then has none).
    # Only stdio is passed on: a daemon that inherited the descriptor of a caller's `flock
    # /tmp/asb-cluster.lock` would hold that lock for as long as it runs, and every later
    # flock would wait for it.
    (
        cd / || exit 1
        for fd in /proc/$BASHPID/fd/*; do
            fd=${fd##*/}
            if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
        done
        exec setsid "$@" </dev/null >>"$TC_LOG_DIR/$name.out" 2>&1
    ) &
    local pid=$!
    echo "$pid" >"$(pid_file "$name")"
    # Until the last exec the pid shows bash, setsid, setpriv or nsenter: wait for the daemon
    # (or for the process to end, which the caller's readiness check then reports).
    wait_for "daemon_running $name || ! readlink /proc/$pid/exe" 10 "$name (pid $pid) did not exec"
}

# stop_daemon NAME: TERM, wait up to 20 s, then KILL. Quiet no-op if it does not run.
stop_daemon() {
    local name=$1 pid
    if pid=$(daemon_pid "$name"); then
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_for "! daemon_running $name" 20 "$name (pid $pid) ignored SIGTERM; sending SIGKILL" \
            "$TC_LOG_DIR/$name.out" "$TC_LOG_DIR/$name.log"; then
            kill -KILL "$pid" 2>/dev/null || true
            wait_for "! daemon_running $name" 10 "$name (pid $pid) survived SIGKILL"
        fi
        log "stopped $name (pid $pid)"
    fi
    rm -f "$(pid_file "$name")"
}

netns_exists() { [[ -e /run/netns/$TC_NETNS ]]; }

# The namespace of node n2 and its veth pair; deleting the namespace deletes the pair.
netns_up() {
    netns_exists || ip netns add "$TC_NETNS"
    if ! ip link show "$TC_VETH_HOST" >/dev/null 2>&1; then
        ip link add "$TC_VETH_HOST" type veth peer name "$TC_VETH_NS" netns "$TC_NETNS"
    fi
    # Flushed first: an address left by an older run with a wider prefix would keep routing
    # the rest of TEST-NET-3 (where a package mirror may live) into the namespace.
    if ! ip -o addr show dev "$TC_VETH_HOST" | grep -q " $TC_HOST_ADDR/$TC_PREFIX "; then
        ip addr flush dev "$TC_VETH_HOST"
        ip addr add "$TC_HOST_ADDR/$TC_PREFIX" dev "$TC_VETH_HOST"
    fi
    ip link set "$TC_VETH_HOST" up
    if ! ip -n "$TC_NETNS" -o addr show dev "$TC_VETH_NS" | grep -q " $TC_N2_ADDR/$TC_PREFIX "; then
        ip -n "$TC_NETNS" addr flush dev "$TC_VETH_NS"
        ip -n "$TC_NETNS" addr add "$TC_N2_ADDR/$TC_PREFIX" dev "$TC_VETH_NS"
    fi
    ip -n "$TC_NETNS" link set "$TC_VETH_NS" up
    ip -n "$TC_NETNS" link set lo up
}

netns_down() {
    if ip link show "$TC_VETH_HOST" >/dev/null 2>&1; then
        ip link del "$TC_VETH_HOST"
    fi
    if netns_exists; then
        ip netns del "$TC_NETNS"
        log "removed network namespace $TC_NETNS"
    fi
}

# stepd_pids: pids of the slurmstepd processes of this cluster, in the host and in n2's
# network namespace. slurmstepd outlives slurmd; each one holds a unix socket named
# <SpoolDir>/<node>_<job>.<step>, so it is found by that socket's inode in /proc/net/unix
# (per network namespace) and /proc/PID/fd, not by a process name.
stepd_pids() {
    local -A wanted=()
    local ino
    while read -r ino; do
        wanted["socket:[$ino]"]=1
    done < <(
        {
            cat /proc/net/unix
            if netns_exists; then nsenter --net="/run/netns/$TC_NETNS" cat /proc/net/unix; fi
        } | awk -v base="$TC_SPOOL_BASE/" '
            index($8, base) == 1 && $8 ~ /\/[^\/]+_[0-9]+\.[0-9]+(\.[0-9]+)?$/ { print $7 }'
    )
    ((${#wanted[@]})) || return 0
    local path link
    # find fails on processes that end meanwhile: not an error here.
    { find /proc/[0-9]*/fd -maxdepth 1 -type l -lname 'socket:*' -printf '%p %l\n' 2>/dev/null || true; } |
        while read -r path link; do
            if [[ -n ${wanted[$link]:-} ]]; then
                path=${path#/proc/}
                echo "${path%%/*}"
            fi
        done | sort -un
}

# Slurm client commands bounded in time, so a half-up cluster never hangs a script; sc1
# asks the one-host cluster.
sc() { timeout 15 "$@"; }
sc1() { SLURM_CONF=$TC1_SLURM_CONF timeout 15 "$@"; }

# as_user USER CMD...: runs CMD as USER (su-like environment) in the current directory.
as_user() {
    local user=$1
    shift
    runuser -u "$user" -- "$@"
}

# descendants PID...: the given pids and all their descendants (from the ppid in /proc/*/stat).
descendants() {
    local -A kids=()
    local stat line rest pid ppid
    for stat in /proc/[0-9]*/stat; do
        read -r line <"$stat" 2>/dev/null || continue
        pid=${line%% *}
        rest=${line##*) } # after the command name, which may contain spaces
        ppid=${rest#* }
        ppid=${ppid%% *}
        kids[$ppid]+=" $pid"
    done
    local -a todo=("$@")
    while ((${#todo[@]})); do
        pid=${todo[0]}
        todo=("${todo[@]:1}")
        echo "$pid"
        # shellcheck disable=SC2206 # pids: split on blanks
        todo+=(${kids[$pid]:-})
    done
}

# --- what start.sh and start-2411.sh, stop.sh and stop-2411.sh do alike ---

# write_conf FILE MODE UID:GID: installs stdin as FILE; succeeds only if the content changed.
write_conf() {
    local file=$1 mode=$2 owner=$3 tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if [[ -e $file ]] && cmp -s "$tmp" "$file"; then
        rm -f "$tmp"
        chmod "$mode" "$file" && chown "$owner" "$file"
        return 1
    fi
    install -m "$mode" -o "${owner%%:*}" -g "${owner##*:}" "$tmp" "$file"
    rm -f "$tmp"
    log "wrote $file"
}

# db_password SLURMDBD_CONF: the database password kept in that file, or a new one (made once
# and then kept there, 0600, slurm).
db_password() {
    local pass
    pass=$(sed -n 's/^StoragePass=//p' "$1" 2>/dev/null || true)
    if [[ ! $pass =~ ^[A-Za-z0-9]{16,}$ ]]; then
        pass=$(tr -dc A-Za-z0-9 </dev/urandom | head -c 24 || true)
    fi
    echo "$pass"
}

# slurm_conf_policy: the lines of slurm.conf both clusters share (no cgroup plugins: no
# systemd, no delegated cgroup, no confinement of jobs; a quick backfill for the tests).
slurm_conf_policy() {
    cat <<CONF
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
ReturnToService=2
CONF
}

# The names ensure started, for the line that says what came up.
started=()
# ensure NAME READY-CMD TIMEOUT CMD...: starts NAME unless it runs, then waits for READY-CMD
# (and stops waiting at once when the daemon exits).
ensure() {
    local name=$1 ready=$2 timeout=$3
    shift 3
    if ! daemon_running "$name"; then
        start_daemon "$name" "$@"
        started+=("$name")
    fi
    wait_for "! daemon_running $name || { $ready; }" "$timeout" "$name is not ready (log: $TC_LOG_DIR)" \
        "$TC_LOG_DIR/$name.out" "$TC_LOG_DIR/$name.log"
    daemon_running "$name" || {
        tail -n 25 "$TC_LOG_DIR/$name.out" >&2
        die "$name exited (log: $TC_LOG_DIR/$name.out)"
    }
}

# node_ready NODE CLIENT: NODE takes jobs (asked with CLIENT: sc, sc1, r24). A node that
# answers but is down or drained is resumed.
node_ready() {
    local state client=$2
    state=$("$client" sinfo -h -n "$1" -o %T) || return 1
    case $state in
        idle | mixed | allocated | completing) return 0 ;;
        down | drained | draining) "$client" scontrol update NodeName="$1" State=RESUME ;;
    esac
    return 1
}

# register CLIENT USER...: the cluster, the test account and each USER's association, each
# added only if missing (sacctmgr -i add fails on an existing one). One query lists them all
# as cluster|account|user; a cluster's own row is "tc|root|".
register() {
    local client=$1 assocs u
    shift
    assocs=$("$client" sacctmgr -n -P show assoc format=cluster,account,user)
    if ! grep -qxF "$TC_CLUSTER|root|" <<<"$assocs"; then
        "$client" sacctmgr -i add cluster "$TC_CLUSTER" >/dev/null
        log "registered cluster $TC_CLUSTER"
    fi
    if ! grep -qxF "$TC_CLUSTER|$TC_ACCOUNT|" <<<"$assocs"; then
        "$client" sacctmgr -i add account "$TC_ACCOUNT" Cluster="$TC_CLUSTER" \
            Description="agent-sandbox tests" Organization=agent-sandbox >/dev/null
        log "registered account $TC_ACCOUNT"
    fi
    for u in "$@"; do
        if ! grep -qxF "$TC_CLUSTER|$TC_ACCOUNT|$u" <<<"$assocs"; then
            "$client" sacctmgr -i add user "$u" Cluster="$TC_CLUSTER" Account="$TC_ACCOUNT" \
                DefaultAccount="$TC_ACCOUNT" >/dev/null
            log "registered user $u in account $TC_ACCOUNT"
        fi
    done
}

# cancel_all CLIENT CLUSTER NODE-DAEMON...: cancels every job CLIENT lists and waits until
# none is listed, if one of the NODE-DAEMONs runs (only a running slurmd ends the steps;
# without one the jobs stay listed, completing).
cancel_all() {
    local client=$1 cluster=$2 jobs d
    shift 2
    jobs=$("$client" squeue -h -o %A 2>/dev/null || true)
    [[ -n $jobs ]] || return 0
    # shellcheck disable=SC2086 # one job id per word
    "$client" scancel $jobs || true
    log "cancelled jobs of $cluster: ${jobs//$'\n'/ }"
    for d in "$@"; do
        if daemon_running "$d"; then
            # shellcheck disable=SC2016 # expanded by wait_for, at each poll
            wait_for '[[ -z $('"$client"' squeue -h -o %A) ]]' 20 "jobs of $cluster still listed after scancel" || true
            return 0
        fi
    done
}

# end_stepds: slurmstepd outlives slurmd (e.g. when slurmd died before the jobs were
# cancelled). Without slurmd it cannot finish its job, so it and the job's processes (its
# descendants, taken before it dies and they are reparented) get a short TERM and then KILL.
end_stepds() {
    local stepds
    stepds=$(stepd_pids)
    [[ -n $stepds ]] || return 0
    local -a pids
    # shellcheck disable=SC2086 # one pid per word
    mapfile -t pids < <(descendants $stepds)
    kill -TERM "${pids[@]}" 2>/dev/null || true
    alive() {
        local p
        for p in "${pids[@]}"; do
            readlink "/proc/$p/exe" >/dev/null 2>&1 && return 0 # a zombie has no exe
        done
        return 1
    }
    if ! wait_for '! alive' 3 "slurmstepd or job processes ignored SIGTERM; sending SIGKILL"; then
        kill -KILL "${pids[@]}" 2>/dev/null || true
        wait_for '! alive' 10 "processes survived SIGKILL: ${pids[*]}" || true
    fi
    log "ended leftover slurmstepd ${stepds//$'\n'/ } and their processes (${#pids[@]} in all)"
}

# stop_all: the daemons in reverse start order (TERM, KILL after 20 s).
stop_all() {
    local i
    for ((i = ${#TC_DAEMONS[@]} - 1; i >= 0; i--)); do
        stop_daemon "${TC_DAEMONS[i]}"
    done
}
