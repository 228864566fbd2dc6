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
  # Agents bring their own sandboxes (Claude Code's is bubblewrap): tests/agents.rs turns them
  # on and checks that the profiles keep every tool call working.
  command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
  # slurm/spank.h, for the SPANK plugin (slurm-plugins/).
  [ -f /usr/include/slurm/spank.h ] || need+=(libslurm-dev make)
  # The PMIx library Slurm's mpi/pmix plugin loads (tests/slurm.rs launches with --mpi=pmix).
  [ -e /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so ] || need+=(libpmix-dev)
  # Open MPI's mpirun and mpi4py: tests/slurm.rs runs an MPI program across both nodes over
  # the session network.
  [ -e /usr/lib/python3/dist-packages/mpi4py ] || need+=(python3-mpi4py openmpi-bin)
  # newgidmap, which maps the user's supplementary groups into the jail (tests/jail.rs).
  command -v newgidmap >/dev/null 2>&1 || need+=(uidmap)
  # musl's C compiler: the release stub is linked statically against musl (stub/release.sh).
  command -v musl-gcc >/dev/null 2>&1 || need+=(musl-tools)
  # The everyday-work corpus (tests/everyday): what agents run all day, inside and outside.
  command -v make >/dev/null 2>&1 || need+=(make)
  command -v rg >/dev/null 2>&1 || need+=(ripgrep)
  command -v jq >/dev/null 2>&1 || need+=(jq)
  command -v zip >/dev/null 2>&1 || need+=(zip)
  command -v unzip >/dev/null 2>&1 || need+=(unzip)
  # vim, the editor users run on a login node (tests/agent_homes.rs saves a `.env` with it).
  command -v vim.basic >/dev/null 2>&1 || need+=(vim)
  /usr/bin/python3 -c 'import pytest' 2>/dev/null || need+=(python3-pytest)
  /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
  # libgit2, as `cargo new` makes repositories with it (tests/everyday/cases/libgit2-scaffold.sh).
  /usr/bin/python3 -c 'import pygit2' 2>/dev/null || need+=(python3-pygit2)
  # fusermount3, for slowfs: tests/netfs.rs runs sessions on a home served over FUSE.
  command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
  if [ "${#need[@]}" -gt 0 ]; then
    echo "tests/run.sh: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=600 "${need[@]}"
  fi
  for u in asbtest asbother; do
    id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"
  done
  # Real Slurm workflow tools for tests/workflow.rs, run unchanged inside the jail: a venv
  # under /opt (on the jail's read allow-list, so the jail sees it read-only), world-readable,
  # built from Debian's python3 (not a per-user one the test user cannot read). Skipped when
  # already there at these versions. Before the cluster starts: its two-node veth takes a
  # TEST-NET-3 /24 that can shadow the package registry's address on some hosts.
  wf_venv=/opt/agent-sandbox-test/venv
  wf_pins=(submitit==1.5.4 snakemake==9.27.1 snakemake-executor-plugin-slurm==2.8.0
    snakemake-executor-plugin-slurm-jobstep==0.6.1 dask-jobqueue==0.9.0 dask==2026.8.0
    distributed==2026.8.0)
  wf_have=$("$wf_venv/bin/python" -m pip freeze 2>/dev/null | grep -cixF -f <(printf '%s\n' "${wf_pins[@]}") || true)
  if [ "$wf_have" != "${#wf_pins[@]}" ]; then
    if ! /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o DPkg::Lock::Timeout=600 python3-venv
    fi
    echo "tests/run.sh: installing ${wf_pins[*]} into $wf_venv"
    [ -x "$wf_venv/bin/python" ] || /usr/bin/python3 -m venv "$wf_venv"
    (umask 022 && "$wf_venv/bin/python" -m pip install -q --disable-pip-version-check "${wf_pins[@]}")
    chmod -R a+rX /opt/agent-sandbox-test
  fi
  # The same tools in the Slurm 24.11 cluster's Debian 13 root, at the same path, built from the
  # root's own Python (3.13), for tests/workflow.rs's `on_24_11_` runs: the root first (cached;
  # about 80 s when its package list changes), then the venv (about 30 s). pip there is given a
  # copy of this host's CA bundle (in /tmp, which in-2411.sh mounts), so a TLS proxy this host
  # trusts is trusted there too.
  tests/cluster/install.sh 24.11
  r24_have=$(tests/cluster/in-2411.sh -- "$wf_venv/bin/python" -m pip freeze 2>/dev/null |
    grep -cixF -f <(printf '%s\n' "${wf_pins[@]}") || true)
  if [ "$r24_have" != "${#wf_pins[@]}" ]; then
    echo "tests/run.sh: installing ${wf_pins[*]} into $wf_venv in the 24.11 root"
    r24_ca=$(mktemp -d /tmp/asb-2411-ca.XXXXXX)
    install -m 0644 /etc/ssl/certs/ca-certificates.crt "$r24_ca/ca.crt"
    chmod 0755 "$r24_ca"
    # shellcheck disable=SC2016 # the inner shell expands them
    tests/cluster/in-2411.sh -- env PIP_CERT="$r24_ca/ca.crt" SSL_CERT_FILE="$r24_ca/ca.crt" \
      REQUESTS_CA_BUNDLE="$r24_ca/ca.crt" PIP_FIND_LINKS= sh -c 'umask 022 && v=$1 && shift &&
        { [ -x "$v/bin/python" ] || python3 -m venv "$v"; } &&
        "$v/bin/python" -m pip install -q --disable-pip-version-check "$@" && chmod -R a+rX "$v"' \
      sh "$wf_venv" "${wf_pins[@]}"
    rm -rf "$r24_ca"
  fi
  # The real agent CLIs for tests/agents.rs, at pinned versions from the npm registry and
  # PyPI (Node.js 20 from the machine; skipped when present).
  if command -v npm >/dev/null 2>&1; then
    tests/agents/install-openai-clients.sh
    tests/agents/install-claude-gemini.sh
  else
    echo "tests/run.sh: no npm here: the agent CLI tests will fail (they need Node.js >= 20 and npm)" >&2
  fi
  # The Slurm test cluster (tests/cluster): installed from Debian's packages if missing,
  # started (or left running if it already is) for tests/slurm.rs.
  tests/cluster/install.sh
  # The SPANK plugin on the test cluster's nodes (one machine): every task of a job the
  # chaperon tagged must enter the jail with the test build of agent-sandbox. slurmstepd and
  # sbatch read plugstack.conf at each use, but slurmd learns at its start whether a plugin
  # has a job prolog (the plugin's marks sandboxed jobs): a changed file restarts the cluster
  # (the one-host cluster takes a copy of it at its start).
  make -s -C slurm-plugins
  mkdir -p /etc/slurm
  plugstack="required $(pwd)/slurm-plugins/agent_sandbox.so exe=$(pwd)/target/debug/agent-sandbox"
  if [ "$(cat /etc/slurm/plugstack.conf 2>/dev/null)" != "$plugstack" ]; then
    echo "$plugstack" > /etc/slurm/plugstack.conf
    tests/cluster/stop.sh >/dev/null 2>&1 || true
  fi
  # --one-host: a second, small cluster beside it whose controller and node are this host on
  # loopback (a workstation's Slurm), for the session network's tests there (about 1.5 s).
  tests/cluster/start.sh --user asbtest --two-nodes --one-host --no-selftest
  # Slurm 24.11 with auth/slurm and sackd, in a Debian 13 root of its own (tests/cluster/README.md;
  # tests/slurm2411.rs runs there): built once per machine (about 40 s), then about 5 s.
  tests/cluster/start.sh 24.11 --user asbtest --user asbother --spank "$(pwd)/target/debug/agent-sandbox" --no-selftest
  # Distributions ship /dev/net/tun as 0666; some hosts (this CI's) have 0600, which makes
  # the filtered network mode fall back. `agent-sandbox doctor` names this too.
  chmod 0666 /dev/net/tun 2>/dev/null || true
  # The test user must be able to reach the built binary and the test helpers.
  chmod o+rx . 2>/dev/null || true
  mkdir -p target && chmod o+rx target
else
  echo "tests/run.sh: not root: the integration tests will be skipped (run as root to drop to the test user)" >&2
fi

# A CI run builds once from a clean tree: incremental state would only take disk (1.7 GiB).
[ -z "${CI:-}" ] || export CARGO_INCREMENTAL=0
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# The release build: what the memory test measures (tests/many.rs, fifty sessions), and the
# Slurm stub as sites install it, static and linked against musl (tests/slurm.rs checks it).
cargo build --release --bin agent-sandbox
stub/release.sh
chmod o+rx target/release 2>/dev/null || true
# slowfs (tools/slowfs), the network-filesystem stand-in tests/netfs.rs mounts: a binary of
# its own next to the debug launcher (`cargo test` builds only its unit tests).
cargo build -p slowfs
cargo test --workspace
# The stub's own tests again, against the release stub (built for another target and libc).
AGENT_SANDBOX_STUB_UNDER_TEST="$(pwd)/target/release/agent-sandbox-stub" cargo test -p agent-sandbox-stub --test stub
# Every fuzz target, a few seconds each (unoptimized: quicker to build): one that no longer
# builds, or that crashes at once on its seeds and corpus, fails the run. Longer runs: fuzz/run.sh.
if ! command -v cargo-fuzz >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  cargo install cargo-fuzz --locked --quiet
fi
if command -v cargo-fuzz >/dev/null 2>&1; then
  FUZZ_DEV=1 fuzz/run.sh "${FUZZ_SECONDS:-3}"
else
  echo "tests/run.sh: cargo-fuzz is not installed: the fuzz targets were not run" >&2
  [ -z "${CI:-}" ] || exit 1
fi
