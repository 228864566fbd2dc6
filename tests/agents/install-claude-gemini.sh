#!/usr/bin/env bash
# Install pinned Claude Code and Gemini CLI for the agent end-to-end tests.
#
# Root only. Idempotent: skips a package whose pinned version is already
# installed. Uses only the npm registry.
#
#   PREFIX (default /opt/agent-sandbox-test/agents-b)
#     $PREFIX/node_modules/.bin/claude   -> native ELF binary (no node needed)
#     $PREFIX/node_modules/.bin/gemini   -> node script (node >= 20; /usr/bin/node)
#
# Claude Code 2.1.x declares engines.node >= 22, but the npm package is only a
# wrapper: its postinstall (install.cjs, runs fine on node 20) copies the
# native binary from the optional dependency @anthropic-ai/claude-code-linux-x64
# over bin/claude.exe. npm only warns (EBADENGINE), so node 20 is enough and no
# node 22 is needed. If the postinstall did not run (install scripts disabled),
# we copy the native binary ourselves.
set -euo pipefail

CLAUDE_VERSION="${CLAUDE_VERSION:-2.1.332}"
GEMINI_VERSION="${GEMINI_VERSION:-0.61.0}"
PREFIX="${PREFIX:-/opt/agent-sandbox-test/agents-b}"

if [ "$(id -u)" -ne 0 ]; then
    echo "install-claude-gemini.sh: run as root" >&2
    exit 1
fi
command -v npm >/dev/null || { echo "npm not found" >&2; exit 1; }

umask 022
mkdir -p "$PREFIX"
chmod 755 "$PREFIX"
BIN="$PREFIX/node_modules/.bin"

installed_version() { # $1 = package name
    local pj="$PREFIX/node_modules/$1/package.json"
    [ -f "$pj" ] || return 0
    node -e 'process.stdout.write(require(process.argv[1]).version)' "$pj" 2>/dev/null || true
}

want=()
if [ "$(installed_version @anthropic-ai/claude-code)" != "$CLAUDE_VERSION" ] ||
   ! "$BIN/claude" --version 2>/dev/null | grep -q "^$CLAUDE_VERSION "; then
    want+=("@anthropic-ai/claude-code@$CLAUDE_VERSION")
fi
if [ "$(installed_version @google/gemini-cli)" != "$GEMINI_VERSION" ] ||
   [ "$("$BIN/gemini" --version 2>/dev/null)" != "$GEMINI_VERSION" ]; then
    want+=("@google/gemini-cli@$GEMINI_VERSION")
fi

if [ ${#want[@]} -eq 0 ]; then
    echo "claude $CLAUDE_VERSION and gemini $GEMINI_VERSION already in $PREFIX"
else
    echo "installing ${want[*]} into $PREFIX"
    npm install --prefix "$PREFIX" --save-exact --no-fund --no-audit \
        --foreground-scripts "${want[@]}"
fi

# Claude Code's native binary: the postinstall normally put it in place.
CC="$PREFIX/node_modules/@anthropic-ai/claude-code"
NATIVE="$PREFIX/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
if ! "$BIN/claude" --version >/dev/null 2>&1; then
    if [ -x "$NATIVE" ]; then
        echo "postinstall did not run: copying native claude binary"
        cp -f "$NATIVE" "$CC/bin/claude.exe"
        chmod 755 "$CC/bin/claude.exe"
    fi
fi

# World-readable, root-owned.
chmod -R a+rX "$PREFIX"

echo "claude: $("$BIN/claude" --version)"
echo "gemini: $("$BIN/gemini" --version)"
