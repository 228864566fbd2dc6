#!/usr/bin/env bash
# The chaperon's cost: `sbatch --wrap true` (submission round trip) and `squeue` run inside a
# jail (stub -> chaperon -> real command) against the same commands run directly, in one
# run, interleaved, as the unprivileged test user, on the test cluster (tests/cluster).
# The jail is started once per batch of calls, so its own startup is not counted: this
# measures what the chaperon adds to each call.
#
#   sudo benches/slurm.sh          # RUNS=30 calls per candidate and command
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
RUNS="${RUNS:-30}"
BIN="${BIN:-target/release/agent-sandbox}"
user="${BENCH_USER:-asbtest}"
case "$BIN" in /*) ;; *) BIN="$repo/$BIN" ;; esac
if [ "$(id -u)" != 0 ]; then
  echo "benches/slurm.sh: run as root (it starts the test cluster and drops to $user)" >&2
  exit 1
fi
id "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
tests/cluster/install.sh >/dev/null
tests/cluster/start.sh --user "$user" --two-nodes --no-selftest >/dev/null  # the shape the tests use: no restart between them
# The stub as sites install it (docs/admin/install.md: static, musl), next to the default BIN.
if [ "$BIN" = "$repo/target/release/agent-sandbox" ]; then
  cargo build --release --quiet --bin agent-sandbox
  stub/release.sh >/dev/null
fi
chmod o+rx . target target/release 2>/dev/null || true
work=$(mktemp -d /tmp/asb-slurmbench.XXXXXX)
chown "$user" "$work"
trap 'rm -rf "$work"' EXIT

# The timing loop runs in the candidate's environment: `direct` on the host, `jail` inside
# one session (the stub and chaperon path). Held jobs, cancelled at the end.
cat >"$work/loop.sh" <<'SH'
#!/bin/sh
# usage: loop.sh N -> prints "sbatch_us squeue_us first_sbatch_us": medians of N calls each,
# and the first sbatch alone (in a jail: the session's first Slurm call)
n=$1
ms() { date +%s%N; }
i=0; : > sb.t; : > sq.t
while [ "$i" -lt "$n" ]; do
  a=$(ms); sbatch --hold --parsable -J asb-bench --wrap true >/dev/null; b=$(ms)
  squeue -h >/dev/null; c=$(ms)
  echo $(( (b - a) / 1000 )) >> sb.t; echo $(( (c - b) / 1000 )) >> sq.t
  i=$((i + 1))
done
med() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "$(med sb.t) $(med sq.t) $(head -n1 sb.t)"
scancel --name=asb-bench >/dev/null 2>&1 || true
SH
chmod 755 "$work/loop.sh"
chown "$user" "$work/loop.sh"
# The governor's cap (slurm.queries_per_minute, 30 by default) would make this loop wait:
# the bench measures the path, so the cap is lifted for it. Its squeue calls are real ones
# anyway (each follows a submission, which changes the scope).
policy=$(mktemp /tmp/asb-slurmbench-policy.XXXXXX.toml)
printf '[slurm]\nqueries_per_minute = 1000000\n' > "$policy"
chmod 644 "$policy"
trap 'rm -rf "$work" "$policy"' EXIT

as_user() { (cd "$work" && setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups env -i HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" PATH=/usr/bin:/bin "$@"); }

echo "agent-sandbox $("$BIN" --version | cut -d' ' -f2), $(sinfo --version), $(nproc) cores, $RUNS calls each, microseconds (median)"
declare -a d_sb d_sq j_sb j_sq d_first j_first
for round in 1 2 3; do
  read -r s q f < <(as_user sh ./loop.sh "$RUNS")
  d_sb+=("$s"); d_sq+=("$q"); d_first+=("$f")
  read -r s q f < <(as_user "$BIN" -q --policy "$policy" run -- sh ./loop.sh "$RUNS")
  j_sb+=("$s"); j_sq+=("$q"); j_first+=("$f")
done
med3() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
ds=$(med3 "${d_sb[@]}"); dq=$(med3 "${d_sq[@]}"); js=$(med3 "${j_sb[@]}"); jq=$(med3 "${j_sq[@]}")
printf '%-22s %10s %10s %8s\n' command direct jail ratio
printf '%-22s %10s %10s %8s\n' "sbatch --wrap true" "$ds" "$js" "$(awk -v a="$js" -v b="$ds" 'BEGIN {printf "%.2f", a/b}')"
printf '%-22s %10s %10s %8s\n' "squeue" "$dq" "$jq" "$(awk -v a="$jq" -v b="$dq" 'BEGIN {printf "%.2f", a/b}')"
# A session's first Slurm call starts its chaperon and says where the session network
# listens: against the later calls of the same jail (the median above).
df=$(med3 "${d_first[@]}"); jf=$(med3 "${j_first[@]}")
printf '%-22s %10s %10s %8s\n' "first sbatch" "$df" "$jf" "$(awk -v a="$jf" -v b="$ds" 'BEGIN {printf "%.2f", a/b}')"
echo "rounds: direct sbatch ${d_sb[*]} | jail sbatch ${j_sb[*]} | direct squeue ${d_sq[*]} | jail squeue ${j_sq[*]}"
echo "rounds: first sbatch direct ${d_first[*]} | in a new jail ${j_first[*]} (ratio: against the direct median)"

# The stub's round trip alone, without slurmctld's time and its drift between rounds: a call
# the chaperon answers from the governor's store (the same `squeue -h` again, in a project of
# its own with no job) against starting `/bin/true`, in the same jail, CALLS each.
CALLS="${CALLS:-300}"
mkdir "$work/empty"
chown "$user" "$work/empty"
cat >"$work/empty/trip.sh" <<'SH'
#!/bin/sh
# usage: trip.sh N -> prints "true_us squeue_us", the mean of N calls each
n=$1
per() { s=$(date +%s%N); i=0; while [ "$i" -lt "$n" ]; do "$@" >/dev/null; i=$((i + 1)); done; e=$(date +%s%N); echo $(( (e - s) / n / 1000 )); }
squeue -h >/dev/null
echo "$(per /bin/true) $(per squeue -h)"
SH
chmod 755 "$work/empty/trip.sh"
declare -a t_true t_sq
for round in 1 2 3; do
  read -r t q < <(cd "$work/empty" && setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups env -i \
    HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" PATH=/usr/bin:/bin \
    "$BIN" -q --policy "$policy" run -- sh ./trip.sh "$CALLS")
  t_true+=("$t"); t_sq+=("$q")
done
tt=$(med3 "${t_true[@]}"); tq=$(med3 "${t_sq[@]}")
printf "%-22s %10s %10s %+8d\n" "a stored answer" "/bin/true" "squeue -h" "$((tq - tt))"
echo "rounds: /bin/true ${t_true[*]} | squeue -h from the store ${t_sq[*]}"
