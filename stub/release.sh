#!/usr/bin/env bash
# Builds the release stub as sites install it, at target/release/agent-sandbox-stub (next to
# the release launcher, where the launcher looks for it): static, position-independent (ASLR
# kept), and linked against musl when this machine can, else glibc.
#
# Why musl: every Slurm call inside the jail starts this binary, and glibc's start asks the
# processor about itself with `cpuid` some seventy times (string functions, cache sizes). In a
# virtual machine each `cpuid` traps to the hypervisor: 4 µs apiece on the test VM, so 0.3 ms
# of every call before the stub runs a line of its own (docs/performance.md). musl's start asks
# nothing. The stub needs nothing glibc has that musl lacks: no user or host lookups (NSS).
#
#   stub/release.sh            # needs rustup's x86_64-unknown-linux-musl target and musl-gcc
#                              # (Debian: musl-tools); without them, the glibc build, said so
set -euo pipefail
cd "$(dirname "$0")/.."
musl=x86_64-unknown-linux-musl
have_musl() {
  command -v musl-gcc >/dev/null 2>&1 || return 1
  rustup target list --installed 2>/dev/null | grep -qx "$musl" && return 0
  # The target's standard library comes from rustup's server; it may be unreachable.
  command -v rustup >/dev/null 2>&1 && timeout 300 rustup target add "$musl" >/dev/null 2>&1
}
mkdir -p target/release
if [ "$(uname -m)" = x86_64 ] && have_musl; then
  # ring (the audit's SHA-256, through the chaperon crate) has C parts: musl's compiler builds them.
  CC_x86_64_unknown_linux_musl=musl-gcc cargo build --release -p agent-sandbox-stub --target "$musl"
  install -m 0755 "target/$musl/release/agent-sandbox-stub" target/release/agent-sandbox-stub
  echo "stub/release.sh: target/release/agent-sandbox-stub: static, musl"
else
  echo "stub/release.sh: no musl toolchain here (rustup target $musl, musl-gcc): building the stub against glibc," \
    "statically; every Slurm call pays glibc's start (0.3 ms on a VM)" >&2
  cargo rustc --release -p agent-sandbox-stub --bin agent-sandbox-stub -- -C target-feature=+crt-static
fi
