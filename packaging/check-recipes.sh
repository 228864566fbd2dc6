#!/usr/bin/env bash
# Checks the HPC recipes in packaging/ as far as this machine can without Spack or EasyBuild
# (docs/admin/install.md, "Spack, EasyBuild and Lmod", says what is and is not checked):
#   Spack      package.py imported against a stand-in of Spack's package API (and
#              spack-packages' CargoPackage when SPACK_PACKAGES names a checkout of it), its
#              install method run with recording stand-ins (packaging/check/spack_recipe.py)
#   EasyBuild  the easyconfig's Python syntax, its crates and checksums against Cargo.lock
#   Lmod       the modulefile's Lua syntax, and a load and unload with Lmod (Debian: lmod)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 packaging/check/spack_recipe.py ${SPACK_PACKAGES:+"$SPACK_PACKAGES"}

for eb in packaging/easybuild/*.eb; do
  python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$eb"
done
python3 packaging/easybuild/crates.py --check

modulefile=packaging/lmod/agent-sandbox/0.1.0.lua
luac5.4 -p "$modulefile" || luac -p "$modulefile"
lmod_init=/usr/share/lmod/lmod/init/bash
[ -f "$lmod_init" ] || { echo "packaging/check-recipes.sh: no Lmod ($lmod_init); fix: apt-get install lmod" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ok/agent-sandbox" "$tmp/missing/agent-sandbox" "$tmp/root/bin"
touch "$tmp/root/bin/agent-sandbox"
sed "s#^local root = .*#local root = \"$tmp/root\"#" "$modulefile" >"$tmp/ok/agent-sandbox/0.1.0.lua"
sed "s#^local root = .*#local root = \"$tmp/nothing\"#" "$modulefile" >"$tmp/missing/agent-sandbox/0.1.0.lua"
# shellcheck disable=SC2016 # expanded by the inner shell
out=$(env -u MANPATH bash -c '. "$1"; module use "$2/ok"; module load agent-sandbox || exit 1
  echo "PATH=$PATH"; echo "MANPATH=$MANPATH"; module unload agent-sandbox; echo "after=$PATH"' sh "$lmod_init" "$tmp" 2>&1) ||
  { echo "packaging/check-recipes.sh: module load agent-sandbox failed: $out" >&2; exit 1; }
grep -q "^PATH=$tmp/root/bin:" <<<"$out" && grep -qx "MANPATH=$tmp/root/share/man::" <<<"$out" &&
  ! grep -q "^after=.*$tmp/root/bin" <<<"$out" ||
  { echo "packaging/check-recipes.sh: the modulefile set the environment wrongly: $out" >&2; exit 1; }
# shellcheck disable=SC2016
if out=$(bash -c '. "$1"; module use "$2/missing"; module load agent-sandbox' sh "$lmod_init" "$tmp" 2>&1) ||
  ! grep -q "set .root. in this" <<<"$out"; then
  echo "packaging/check-recipes.sh: the modulefile loaded without a launcher at root: $out" >&2
  exit 1
fi
echo "packaging/check-recipes.sh: the Lmod modulefile loads, sets PATH and MANPATH, unloads, and refuses a root without the launcher"
