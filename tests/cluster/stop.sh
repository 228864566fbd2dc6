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
    jobs=$(sc squeue -h -o %A 2>/dev/null || true)
    if [[ -n $jobs ]]; then
        # shellcheck disable=SC2086 # one job id per word
        sc scancel $jobs || true
        log "cancelled jobs: ${jobs//$'\n'/ }"
        # Only a running slurmd ends the steps; without one the jobs stay listed (completing).
        if daemon_running slurmd || daemon_running slurmd-n2; then
            # shellcheck disable=SC2016 # expanded by wait_for, at each poll
            wait_for '[[ -z $(sc squeue -h -o %A) ]]' 20 "jobs still listed after scancel" || true
        fi
    fi
fi

# The one-host cluster's jobs, the same way.
if daemon_running slurmctld-tc1; then
    jobs=$(sc1 squeue -h -o %A 2>/dev/null || true)
    if [[ -n $jobs ]]; then
        # shellcheck disable=SC2086 # one job id per word
        sc1 scancel $jobs || true
        log "cancelled jobs of $TC1_CLUSTER: ${jobs//$'\n'/ }"
        if daemon_running slurmd-tc1; then
            # shellcheck disable=SC2016 # expanded by wait_for, at each poll
            wait_for '[[ -z $(sc1 squeue -h -o %A) ]]' 20 "jobs of $TC1_CLUSTER still listed after scancel" || true
        fi
    fi
fi

for ((i = ${#TC_DAEMONS[@]} - 1; i >= 0; i--)); do
    stop_daemon "${TC_DAEMONS[i]}"
done

# slurmstepd outlives slurmd (e.g. when slurmd died before the jobs were cancelled). Without
# slurmd it cannot finish its job, so it and the job's processes (its descendants, taken
# before it dies and they are reparented) get a short TERM and then KILL.
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

netns_down
log "stopped in $(elapsed "$t0" "$(now_us)") s"
