#!/usr/bin/env bash
# Startup benchmark (not a test): agent-sandbox's full default jail against
# `bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all --die-with-parent true`,
# interleaved in one run; prints medians, the ratio, peak RSS and the cost of 50 sessions.
# As root it installs bubblewrap (bench only: the product does not use it) and runs the
# measurements as the unprivileged test user.
set -euo pipefail
cd "$(dirname "$0")/.."
user="${BENCH_USER:-asbtest}"
if [ "$(id -u)" = 0 ]; then
  command -v bwrap >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap
  id "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
fi
cargo build --release --quiet --bin agent-sandbox
bin="$(pwd)/target/release/agent-sandbox"
chmod o+rx . target target/release 2>/dev/null || true
echo "agent-sandbox $("$bin" --version | cut -d' ' -f2), $(bwrap --version), kernel $(uname -r), $(nproc) cores"
if [ "$(id -u)" = 0 ]; then
  home=$(getent passwd "$user" | cut -d: -f6)
  proj="$home/bench-project"
  install -d -o "$user" -g "$(id -gn "$user")" "$proj"
  cd "$proj"
  exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups env -i HOME="$home" USER="$user" PATH=/usr/bin:/bin RUNS="${RUNS:-200}" GAP_MS="${GAP_MS:-0}" \
    python3 "$OLDPWD/benches/startup.py" "$bin"
else
  exec python3 benches/startup.py "$bin"
fi
