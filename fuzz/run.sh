#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 5), on the stable toolchain without a
# sanitizer (`-s none`), from its seeds and kept corpus; a crash fails the run and leaves its
# input under fuzz/artifacts/. `.ci/run` calls it with a few seconds, so a target that no
# longer builds, or finds a crash at once, is caught; longer runs: `fuzz/run.sh 300 gitconfig`.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-5}"
shift || true
command -v cargo-fuzz >/dev/null 2>&1 || { echo "fuzz/run.sh: cargo-fuzz is not installed (cargo install cargo-fuzz --locked)" >&2; exit 1; }
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
# Optimized by default; FUZZ_DEV=1 builds unoptimized (faster to build: CI's short runs).
mode=(-O)
[ "${FUZZ_DEV:-}" = 1 ] && mode=(--dev)
# The kept corpora (minimized with `cargo fuzz cmin`) travel as one archive; a checkout
# unpacks it once, and later runs grow corpus/ in place.
if [ -f corpus.tar.xz ] && [ ! -e corpus/.unpacked ]; then
  tar -xJf corpus.tar.xz
  touch corpus/.unpacked
fi
# One build of all of them, then the runs.
cargo fuzz build -s none "${mode[@]}" >/dev/null
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  seeds=()
  [ -d "seeds/$t" ] && seeds=("seeds/$t")
  printf 'fuzz/run.sh: %-16s ' "$t"
  out=$(cargo fuzz run -s none "${mode[@]}" "$t" "corpus/$t" "${seeds[@]}" -- -max_total_time="$secs" -rss_limit_mb=2048 2>&1) || {
    echo "FAILED"
    echo "$out" | tail -40
    exit 1
  }
  echo "$out" | grep -Eo 'Done [0-9]+ runs in [0-9]+ second\(s\)' | tail -1
done
