#!/usr/bin/env bash
# Network-filesystem bench (not a test): the test user's home and project on slowfs (a FUSE
# passthrough that waits DELAY_US, 1000 by default, before each metadata request: a stand-in
# for NFS, Lustre or GPFS, tools/slowfs) against the same on the local disk, in one run:
# `run -- true` startup (and bwrap's line from benches/startup.py), `exec --job` on the node
# side, Slurm calls from inside (with the test cluster up), the git guard's file work; ratios
# and the metadata requests each makes on the home and the project trees. As root: it mounts
# in mount namespaces of its own (the user's real home is untouched) and measures as the
# unprivileged test user.
#
#   sudo benches/netfs.sh                   # DELAY_US=1000 RUNS=40 FILES=300 SKIP=startup,job,slurm,guard BLOCK_PAUSE=2
#                                           # TRACE=DIR: one start's requests, a line each, per tree
#                                           # RUNTIME=0: no XDG_RUNTIME_DIR (the sessions' sockets on the home)
#                                           # THREADS=8: requests slowfs answers at once (nfsd's default)
#                                           # PLUS=0: plain listings (default: READDIRPLUS, as NFS)
set -euo pipefail
cd "$(dirname "$0")/.."
user="${BENCH_USER:-asbtest}"
if [ "$(id -u)" != 0 ]; then
  echo "benches/netfs.sh: run as root (it mounts slowfs in namespaces of its own and drops to $user)" >&2
  exit 1
fi
need=()
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
if [ "${#need[@]}" -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
id "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
cargo build --release --quiet --bin agent-sandbox
cargo build --release --quiet -p slowfs
chmod o+rx . target target/release 2>/dev/null || true
exec python3 benches/netfs.py "$(pwd)/target/release/agent-sandbox" "$(pwd)/target/release/slowfs" \
  "${WORK:-/var/tmp/asb-netfs.$$}"
