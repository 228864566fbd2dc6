#!/bin/bash
# Runs a command in the root of the Slurm 24.11 test cluster (lib-2411.sh), as root or as
# USER: the command's / is that Debian 13 root, in a mount namespace of its own, with the
# host's /proc, /sys (with /sys/fs/cgroup), /dev, /tmp, /home, this checkout, the cluster's
# log directory, /etc/agent-sandbox, $CARGO_TARGET_DIR, the working directory and
# $AGENT_SANDBOX_TC2411_BINDS (colon-separated) mounted at the same paths, so paths mean the
# same inside and out. The environment is kept; the working directory too. By default it is
# the login node of cluster tc2411: its /run holds sackd's /run/slurm/sack.socket and no
# other daemon's, so its clients authenticate through sackd. --side node gives the compute
# node's /run (slurmd's own sack.socket; slurmd and its job steps run there), --side server
# the servers' (slurmctld's and slurmdbd's sack sockets, MariaDB's socket).
#
#   in-2411.sh [--side login|node|server] [-u USER] [--] CMD [ARG...]
#
# Root only (it mounts). The pid stays the command's (every step execs), so a daemon started
# through it is signalled by that pid. -u drops to USER with setpriv --init-groups and sets
# HOME, USER, LOGNAME; USER must be in the root's passwd (start.sh 24.11 copies the host's
# users with uid 1000-59999). Without -u the command runs as root: a wrapper that ends with
# its own `setpriv --reuid ...` (tests/common's command_wrapped) drops by itself.
set -euo pipefail
# shellcheck source=lib-2411.sh
. "$(dirname "$(readlink -f "$0")")/lib-2411.sh"

usage() {
    echo "usage: $0 [--side login|node|server] [-u USER] [--] CMD [ARG...]" >&2
    exit 2
}

# --- inside the new mount namespace (re-executed by the outer part below) ---
if [[ ${1:-} == --inner-2411 ]]; then
    shift
    side=$1 user=$2 cwd=$3 nbinds=$4
    shift 4
    binds=("${@:1:nbinds}")
    shift "$nbinds"
    R=$TC24_ROOT
    # pivot_root, not chroot: in a chroot the kernel refuses new user namespaces (EPERM), and
    # the launcher makes one. pivot_root wants the new root to be a mount point.
    mount --bind "$R" "$R"
    mount --rbind /proc "$R/proc"
    mount --rbind /sys "$R/sys"
    mount --rbind /dev "$R/dev"
    for b in "${binds[@]}"; do
        mkdir -p "$R$b"
        mount --rbind "$b" "$R$b"
    done
    case $side in
        node) mount --bind "$R$TC24_RUN_NODE" "$R/run" ;;
        server) mount --bind "$R$TC24_RUN_SERVER" "$R/run" ;;
    esac
    cd "$R"
    /usr/sbin/pivot_root . .oldroot # by path: a caller's PATH may lack /usr/sbin
    umount -l /.oldroot
    cd "$cwd" 2>/dev/null || cd /
    if [[ -n $user ]]; then
        IFS=: read -r _ _ uid gid _ home _ < <(getent passwd "$user") ||
            die "no user $user in $R/etc/passwd; fix: $TC24_DIR/start.sh 24.11 (copies the host's users)"
        exec setpriv --reuid="$uid" --regid="$gid" --init-groups -- \
            env HOME="$home" USER="$user" LOGNAME="$user" "$@"
    fi
    exec "$@"
fi

# --- on the host ---
side=login
user=""
while (($#)); do
    case $1 in
        --side)
            (($# >= 2)) || usage
            side=$2
            [[ $side == login || $side == node || $side == server ]] || usage
            shift 2
            ;;
        -u)
            (($# >= 2)) || usage
            user=$2
            shift 2
            ;;
        --) shift && break ;;
        -*) usage ;;
        *) break ;;
    esac
done
(($#)) || usage
need_root
root_ready || die "the root $TC24_ROOT is missing or stale; fix: $TC24_DIR/start.sh 24.11 (or install.sh 24.11)"

cwd=$(pwd -P)
checkout=$(cd "$TC24_DIR/../.." && pwd -P)
candidates=(/tmp /home "$TC_LOG_DIR" "$checkout" /etc/agent-sandbox)
[[ -z ${CARGO_TARGET_DIR:-} ]] || candidates+=("$(readlink -f "$CARGO_TARGET_DIR")")
if [[ -n ${AGENT_SANDBOX_TC2411_BINDS:-} ]]; then
    IFS=: read -r -a extra <<<"$AGENT_SANDBOX_TC2411_BINDS"
    candidates+=("${extra[@]}")
fi
candidates+=("$cwd")

# covered PATH: PATH is one of the binds or below one.
covered() {
    local b
    for b in ${binds[@]+"${binds[@]}"}; do
        [[ $1 == "$b" || $1 == "$b"/* ]] && return 0
    done
    return 1
}
binds=()
for c in "${candidates[@]}"; do
    [[ -n $c && -d $c ]] || continue
    c=$(cd "$c" && pwd -P)
    [[ $c != / ]] || continue
    covered "$c" && continue
    # The mount point is made in the root: no component there may be a symlink, which
    # mkdir would follow (an absolute one out of the root, into the host's tree).
    p=$TC24_ROOT
    IFS=/ read -r -a parts <<<"${c#/}"
    for part in "${parts[@]}"; do
        p=$p/$part
        [[ ! -L $p ]] || die "cannot mount $c in the root: $p is a symlink"
    done
    binds+=("$c")
done

exec unshare --mount --propagation private -- "$(readlink -f "$0")" --inner-2411 "$side" "$user" "$cwd" \
    "${#binds[@]}" ${binds[@]+"${binds[@]}"} "$@"
