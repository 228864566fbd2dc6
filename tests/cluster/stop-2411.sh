#!/bin/bash
# Stops the Slurm 24.11 test cluster "tc2411" (stop.sh 24.11 runs this): cancels its jobs,
# stops its daemons in reverse start order (TERM, KILL after 20 s), ends leftover slurmstepd
# processes and their job processes. Idempotent. Keeps the root, configs, key, state,
# database and logs. Leaves the 22.05 cluster alone.
set -euo pipefail
# shellcheck source=lib-2411.sh
. "$(dirname "$(readlink -f "$0")")/lib-2411.sh"
need_root
t0=$(now_us)

if daemon_running slurmctld && root_ready; then
    cancel_all r24 "$TC_CLUSTER" slurmd
fi
stop_all
# slurmstepd is found by its socket in the spool directory (lib.sh), which is this cluster's
# own, so the 22.05 cluster's steps are never touched.
end_stepds
rm -f "$TC_RUN_DIR/slurmd.context"
log "stopped $TC_CLUSTER in $(elapsed "$t0" "$(now_us)") s"
