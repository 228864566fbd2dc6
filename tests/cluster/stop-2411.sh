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
    jobs=$(r24 squeue -h -o %A 2>/dev/null || true)
    if [[ -n $jobs ]]; then
        # shellcheck disable=SC2086 # one job id per word
        r24 scancel $jobs || true
        log "cancelled jobs: ${jobs//$'\n'/ }"
        if daemon_running slurmd; then
            # shellcheck disable=SC2016 # expanded by wait_for, at each poll
            wait_for '[[ -z $(r24 squeue -h -o %A) ]]' 20 "jobs still listed after scancel" || true
        fi
    fi
fi

for ((i = ${#TC_DAEMONS[@]} - 1; i >= 0; i--)); do
    stop_daemon "${TC_DAEMONS[i]}"
done

# slurmstepd outlives slurmd; found by its socket in the spool directory (lib.sh), which is
# this cluster's own, so the 22.05 cluster's steps are never touched.
stepds=$(stepd_pids)
if [[ -n $stepds ]]; then
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
fi
rm -f "$TC_RUN_DIR/slurmd.context"
log "stopped $TC_CLUSTER in $(elapsed "$t0" "$(now_us)") s"
