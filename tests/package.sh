#!/usr/bin/env bash
# The packages as a site installs them: builds them (packaging/build.sh, reusing the release
# build tests/run.sh made), checks the .rpm's and the .deb's contents, installs the .deb with
# dpkg, and from the installed files runs, as the test user, the README's first command, and a
# sandboxed `sbatch` on the 22.05 test cluster with the package's plugstack.conf example as
# the cluster's (the installed SPANK plugin admitting only /usr/bin/agent-sandbox); purges the
# package and checks nothing of it is left. Puts back what it changed, however it ends:
# plugstack.conf and the cluster as tests/run.sh left them, /etc/agent-sandbox as it was.
# Takes /tmp/asb-cluster.lock and /tmp/asb-etc.lock itself (not to be run under them). Also checks the Spack, EasyBuild and Lmod
# recipes (packaging/check-recipes.sh). As root, after tests/run.sh (.ci/run), which made the
# release build, the test users and the cluster this uses.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "tests/package.sh: run it as root (dpkg -i, the test cluster)" >&2; exit 1; }
user=asbtest
home=$(getent passwd "$user" | cut -d: -f6)
[ -n "$home" ] || { echo "tests/package.sh: no user $user; fix: run tests/run.sh first, as root" >&2; exit 1; }
fail() {
  echo "tests/package.sh: FAIL: $*" >&2
  exit 1
}
step() { echo "tests/package.sh: [$((SECONDS - t0)) s] $*"; }
t0=$SECONDS
# dpkg-shlibdeps, for the .deb's Depends (cargo-deb leaves them out without it); rpm, to read
# the .rpm; Lua and Lmod, to check the modulefile (packaging/check-recipes.sh).
need=()
command -v dpkg-shlibdeps >/dev/null 2>&1 || need+=(dpkg-dev)
command -v rpm >/dev/null 2>&1 || need+=(rpm)
command -v luac5.4 >/dev/null 2>&1 || need+=(lua5.4)
[ -f /usr/share/lmod/lmod/init/bash ] || need+=(lmod)
if [ "${#need[@]}" -gt 0 ]; then
  echo "tests/package.sh: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${need[@]}"
fi
packaging/check-recipes.sh
step "the Spack, EasyBuild and Lmod recipes checked"

packaging/build.sh
deb=$(echo target/packages/agent-sandbox_*_amd64.deb)
rpm=$(echo target/packages/agent-sandbox-*.x86_64.rpm)
[ -f "$deb" ] && [ -f "$rpm" ] || fail "packaging/build.sh made no single .deb and .rpm: $deb $rpm"
step "built $deb and $rpm"

# What both packages must hold, and as which mode and owner.
plugin_deb=/usr/lib/x86_64-linux-gnu/slurm-wlm/agent_sandbox.so
plugin_rpm=/usr/lib64/slurm/agent_sandbox.so
common=(/usr/bin/agent-sandbox /usr/bin/agent-sandbox-stub /etc/agent-sandbox/config.toml
  /etc/agent-sandbox/admin.toml /usr/share/agent-sandbox/apparmor/agent-sandbox
  /usr/share/agent-sandbox/slurm/plugstack.conf.d/agent-sandbox.conf
  /usr/share/agent-sandbox/profiles/codex.toml /usr/share/agent-sandbox/profiles/claude.toml
  /usr/share/man/man1/agent-sandbox.1.gz /usr/share/man/man1/agent-sandbox-run.1.gz
  /usr/share/man/man1/agent-sandbox-policy-check.1.gz
  /usr/share/bash-completion/completions/agent-sandbox
  /usr/share/fish/vendor_completions.d/agent-sandbox.fish)
has_all() { # has_all WHAT LISTING PATH...
  local what=$1 listing=$2
  shift 2
  for p in "$@"; do
    grep -qxF -- "$p" <<<"$listing" || fail "$what lacks $p; it holds:"$'\n'"$listing"
  done
}
# The launcher in both packages is built here (Debian 12, glibc 2.36): the .rpm is for
# RHEL/Rocky/Alma 9 and later, whose glibc is 2.34, so no newer glibc symbol may be used.
newest=$(objdump -T target/packaging/bin/agent-sandbox | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -n1)
[ "$(printf '%s\n' "$newest" GLIBC_2.34 | sort -V | tail -n1)" = GLIBC_2.34 ] ||
  fail "the launcher needs $newest: the .rpm would not run on RHEL 9 (glibc 2.34); docs/admin/install.md"
# The .rpm: checked with Debian's rpm (its file list, modes, owners, config files, digests);
# not installed (this is Debian).
rpm -K --nosignature "$rpm" >/dev/null || fail "rpm -K: $rpm is damaged"
has_all "$rpm" "$(rpm -qlp "$rpm")" "${common[@]}" "$plugin_rpm" /usr/share/zsh/site-functions/_agent-sandbox
has_all "$rpm (config files)" "$(rpm -qcp "$rpm")" /etc/agent-sandbox/config.toml /etc/agent-sandbox/admin.toml
modes=$(rpm -qp --qf '[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILENAMES}\n]' "$rpm")
has_all "$rpm (modes)" "$modes" "-rwxr-xr-x root:root /usr/bin/agent-sandbox" \
  "-rwxr-xr-x root:root /usr/bin/agent-sandbox-stub" "-rw-r--r-- root:root /etc/agent-sandbox/admin.toml"
step "rpm -qlp: $(rpm -qlp "$rpm" | wc -l) files as expected"

# The .deb: its contents, then installed. dpkg would ask about site files already in
# /etc/agent-sandbox (and a purge would remove them): they are moved aside and put back.
listing=$(dpkg-deb -c "$deb" | awk '{print $1, $2, substr($6, 2)}')
has_all "$deb" "$(awk '{print $3}' <<<"$listing")" "${common[@]}" "$plugin_deb" /usr/share/zsh/vendor-completions/_agent-sandbox
has_all "$deb (modes)" "$listing" "-rwxr-xr-x 0/0 /usr/bin/agent-sandbox" "-rwxr-xr-x 0/0 /usr/bin/agent-sandbox-stub"
depends=$(dpkg-deb -f "$deb" Depends)
grep -q 'libc6 (>= 2\.' <<<"$depends" || fail "$deb does not depend on libc6 (Depends: $depends)"

exec 8>/tmp/asb-cluster.lock 9>/tmp/asb-etc.lock
flock 8
flock 9
etc_saved=$(mktemp -d /tmp/asb-package-etc.XXXXXX)
plug_saved=$etc_saved/plugstack.conf
cp -a /etc/slurm/plugstack.conf "$plug_saved"
[ ! -e /etc/agent-sandbox ] || mv /etc/agent-sandbox "$etc_saved/agent-sandbox"
cluster_restarted=0
restore() {
  local rc=$?
  set +e
  dpkg --purge agent-sandbox >/dev/null 2>&1
  rm -rf /etc/agent-sandbox
  [ ! -e "$etc_saved/agent-sandbox" ] || mv "$etc_saved/agent-sandbox" /etc/agent-sandbox
  if ! cmp -s "$plug_saved" /etc/slurm/plugstack.conf; then
    cp -a "$plug_saved" /etc/slurm/plugstack.conf
  fi
  # The machine's plugstack.conf never left naming the installed launcher (the package is gone).
  cmp -s "$plug_saved" /etc/slurm/plugstack.conf ||
    { echo "tests/package.sh: /etc/slurm/plugstack.conf could not be put back from $plug_saved" >&2 && rc=1; }
  if [ "$cluster_restarted" = 1 ]; then
    step "the cluster back on tests/run.sh's plugstack.conf"
    tests/cluster/stop.sh >/dev/null 2>&1
    tests/cluster/start.sh --user "$user" --two-nodes --one-host --no-selftest 8>&- 9>&- >/dev/null ||
      { echo "tests/package.sh: the test cluster did not start again: tests/cluster/start.sh" >&2 && rc=1; }
  fi
  [ "$rc" != 0 ] || rm -rf "$etc_saved"
  step "done (exit status $rc)"
  exit $rc
}
trap restore EXIT

dpkg -i "$deb" >/dev/null || fail "dpkg -i $deb"
step "installed: $(dpkg-query -W -f '${Package} ${Version}, ${Installed-Size} KiB' agent-sandbox)"

# The man pages and the bash completion are what the launcher parses.
zcat /usr/share/man/man1/agent-sandbox-policy-check.1.gz | grep -qF -- '\-\-kind' ||
  fail "the man page of policy check does not name --kind"
# shellcheck disable=SC2016 # expanded by the inner shell
words=$(bash -c '. /usr/share/bash-completion/completions/agent-sandbox
  f=$(complete -p agent-sandbox | sed -n "s/.* -F \([^ ]*\) .*/\1/p")
  COMP_WORDS=(agent-sandbox pol); COMP_CWORD=1; COMP_LINE="agent-sandbox pol"; COMP_POINT=${#COMP_LINE}
  "$f" agent-sandbox pol agent-sandbox; echo "${COMPREPLY[*]}"')
[ "$words" = policy ] || fail "bash completion of \`agent-sandbox pol\` gave '$words', not 'policy'"

# As the test user, with a clean environment, in a project under their home.
project=$home/t/package
rm -rf "$project"
install -d -o "$user" -g "$user" "$home/t" "$project"
install -d -o "$user" -g "$user" -m 0700 "$home/.ssh"
[ -e "$home/.ssh/id_ed25519" ] || install -o "$user" -g "$user" -m 0600 /dev/null "$home/.ssh/id_ed25519"
as_user() {
  runuser -u "$user" -- env -i HOME="$home" USER="$user" LOGNAME="$user" PATH=/usr/local/bin:/usr/bin:/bin \
    LANG=C.UTF-8 sh -c 'cd "$1" && shift && exec "$@"' sh "$project" "$@"
}

found=$(as_user sh -c 'command -v agent-sandbox') || true
[ "$found" = /usr/bin/agent-sandbox ] || fail "agent-sandbox on $user's PATH is '$found', not /usr/bin/agent-sandbox"
# The README's first command, from the installed launcher: a near-empty home, no ~/.ssh.
set +e
out=$(as_user agent-sandbox run -- sh -c 'ls ~ ; ls ~/.ssh' 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "/.ssh.*No such file or directory" <<<"$out" ||
  fail "agent-sandbox run -- sh -c 'ls ~ ; ls ~/.ssh' (exit status $rc, ~/.ssh exists outside):"$'\n'"$out"
step "README's command from /usr/bin/agent-sandbox: ~/.ssh absent inside"
# The jail's Slurm commands are the installed stub (not the launcher in its place).
out=$(as_user agent-sandbox -q run -- sh -c 'stat -L -c %s "$(command -v squeue)"' 2>&1) || fail "stat of squeue in the jail: $out"
[ "$out" = "$(stat -c %s /usr/bin/agent-sandbox-stub)" ] ||
  fail "squeue in the jail is not /usr/bin/agent-sandbox-stub ($out bytes)"

# A sandboxed sbatch on the test cluster, its plugstack.conf the package's example.
cp /usr/share/agent-sandbox/slurm/plugstack.conf.d/agent-sandbox.conf /etc/slurm/plugstack.conf
step "the cluster on the installed plugin and launcher"
cluster_restarted=1
tests/cluster/stop.sh >/dev/null 2>&1 || true
tests/cluster/start.sh --user "$user" --two-nodes --one-host --no-selftest 8>&- 9>&- >/dev/null
# The nodes' logs from here on: a job id the restarted cluster gives again is not this job.
logs=(/var/log/agent-sandbox-testcluster/slurmd-*.log)
declare -A log_at
for l in "${logs[@]}"; do log_at[$l]=$(stat -c %s "$l"); done
set +e
out=$(as_user agent-sandbox -q run -- sh -c 'sbatch --wait --parsable -o job-%j.out --wrap "echo host=\$(hostname); test -e ~/.ssh/id_ed25519 && echo SSH-VISIBLE; echo done"; echo rc=$?' 2>&1)
set -e
job=$(grep -xE '[0-9]+' <<<"$out" | head -n1 || true)
grep -q '^rc=0$' <<<"$out" && [ -n "$job" ] || fail "sbatch --wait in the jail:"$'\n'"$out"
text=$(cat "$project/job-$job.out" 2>/dev/null || true)
grep -qx host=agent-sandbox <<<"$text" && grep -qx "done" <<<"$text" && ! grep -q SSH-VISIBLE <<<"$text" ||
  fail "job $job did not run in the jail on the node:"$'\n'"$text"
admitted=0
for l in "${logs[@]}"; do
  tail -c +"$((log_at[$l] + 1))" "$l" | grep -qF "agent-sandbox (SPANK): job $job: the task enters the jail" && admitted=1
done
[ "$admitted" = 1 ] || fail "no slurmd log says the installed SPANK plugin let job $job's task enter the jail"
step "sbatch from the installed files: job $job ran in the jail, admitted by the installed SPANK plugin"

# Uninstalled as a site would: nothing of the package left (its directories neither), and no
# site file in /etc/agent-sandbox after a purge. The trap then puts back what it moved aside.
files=$(dpkg-query -L agent-sandbox)
dpkg --purge agent-sandbox >/dev/null || fail "dpkg --purge agent-sandbox"
left=()
while read -r f; do
  # A directory is the package's own if its name says so (/usr/bin is everyone's).
  if [ -d "$f" ]; then case $f in *agent-sandbox*) ;; *) continue ;; esac fi
  [ ! -e "$f" ] || left+=("$f")
done <<<"$files"
[ ! -e /etc/agent-sandbox ] || left+=(/etc/agent-sandbox)
[ "${#left[@]}" = 0 ] || fail "dpkg --purge agent-sandbox left ${left[*]}"
dpkg-query -W agent-sandbox >/dev/null 2>&1 && fail "dpkg still lists agent-sandbox after the purge"
step "purged: none of its $(wc -l <<<"$files") paths left"
