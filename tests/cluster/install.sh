#!/bin/bash
# Installs the Debian packages of the Slurm test cluster (slurmctld, slurmd, slurmdbd, the
# clients, munge, MariaDB) when missing, without letting apt start any service, and makes
# `hostname -s` resolvable. Idempotent; starts nothing (that is start.sh).
set -euo pipefail
# A first argument names the Slurm release: 22.05 (the default: Debian 12's, cluster tc) or
# 24.11 (Debian 13's, cluster tc2411 in a root of its own: install-2411.sh).
case ${1:-} in
    24.11) shift && exec "$(dirname "$(readlink -f "$0")")/install-2411.sh" "$@" ;;
    22.05) shift ;;
esac
# shellcheck source=lib.sh
. "$(dirname "$(readlink -f "$0")")/lib.sh"
need_root

PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
t0=$(now_us)

missing=()
for p in "${PACKAGES[@]}"; do
    if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
        missing+=("$p")
    fi
done

if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    # Without systemd the postinst scripts would start the daemons through invoke-rc.d; a
    # policy-rc.d that exits 101 denies that. A policy-rc.d already present is put back.
    policy=/usr/sbin/policy-rc.d
    saved=""
    if [[ -e $policy ]]; then
        saved=$(mktemp)
        cp -p "$policy" "$saved"
    fi
    restore_policy() {
        if [[ -n $saved ]]; then
            cp -p "$saved" "$policy"
            rm -f "$saved"
        else
            rm -f "$policy"
        fi
    }
    trap restore_policy EXIT
    printf '#!/bin/sh\n# written by %s during the install; removed afterwards\nexit 101\n' "$0" >"$policy"
    chmod 0755 "$policy"

    apt_opts=(-o DPkg::Lock::Timeout=600)
    # No candidate means no package lists yet (a fresh machine): fetch them once.
    if ! apt-cache policy slurmctld 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        apt-get "${apt_opts[@]}" update -qq
    fi
    DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends \
        "${missing[@]}" >"/tmp/$TC_NAME-apt.log" 2>&1 ||
        { tail -n 30 "/tmp/$TC_NAME-apt.log" >&2; die "apt-get install failed (full log: /tmp/$TC_NAME-apt.log)"; }
    restore_policy
    trap - EXIT
else
    log "packages already installed"
fi

# The daemons and the clients look up `hostname -s`.
if ! getent hosts "$TC_HOST" >/dev/null; then
    printf '127.0.1.1\t%s\n' "$TC_HOST" >>/etc/hosts
    log "added $TC_HOST to /etc/hosts"
fi

log "done in $(elapsed "$t0" "$(now_us)") s"
