#!/bin/bash
# Prints which daemons of the Slurm test cluster run (by start.sh's pid files) and, when
# slurmctld runs, sinfo. Changes nothing. Exits 0 when all of munged, mariadbd, slurmdbd,
# slurmctld and slurmd run, 1 otherwise.
set -euo pipefail
# A first argument names the Slurm release: 22.05 (the default: Debian 12's, cluster tc) or
# 24.11 (Debian 13's, cluster tc2411 in a root of its own: status-2411.sh).
case ${1:-} in
    24.11) shift && exec "$(dirname "$(readlink -f "$0")")/status-2411.sh" "$@" ;;
    22.05) shift ;;
esac
# shellcheck source=lib.sh
. "$(dirname "$(readlink -f "$0")")/lib.sh"
need_root

all=0
for d in "${TC_DAEMONS[@]}"; do
    if pid=$(daemon_pid "$d"); then
        printf '%-13s running  pid %s\n' "$d" "$pid"
    else
        printf '%-13s stopped\n' "$d"
        [[ $d == slurmd-n2 || $d == *-$TC1_CLUSTER ]] || all=1
    fi
done
if netns_exists; then
    echo "netns      $TC_NETNS ($TC_N2_ADDR)"
fi
if daemon_running slurmctld; then
    echo
    sc sinfo || true
fi
if daemon_running slurmctld-tc1; then
    echo
    echo "$TC1_CLUSTER (SLURM_CONF=$TC1_SLURM_CONF):"
    sc1 sinfo || true
fi
exit "$all"
