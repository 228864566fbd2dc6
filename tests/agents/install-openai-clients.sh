#!/usr/bin/env bash
# Install pinned versions of the agent CLIs that speak OpenAI-style APIs, for the
# end-to-end tests under tests/agents/. Root only; idempotent: anything already
# installed at the pinned version is skipped.
#
#   npm  -> /opt/agent-sandbox-test/agents   (binaries in node_modules/.bin)
#   pip  -> /opt/agent-sandbox-test/aider-venv (Debian's /usr/bin/python3)
#
# Everything is made world-readable so the unprivileged test user (asbtest) can
# run it, inside and outside the jail (/opt is on the jail's read-only list).
set -euo pipefail

CODEX_VERSION=0.169.0
OPENCODE_VERSION=1.18.33
PI_VERSION=0.73.1
AIDER_VERSION=0.86.2

PREFIX=${AGENT_TEST_PREFIX:-/opt/agent-sandbox-test}
NPM_DIR=$PREFIX/agents
VENV=$PREFIX/aider-venv
PY=${AIDER_PYTHON:-/usr/bin/python3}

if [ "$(id -u)" != 0 ]; then
    echo "install-openai-clients.sh: must run as root" >&2
    exit 1
fi

umask 022
mkdir -p "$NPM_DIR"

# Version of an npm package installed under $NPM_DIR, or empty.
npm_have() {
    local pj="$NPM_DIR/node_modules/$1/package.json"
    [ -f "$pj" ] && node -p "require('$pj').version" 2>/dev/null || true
}

want=()
[ "$(npm_have @openai/codex)" = "$CODEX_VERSION" ] || want+=("@openai/codex@$CODEX_VERSION")
[ "$(npm_have opencode-ai)" = "$OPENCODE_VERSION" ] || want+=("opencode-ai@$OPENCODE_VERSION")
[ "$(npm_have @mariozechner/pi-coding-agent)" = "$PI_VERSION" ] || want+=("@mariozechner/pi-coding-agent@$PI_VERSION")

if [ ${#want[@]} -gt 0 ]; then
    echo "npm install: ${want[*]}"
    # --save-exact pins in the prefix's package.json too; no audit/fund chatter.
    npm install --prefix "$NPM_DIR" --save-exact --no-audit --no-fund "${want[@]}"
else
    echo "npm clients present: codex $CODEX_VERSION, opencode $OPENCODE_VERSION, pi $PI_VERSION"
fi

# aider: a venv on Debian's python (not a pyenv shim, which asbtest cannot read).
if [ -x "$VENV/bin/aider" ] && \
   [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("aider-chat"))' 2>/dev/null)" = "$AIDER_VERSION" ]; then
    echo "aider-chat $AIDER_VERSION present"
else
    if ! "$PY" -c 'import ensurepip' 2>/dev/null; then
        echo "install-openai-clients.sh: $PY lacks venv/ensurepip (apt-get install python3-venv)" >&2
        exit 1
    fi
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install --disable-pip-version-check -q "aider-chat==$AIDER_VERSION"
fi

chmod -R a+rX "$NPM_DIR" "$VENV"
echo "done: $NPM_DIR/node_modules/.bin $VENV/bin/aider"
