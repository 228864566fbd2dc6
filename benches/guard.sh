#!/usr/bin/env bash
# What the git guard costs (not a test): the same file work inside the default jail with the
# guard on and off (`filesystem.nested_git = true`), interleaved in one run, and outside any
# jail. Work: create N files (open O_CREAT|O_WRONLY, write, close), then rename each, then
# unpack a tar of them (what a build, `pip install` or `git checkout` does). Prints medians
# and the ratios. As root it runs as the unprivileged test user.
set -euo pipefail
cd "$(dirname "$0")/.."
user="${BENCH_USER:-asbtest}"
files="${FILES:-5000}"
rounds="${ROUNDS:-5}"
if [ "${1:-}" != --as-user ]; then
  cargo build --release --quiet
  bin="$(pwd)/target/release/agent-sandbox"
  chmod o+rx . target target/release 2>/dev/null || true
fi
if [ "$(id -u)" = 0 ]; then
  home=$(getent passwd "$user" | cut -d: -f6)
  install -d -o "$user" -g "$(id -gn "$user")" "$home/bench-guard"
  exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups env -i HOME="$home" USER="$user" \
    PATH=/usr/bin:/bin FILES="$files" ROUNDS="$rounds" bash "$0" --as-user "$bin" "$home/bench-guard"
fi
if [ "${1:-}" = --as-user ]; then
  bin="$2"
  cd "$3"
fi
work='import os, sys, tarfile, time
n = int(sys.argv[1]); d = "w%d" % os.getpid(); os.mkdir(d)
t0 = time.perf_counter()
for i in range(n):
    with open("%s/f%d" % (d, i), "w") as f: f.write("x")
t1 = time.perf_counter()
for i in range(n):
    os.rename("%s/f%d" % (d, i), "%s/g%d" % (d, i))
t2 = time.perf_counter()
with tarfile.open("%s.tar" % d, "w") as t: t.add(d)
os.mkdir(d + "x")
with tarfile.open("%s.tar" % d) as t: t.extractall(d + "x")
t3 = time.perf_counter()
print("%.1f %.1f %.1f" % ((t1 - t0) * 1e6 / n, (t2 - t1) * 1e6 / n, (t3 - t2) * 1e6 / n))
import shutil; shutil.rmtree(d); shutil.rmtree(d + "x"); os.remove(d + ".tar")'
printf '[filesystem]\nnested_git = true\n' > "$HOME/bench-guard-off.toml"
declare -A all
for _ in $(seq "$rounds"); do
  all[direct]+="$(python3 -c "$work" "$files");"
  all[guard]+="$("$bin" -q run -- python3 -c "$work" "$files");"
  all[noguard]+="$("$bin" -q --policy "$HOME/bench-guard-off.toml" run -- python3 -c "$work" "$files");"
done
median() { tr ';' '\n' | awk -v c="$1" 'NF { print $c }' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "git guard: $files files, $rounds rounds, kernel $(uname -r), $(nproc) cores; microseconds per file (median)"
printf '%-28s %10s %10s %10s\n' "" create rename untar
for k in direct noguard guard; do
  printf '%-28s %10s %10s %10s\n' "$k" "$(echo "${all[$k]}" | median 1)" "$(echo "${all[$k]}" | median 2)" \
    "$(echo "${all[$k]}" | median 3)"
done
for c in 1 2 3; do
  g=$(echo "${all[guard]}" | median $c)
  n=$(echo "${all[noguard]}" | median $c)
  awk -v g="$g" -v n="$n" -v c="$c" 'BEGIN { split("create rename untar", w, " "); printf "%s: guard/no guard %.2fx (+%.1f us per file)\n", w[c], g / n, g - n }'
done
