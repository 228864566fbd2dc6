#!/bin/bash
# Stops the Slurm test cluster started by start.sh: cancels all jobs, stops the daemons in
# reverse start order (TERM, KILL after 20 s), the one-host cluster's too, ends leftover
# slurmstepd processes and removes n2's network namespace. Idempotent. Keeps configs, state,
# database and logs.
set -euo pipefail
# A first argument names the Slurm release: 22.05 (the default: Debian 12's, cluster tc) or
# 24.11 (Debian 13's, cluster tc2411 in a root of its own: stop-2411.sh).
case ${1:-} in
    24.11) shift && exec "$(dirname "$(readlink -f "$0")")/stop-2411.sh" "$@" ;;
    22.05) shift ;;
esac
# shellcheck source=lib.sh
. "$(dirname "$(readlink -f "$0")")/lib.sh"
need_root
t0=$(now_us)

if daemon_running slurmctld; then
    cancel_all sc "$TC_CLUSTER" slurmd slurmd-n2
fi
# The one-host cluster's jobs, the same way.
if daemon_running slurmctld-tc1; then
    cancel_all sc1 "$TC1_CLUSTER" slurmd-tc1
fi
stop_all
end_stepds
netns_down
log "stopped in $(elapsed "$t0" "$(now_us)") s"
