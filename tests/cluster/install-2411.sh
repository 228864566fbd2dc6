#!/bin/bash
# Builds the Debian 13 root of the Slurm 24.11 test cluster (lib-2411.sh: TC24_ROOT) with
# mmdebstrap, from Debian's packages: slurmctld, slurmd, slurmdbd, the clients, sackd,
# MariaDB, the Slurm headers; makes `hostname -s` resolve (appends to /etc/hosts only if
# missing). Installs mmdebstrap from this host's apt if missing. Cached: a
# root whose stamp matches is kept (0.0 s); another one is rebuilt beside it and swapped in,
# so a half-built root is never used. Starts nothing (that is start-2411.sh).
set -euo pipefail
# shellcheck source=lib-2411.sh
. "$(dirname "$(readlink -f "$0")")/lib-2411.sh"
need_root
t0=$(now_us)

# The daemons and the clients look up `hostname -s` (the root gets a copy of /etc/hosts).
if ! getent hosts "$TC_HOST" >/dev/null; then
    printf '127.0.1.1\t%s\n' "$TC_HOST" >>/etc/hosts
    log "added $TC_HOST to /etc/hosts"
fi

if root_ready; then
    log "root $TC24_ROOT is up to date"
    exit 0
fi
for d in "${TC_DAEMONS[@]}"; do
    ! daemon_running "$d" || die "$d of $TC_CLUSTER runs in the old root; fix: $TC24_DIR/stop.sh 24.11 first"
done

if ! command -v mmdebstrap >/dev/null; then
    log "installing mmdebstrap"
    apt_opts=(-o DPkg::Lock::Timeout=600)
    if ! apt-cache policy mmdebstrap 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        apt-get "${apt_opts[@]}" update -qq
    fi
    DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends \
        mmdebstrap >"/tmp/$TC_NAME-apt.log" 2>&1 ||
        { tail -n 30 "/tmp/$TC_NAME-apt.log" >&2; die "apt-get install mmdebstrap failed (full log: /tmp/$TC_NAME-apt.log)"; }
fi

# The archive and the security archive this host's own Debian comes from (its release's
# suite and <suite>-security in its apt sources); AGENT_SANDBOX_TC2411_MIRROR and
# AGENT_SANDBOX_TC2411_SECURITY name others.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
mirror=${AGENT_SANDBOX_TC2411_MIRROR:-$(apt_uri "$codename")}
security=${AGENT_SANDBOX_TC2411_SECURITY:-$(apt_uri "$codename-security")}
[[ -n $mirror ]] ||
    die "no apt source for this host's suite '$codename' to take Debian $TC24_SUITE from; fix: AGENT_SANDBOX_TC2411_MIRROR=<Debian archive URI>"
sources=("deb $mirror $TC24_SUITE main")
[[ -z $security ]] || sources+=("deb $security $TC24_SUITE-security main")

new=$TC24_ROOT.new
apt_log=/tmp/$TC_NAME-mmdebstrap.log
rm -rf --one-file-system "$new"
install -d -m 0755 "$(dirname "$TC24_ROOT")"
log "building $TC24_ROOT: Debian $TC24_SUITE with ${TC24_PACKAGES[*]} from ${sources[*]} (log: $apt_log)"
# In a mount namespace of its own: whatever mmdebstrap mounts in the new root (/proc, /sys,
# /dev while the packages install) goes away with it, even if it is killed, and never shows
# in (or is deleted through) the host's tree. mmdebstrap keeps services from starting while
# it installs (policy-rc.d). No documentation, manual pages or translations: 60 MB less.
include=$(
    IFS=,
    echo "${TC24_PACKAGES[*]}"
)
unshare --mount --propagation private -- \
    mmdebstrap --mode=root --variant=apt --include="$include" \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$TC24_SUITE" "$new" "${sources[@]}" >"$apt_log" 2>&1 ||
    {
        tail -n 30 "$apt_log" >&2
        die "mmdebstrap failed (full log: $apt_log)"
    }

# The mount point in-2411.sh moves the old / to while it switches to the root.
install -d -m 0700 "$new/.oldroot"
echo "$TC24_STAMP" >"$new${TC24_STAMP_FILE#"$TC24_ROOT"}"

if [[ -e $TC24_ROOT ]]; then
    rm -rf --one-file-system "$TC24_ROOT"
fi
mv "$new" "$TC24_ROOT"
# shellcheck disable=SC2016 # a dpkg-query format, not a shell expansion
version=$(dpkg-query --admindir="$TC24_ROOT/var/lib/dpkg" -W -f='${Version}' slurmctld)
log "built $TC24_ROOT (slurmctld $version, $(du -sm --one-file-system "$TC24_ROOT" | cut -f1) MB) in $(elapsed "$t0" "$(now_us)") s"
