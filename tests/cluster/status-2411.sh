#!/bin/bash
# Prints which daemons of the Slurm 24.11 test cluster "tc2411" run (status.sh 24.11 runs
# this) and, when slurmctld runs, sinfo from its login side. Changes nothing. Exits 0 when
# all of them run, 1 otherwise.
set -euo pipefail
# shellcheck source=lib-2411.sh
. "$(dirname "$(readlink -f "$0")")/lib-2411.sh"
need_root

if root_ready; then
    echo "root      $TC24_ROOT (slurmctld $(dpkg-query --admindir="$TC24_ROOT/var/lib/dpkg" -W -f='${Version}' slurmctld))"
else
    echo "root      $TC24_ROOT missing or stale (start.sh 24.11 builds it)"
fi
all=0
for d in "${TC_DAEMONS[@]}"; do
    if pid=$(daemon_pid "$d"); then
        printf '%-9s running  pid %s\n' "$d" "$pid"
    else
        printf '%-9s stopped\n' "$d"
        all=1
    fi
done
if daemon_running slurmctld; then
    echo
    r24 sinfo || true
fi
exit "$all"
