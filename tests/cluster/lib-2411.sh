# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts sourcing this
# Settings and helpers of the Slurm 24.11 test cluster "tc2411" (install-2411.sh,
# start-2411.sh, stop-2411.sh, status-2411.sh, in-2411.sh; start.sh 24.11 etc. dispatch to
# them). Sourced, never run. Everything of that cluster lives in a Debian 13 root of its own
# (Debian 12's 22.05 clients cannot talk to a 24.11 controller): its daemons and its client
# commands run there, each in a mount namespace whose / is that root (in-2411.sh). It runs
# beside the 22.05 cluster "tc": own ports, key, state, spool, logs, database and job ids.
# It reuses lib.sh's helpers with its own names and directories.

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TC24_VERSION=24.11
# The root: built once by install-2411.sh (mmdebstrap), kept across stops and sessions;
# rebuilt only when the stamp below changes. Its own /etc/slurm, /var/lib, /run hold all of
# the cluster's configuration and state.
TC24_ROOT=${AGENT_SANDBOX_TC2411_ROOT:-/var/cache/agent-sandbox/deb13-slurm-root}
TC24_SUITE=trixie
# slurm-client is pulled in by the daemons; named so that a change of Debian's dependencies
# does not lose it. libslurm-dev: slurm/spank.h of 24.11, for the SPANK plugin. uidmap:
# newgidmap, which the launcher uses for the user's supplementary groups. python3-venv: the
# root's own Python for the workflow tools' venv (tests/run.sh; tests/workflow.rs on 24.11).
TC24_PACKAGES=(slurmctld slurmd slurmdbd slurm-client sackd mariadb-server libslurm-dev uidmap python3-venv)
# Bump when the root's recipe changes: a root with another stamp is rebuilt.
TC24_STAMP="1 $TC24_SUITE ${TC24_PACKAGES[*]}"
TC24_STAMP_FILE=$TC24_ROOT/etc/agent-sandbox-testcluster.stamp

# lib.sh's names, for this cluster (start_daemon, stop_daemon, daemon_pid use them).
TC_NAME=agent-sandbox-testcluster-2411
TC_LOG_DIR=/var/log/$TC_NAME  # on the host, bound into the root at the same path
TC_RUN_DIR=/run/$TC_NAME      # on the host: our pid files
TC_CLUSTER=tc2411
TC_ACCOUNT=testacct
TC_SPOOL_BASE=/var/spool/slurm-$TC_CLUSTER  # in the root; not tc's, so stop.sh never mixes stepds
TC_NETNS=asbtc2411-none                     # no network namespace of its own
TC24_STATE_DIR=/var/lib/slurm/$TC_CLUSTER   # in the root
TC24_SLURM_RUN_DIR=/run/slurm-pids          # the pid files the daemons write (servers', node's /run)
# One root, three hosts' /run: each daemon sees its own /run, as on a real cluster, so the
# login side (the root's own /run: sackd's /run/slurm/sack.socket only) holds no socket of
# slurmctld (/run/slurmctld/sack.socket), slurmdbd (/run/slurmdbd/...) or slurmd (its own
# /run/slurm/sack.socket), and its clients can only authenticate through sackd. These
# directories of the root are mounted on /run by in-2411.sh --side node|server.
TC24_RUN_NODE=/run-node      # slurmd and every job step it starts
TC24_RUN_SERVER=/run-server  # slurmctld, slurmdbd, mariadbd (its socket /run/mysqld)
TC24_CTLD_PORT=6917
TC24_SLURMD_PORT=6918
TC24_DBD_PORT=6919
TC24_FIRST_JOB=24000000  # job ids apart from tc's and tc1's (the SPANK plugin's markers)

# Daemons in start order; stop-2411.sh walks it backwards.
TC_DAEMONS=(mariadbd sackd slurmdbd slurmctld slurmd)

# The binary each daemon runs, as a path in the root.
daemon_exe() {
    case $1 in
        mariadbd) echo /usr/sbin/mariadbd ;;
        sackd) echo /usr/sbin/sackd ;;
        slurmdbd) echo /usr/sbin/slurmdbd ;;
        slurmctld) echo /usr/sbin/slurmctld ;;
        slurmd) echo /usr/sbin/slurmd ;;
        *) die "unknown daemon $1" ;;
    esac
}

# daemon_pid NAME, as lib.sh's but for a daemon in the root: /proc/PID/exe names the file in
# the daemon's own mount namespace, so it is compared with the real path inside the root,
# and the process's / must be the cluster's root directory (same device and inode).
daemon_pid() {
    local pf pid exe want
    pf=$(pid_file "$1")
    [[ -r $pf ]] || return 1
    pid=$(<"$pf")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
    want=$(in_root_realpath "$(daemon_exe "$1")")
    [[ $exe == "$want" || $exe == "$TC24_ROOT$want" ]] || return 1
    [[ /proc/$pid/root/ -ef $TC24_ROOT/ ]] || return 1
    echo "$pid"
}

# in_root_realpath PATH: PATH's symlinks resolved inside the root (Debian's alternatives:
# /usr/sbin/slurmctld -> /etc/alternatives/... -> slurmctld-wlm).
in_root_realpath() {
    local p=$1 n=0 t
    while [[ -L $TC24_ROOT$p ]] && ((n++ < 20)); do
        t=$(readlink "$TC24_ROOT$p")
        if [[ $t == /* ]]; then p=$t; else p=$(dirname "$p")/$t; fi
    done
    echo "$p"
}

root_ready() { [[ -r $TC24_STAMP_FILE && $(<"$TC24_STAMP_FILE") == "$TC24_STAMP" ]]; }

# r24 CMD...: a command on the login side of the root, as root, bounded in time (the
# clients, as sc does on tc); r24s on the servers' side (mariadb's clients).
r24() { timeout 15 "$TC24_DIR/in-2411.sh" -- "$@"; }
r24s() { timeout 15 "$TC24_DIR/in-2411.sh" --side server -- "$@"; }

TC24_DIR=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")

# apt_uri SUITE: the URI of this host's first apt source of SUITE (deb822 .sources files or
# one-line .list files), so the root comes from the Debian archive (or mirror) this host is
# set up with. Prints nothing if there is none.
apt_uri() {
    local suite=$1 f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r $f ]] || continue
        # deb [options] URI SUITE COMPONENT...
        awk -v s="$suite" '$1 == "deb" { sub(/^deb +(\[[^]]*\] +)?/, ""); split($0, w, / +/);
            if (w[2] == s) { print w[1]; exit } }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -r $f ]] || continue
        awk -v s="$suite" -v RS= '
            { types = uris = suites = ""; n = split($0, l, "\n")
              for (i = 1; i <= n; i++) {
                  if (l[i] ~ /^Types:/) types = l[i]
                  if (l[i] ~ /^URIs:/) uris = l[i]
                  if (l[i] ~ /^Suites:/) suites = l[i] " "
              }
              if (types ~ /[: ]deb( |$)/ && index(suites, " " s " ")) {
                  sub(/^URIs: */, "", uris); split(uris, u, / +/); print u[1]; exit
              } }' "$f"
    done | head -n 1
}

