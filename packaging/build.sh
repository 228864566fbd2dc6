#!/usr/bin/env bash
# Builds the packages: target/packages/agent-sandbox_VERSION-1_amd64.deb (cargo-deb) and
# target/packages/agent-sandbox-VERSION-1.x86_64.rpm (cargo-generate-rpm), from one staging
# directory, target/packaging:
#
#   bin/          the release launcher and the static stub (stub/release.sh), stripped
#   slurm/        the SPANK plugin (make -C slurm-plugins, against this host's slurm/spank.h)
#   man/          man pages, generated from the launcher's clap definition (xtask), gzipped
#   completions/  bash, zsh and fish completions, generated the same way
#
# What goes where in each package: [package.metadata.deb] and [package.metadata.generate-rpm]
# in Cargo.toml; docs/admin/install.md lists it. The builds are cargo's: a release build
# already made (tests/run.sh makes one) is reused.
#
#   packaging/build.sh          # both
#   packaging/build.sh deb      # or only one
set -euo pipefail
cd "$(dirname "$0")/.."
want=${1:-all}
case $want in all | deb | rpm) ;; *)
  echo "usage: packaging/build.sh [deb|rpm]" >&2
  exit 2
  ;;
esac

# The packaging tools, at the versions this was made with (cargo install is a no-op when the
# version is there already; --locked: their own Cargo.lock, as their authors tested them).
tool() { # tool CRATE VERSION
  local have
  have=$(cargo install --list 2>/dev/null | sed -n "s/^$1 v\([^:]*\):$/\1/p")
  if [ "$have" != "$2" ]; then
    echo "packaging/build.sh: installing $1 $2 (cargo install)"
    cargo install --locked --quiet "$1" --version "$2"
  fi
}
[ "$want" = rpm ] || tool cargo-deb 3.8.0
[ "$want" = deb ] || tool cargo-generate-rpm 0.21.1

cargo build --release --bin agent-sandbox
stub/release.sh
make -s -C slurm-plugins
release=${CARGO_TARGET_DIR:-target}/release

stage=target/packaging
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/slurm"
for b in agent-sandbox agent-sandbox-stub; do
  strip -o "$stage/bin/$b" "$release/$b"
done
strip --strip-unneeded -o "$stage/slurm/agent_sandbox.so" slurm-plugins/agent_sandbox.so
# Man pages and completions from the same clap Command the launcher parses with (xtask/).
cargo run --quiet -p xtask -- dist "$stage"
gzip -9n "$stage"/man/*.1

mkdir -p target/packages
if [ "$want" != rpm ]; then
  cargo deb -p agent-sandbox --no-build --no-strip -o target/packages/
fi
if [ "$want" != deb ]; then
  cargo generate-rpm -p . -o target/packages/
fi
ls -l target/packages/
