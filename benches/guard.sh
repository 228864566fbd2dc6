#!/usr/bin/env bash
# What the git guard costs (not a test): the same file work inside the default jail with the
# guard on and off (`filesystem.nested_git = true`), interleaved in one run, and outside any
# jail. Work: create N files (open O_CREAT|O_WRONLY, write, close), then rename each, then
# unpack a tar of them (what a build, `pip install` or `git checkout` does), then remove a
# tree of N files in N/10 directories (`rm -rf`: each rmdir is trapped, each unlink is not),
# then `git init` + `git add` + `git commit` of the N files (per file). Prints medians and
# the ratios. As root it runs as the unprivileged test user.
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
import shutil, subprocess
for i in range(0, n, 10):
    os.mkdir("%s/t%d" % (d, i))
    for k in range(10):
        open("%s/t%d/f%d" % (d, i, k), "w").close()
t4 = time.perf_counter()
shutil.rmtree(d)
t5 = time.perf_counter()
g = ["git", "-c", "user.name=b", "-c", "user.email=b@example.org", "-C", d + "x"]
subprocess.run(g + ["init", "-q"], check=True)
subprocess.run(g + ["add", "."], check=True)
subprocess.run(g + ["commit", "-qm", "bench"], check=True)
t6 = time.perf_counter()
print("%.1f %.1f %.1f %.1f %.1f" % ((t1 - t0) * 1e6 / n, (t2 - t1) * 1e6 / n, (t3 - t2) * 1e6 / n, (t5 - t4) * 1e6 / n, (t6 - t5) * 1e6 / n))
shutil.rmtree(d + "x"); os.remove(d + ".tar")'
printf '[filesystem]\nnested_git = true\n' > "$HOME/bench-guard-off.toml"
declare -A all
for _ in $(seq "$rounds"); do
  all[direct]+="$(python3 -c "$work" "$files");"
  all[guard]+="$("$bin" -q run -- python3 -c "$work" "$files");"
  all[noguard]+="$("$bin" -q --policy "$HOME/bench-guard-off.toml" run -- python3 -c "$work" "$files");"
done
median() { tr ';' '\n' | awk -v c="$1" 'NF { print $c }' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "git guard: $files files, $rounds rounds, kernel $(uname -r), $(nproc) cores; microseconds per file (median)"
printf '%-28s %10s %10s %10s %10s %10s\n' "" create rename untar rm-tree git-commit
for k in direct noguard guard; do
  printf '%-28s %10s %10s %10s %10s %10s\n' "$k" "$(echo "${all[$k]}" | median 1)" "$(echo "${all[$k]}" | median 2)" \
    "$(echo "${all[$k]}" | median 3)" "$(echo "${all[$k]}" | median 4)" "$(echo "${all[$k]}" | median 5)"
done
for c in 1 2 3 4 5; do
  g=$(echo "${all[guard]}" | median $c)
  n=$(echo "${all[noguard]}" | median $c)
  awk -v g="$g" -v n="$n" -v c="$c" 'BEGIN { split("create rename untar rm-tree git-commit", w, " "); printf "%s: guard/no guard %.2fx (+%.1f us per file)\n", w[c], g / n, g - n }'
done
