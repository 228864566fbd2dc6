#!/usr/bin/env bash
# Runs every test of agent-sandbox: format and lint checks, unit tests, and the integration
# tests that run the real binary as an unprivileged user and assert from inside the jail.
# As root on Debian/Ubuntu it first installs what the tests need and creates the test users;
# the Rust tests then drop to those users for every launch.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ]; then
  need=()
  command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
  command -v script >/dev/null 2>&1 || need+=(bsdutils)
  command -v ps >/dev/null 2>&1 || need+=(procps)
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
  command -v git >/dev/null 2>&1 || need+=(git)
  command -v curl >/dev/null 2>&1 || need+=(curl ca-certificates)
  command -v openssl >/dev/null 2>&1 || need+=(openssl)
  command -v dnsmasq >/dev/null 2>&1 || need+=(dnsmasq-base)
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  command -v python3 >/dev/null 2>&1 || need+=(python3)
  if [ "${#need[@]}" -gt 0 ]; then
    echo "tests/run.sh: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=600 "${need[@]}"
  fi
  for u in asbtest asbother; do
    id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"
  done
  # The Slurm test cluster (tests/cluster): installed from Debian's packages if missing,
  # started (or left running if it already is) for tests/slurm.rs.
  tests/cluster/install.sh
  tests/cluster/start.sh --user asbtest --two-nodes --no-selftest
  # Distributions ship /dev/net/tun as 0666; some hosts (this CI's) have 0600, which makes
  # the filtered network mode fall back. `agent-sandbox doctor` names this too.
  chmod 0666 /dev/net/tun 2>/dev/null || true
  # The test user must be able to reach the built binary and the test helpers.
  chmod o+rx . 2>/dev/null || true
  mkdir -p target && chmod o+rx target
else
  echo "tests/run.sh: not root: the integration tests will be skipped (run as root to drop to the test user)" >&2
fi

cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
