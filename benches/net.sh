#!/usr/bin/env bash
# Network benchmark (not a test): the `filtered` mode's userspace stack against the host's own
# network (`direct`) and pasta (`pasta --config-net`, the usual rootless userspace stack),
# measured interleaved in one run against the test hosts of tests/nethost:
#   - bulk TCP throughput with iperf3, jail->world and world->jail (-R), 1 and 4 streams
#   - connection rate: CONNS sequential connect / send 1 byte / recv 1 byte / close
# Prints medians, min-max and the ratios filtered/pasta and filtered/direct.
#
# Run as root: it installs iperf3 and passt if missing, makes the netns, starts the servers in
# it, and runs every candidate as the unprivileged user $BENCH_USER (asbtest), like
# benches/startup.sh. It does not build: build first (cargo build --release) or point BIN at
# a binary. If BIN is missing or its runs fail, the filtered column says so and the rest runs.
#
#   RUNS=3 SECS=5 CONNS=2000 BIN=target/release/agent-sandbox benches/net.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

RUNS="${RUNS:-3}"
SECS="${SECS:-5}"
CONNS="${CONNS:-2000}"
BIN="${BIN:-target/release/agent-sandbox}"
user="${BENCH_USER:-asbtest}"
SERVER=198.51.100.2
IPERF_PORT=5201
CONN_PORT=7000 # not serve.py's 7777: the bench starts its own, lighter echo server
BULK_PORT=7002
BULK_MB="${BULK_MB:-2048}"

if [ "$(id -u)" != 0 ]; then
  echo "benches/net.sh: run as root (it makes a network namespace and drops to $user)" >&2
  exit 1
fi
case "$BIN" in /*) ;; *) BIN="$repo/$BIN" ;; esac

need=()
command -v iperf3 >/dev/null 2>&1 || need+=(iperf3)
command -v pasta >/dev/null 2>&1 || need+=(passt)
if [ "${#need[@]}" -gt 0 ]; then
  echo "benches/net.sh: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "${need[@]}" >/dev/null
fi
id "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
# pasta and the filtered mode open /dev/net/tun as the user; distributions ship it 0666.
chmod 0666 /dev/net/tun
# The user must reach the built binary (as in benches/startup.sh); a BIN elsewhere must
# already be reachable.
chmod o+rx . target target/release 2>/dev/null || true

# A project directory the user owns (the jail's writable tree), which also holds the driver.
work=$(mktemp -d /tmp/asb-netbench.XXXXXX)
chown "$user:$(id -gn "$user")" "$work"
chmod 0755 "$work"
pids=()
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  tests/nethost/setup.sh down
  sysctl -qw net.ipv4.tcp_tw_reuse="${tw_reuse:-2}"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

tests/nethost/setup.sh up
# Thousands of short connections to one server exhaust the ephemeral ports (TIME_WAIT) for
# every candidate alike; reusing them keeps the connection test about the stacks.
tw_reuse=$(sysctl -n net.ipv4.tcp_tw_reuse)
sysctl -qw net.ipv4.tcp_tw_reuse=1

# Servers in the netns, as root. `ip netns exec` execs the command, so $! is the server.
ip netns exec asbnet iperf3 -s -B "$SERVER" -p "$IPERF_PORT" >"$work/iperf3-server.log" 2>&1 &
pids+=($!)
# Connection-rate echo server: one thread, non-blocking, so that its own cost per
# connection (no thread per connection, unlike serve.py) stays small next to the stacks'.
ip netns exec asbnet python3 -c '
import selectors, socket, sys
sel = selectors.DefaultSelector()
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2])))
ls.listen(1024)
ls.setblocking(False)
sel.register(ls, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        s = key.fileobj
        if s is ls:
            try:
                c, _ = ls.accept()
            except BlockingIOError:
                continue
            c.setblocking(False)
            sel.register(c, selectors.EVENT_READ)
            continue
        try:
            data = s.recv(65536)
            if data:
                s.send(data)  # 1 byte at a time: never blocks
                continue
        except OSError:
            pass
        sel.unregister(s)
        s.close()
' "$SERVER" "$CONN_PORT" >"$work/echo-server.log" 2>&1 &
pids+=($!)

# Bulk source for the test every candidate can run, proxied included (iperf3 cannot use a
# proxy): each connection gets BULK_MB MiB of zeros, then EOF.
ip netns exec asbnet python3 -c '
import socket, sys, threading
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2])))
ls.listen(64)
block = bytes(1 << 20)
def serve(c):
    try:
        for _ in range(int(sys.argv[3])):
            c.sendall(block)
    except OSError:
        pass
    c.close()
while True:
    c, _ = ls.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
' "$SERVER" "$BULK_PORT" "$BULK_MB" >"$work/bulk-server.log" 2>&1 &
pids+=($!)

# Wait for the listeners (looking, not connecting: a bare connect upsets iperf3 -s).
for _ in $(seq 1 100); do
  n=$(ip netns exec asbnet ss -Hltn "( sport = :$IPERF_PORT or sport = :$CONN_PORT or sport = :$BULK_PORT )" | wc -l)
  [ "$n" -ge 3 ] && break
  sleep 0.05
done
if [ "$n" -lt 3 ]; then
  echo "benches/net.sh: servers did not start" >&2
  cat "$work"/*.log >&2
  exit 1
fi

# The pasta version matters: Debian 12's (2023-03) stalls on single-stream jail->world bulk
# transfers (retransmits, seconds at 0 bit/s) here, which flatters any comparison with it.
pasta_version=$(pasta --version 2>&1 | head -1)
# Debian's passt package says "unknown version": add the package's.
case "$pasta_version" in
  *unknown*) pasta_version="$pasta_version (package $(dpkg-query -W -f='${Version}' passt 2>/dev/null || echo '?'))" ;;
esac
if [ -x "$BIN" ]; then
  asb_version=$("$BIN" --version 2>&1 | head -1)
else
  asb_version="missing: $BIN"
fi
echo "agent-sandbox: $asb_version"
echo "pasta: $pasta_version"
echo "$(iperf3 --version | head -1), kernel $(uname -r), $(nproc) cores"
echo "$RUNS rounds, iperf3 ${SECS}s per test, $CONNS connections per rate test, as user $user"
echo

# The driver: runs as the user, interleaves the candidates round by round, prints the table.
cat >"$work/driver.py" <<'PY'
import json
import math
import os
import signal
import statistics
import subprocess
import sys

BIN, SERVER, IPERF_PORT, CONN_PORT = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
RUNS, SECS, CONNS = int(os.environ["RUNS"]), int(os.environ["SECS"]), int(os.environ["CONNS"])

# How each candidate runs a command.
CANDIDATES = {
    "direct": lambda cmd: cmd,
    "pasta": lambda cmd: ["pasta", "--config-net", "--", *cmd],
    "filtered": lambda cmd: [BIN, "-q", "run", "--net", "filtered", "--", *cmd],
    # Only the tests whose client speaks to the proxy (BULK_CLIENT through CONNECT) run here.
    "proxied": lambda cmd: [BIN, "-q", "run", "--net", "proxied", "--", *cmd],
}

# Bulk download with one client for every candidate: through the HTTP proxy's CONNECT when
# https_proxy is set (proxied mode sets it), else direct. Prints Gbit/s.
BULK_CLIENT = r'''
import os, socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
proxy = os.environ.get("https_proxy", "")
t0 = time.perf_counter()
if proxy:
    ph, pp = proxy.rsplit("/", 1)[-1].rsplit(":", 1)
    s = socket.create_connection((ph, int(pp)), timeout=30)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            sys.exit("proxy closed")
        head += b
    if b" 200 " not in head.split(b"\r\n")[0]:
        sys.exit(head.decode(errors="replace"))
else:
    s = socket.create_connection((host, port), timeout=30)
buf = bytearray(1 << 20)
n = 0
while True:
    k = s.recv_into(buf)
    if not k:
        break
    n += k
print(n * 8 / (time.perf_counter() - t0) / 1e9)
'''

# The connection-rate client, passed with -c so it needs no file inside the jail.
CONN_CLIENT = r'''
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def once():
    s = socket.create_connection((host, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"x")
    if s.recv(1) != b"x":
        sys.exit("echo server sent something else")
    s.close()
for _ in range(min(n, 50)):  # warm up (ARP, the stack's first-flow paths, caches)
    once()
t0 = time.perf_counter()
for _ in range(n):
    once()
print(n / (time.perf_counter() - t0))
'''


def iperf(*extra):
    return ["iperf3", "-c", SERVER, "-p", IPERF_PORT, "-t", str(SECS), "-J", *extra]


def iperf_gbits(out):
    r = json.loads(out)
    if "error" in r:
        raise RuntimeError(f"iperf3: {r['error']}")
    # sum_received is what the receiving side counted, whichever side that is (-R).
    return r["end"]["sum_received"]["bits_per_second"] / 1e9


# (label, unit, command, parser, timeout in seconds: generous, only there to catch hangs)
IPERF_TIMEOUT = SECS + 60
TESTS = [
    ("TCP jail->world, 1 stream", "Gbit/s", iperf(), iperf_gbits, IPERF_TIMEOUT),
    ("TCP jail->world, 4 streams", "Gbit/s", iperf("-P", "4"), iperf_gbits, IPERF_TIMEOUT),
    ("TCP world->jail, 1 stream", "Gbit/s", iperf("-R"), iperf_gbits, IPERF_TIMEOUT),
    ("TCP world->jail, 4 streams", "Gbit/s", iperf("-R", "-P", "4"), iperf_gbits, IPERF_TIMEOUT),
    ("TCP connections, sequential", "conn/s",
     ["python3", "-c", CONN_CLIENT, SERVER, str(CONN_PORT), str(CONNS)], float, 60 + CONNS / 20),
    ("TCP world->jail, python client", "Gbit/s",
     ["python3", "-c", BULK_CLIENT, SERVER, os.environ.get("BULK_PORT", "7002")], float, 120),
]
# Which candidates run which tests: proxied only the one whose client uses the proxy.
ONLY = {"proxied": {"TCP world->jail, python client"}}


HOLD_CLIENT = r'''
import resource, socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 100), hard))
held = []
for _ in range(n):
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(b"x")
    s.recv(1)
    held.append(s)
print("held", len(held), flush=True)
time.sleep(60)
'''


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def supervisor_rss(flows):
    """The filtered launcher's resident memory (its supervisor thread is in it) while the
    jailed command holds `flows` open TCP connections through it."""
    argv = [BIN, "-q", "run", "--net", "filtered", "--", "python3", "-c", HOLD_CLIENT, SERVER, str(CONN_PORT), str(flows)]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        if not line.startswith("held"):
            raise RuntimeError(f"hold client: {line!r} {p.stderr.read()[-300:]}")
        return rss_kib(p.pid)
    finally:
        p.kill()
        p.wait()


def run(argv, timeout):
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise RuntimeError(f"timed out after {timeout:.0f}s; stderr: {err.strip()[-500:]}")
    finally:
        if p.poll() is None:  # SIGTERM from net.sh (SystemExit): don't leave the run behind
            p.kill()
            p.wait()
    if p.returncode != 0:
        detail = (err.strip() or out.strip())[-800:]
        raise RuntimeError(f"exit status {p.returncode}: {detail}")
    return out


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = {c: {t[0]: [] for t in TESTS} for c in CANDIDATES}
    failed = {}  # candidate -> first error; a failed candidate is skipped from then on
    if not os.access(BIN, os.X_OK):
        failed["filtered"] = f"binary not found or not executable: {BIN} (build it, or set BIN)"
    for rnd in range(RUNS):
        for label, _unit, cmd, parse, timeout in TESTS:
            # Interleaved, and the order rotates each round: the connection test leaves
            # thousands of TIME_WAIT sockets behind, which slow whoever runs next.
            order = list(CANDIDATES.items())
            order = order[rnd % len(order):] + order[:rnd % len(order)]
            for cand, wrap in order:
                if cand in failed or (cand in ONLY and label not in ONLY[cand]):
                    continue
                try:
                    results[cand][label].append(parse(run(wrap(cmd), timeout)))
                except Exception as e:  # report, mark failed, carry on with the others
                    failed[cand] = f"{label}, round {rnd + 1}: {e}"
                    print(f"{cand} FAILED ({failed[cand]})", file=sys.stderr, flush=True)
        print(f"round {rnd + 1}/{RUNS} done", file=sys.stderr, flush=True)

    def num(x):  # 3 significant digits, no exponent: 0.199, 21.5, 13312
        digits = 0 if x == 0 else math.floor(math.log10(abs(x)))
        return f"{x:.{max(0, 2 - digits)}f}"

    def cell(xs, cand=None, label=None):
        if cand in ONLY and label not in ONLY[cand]:
            return "n/a"
        if not xs:
            return "failed"
        return f"{num(statistics.median(xs))} ({num(min(xs))}-{num(max(xs))})"

    def ratio(a, b):
        if not a or not b:
            return "-"
        return f"{statistics.median(a) / statistics.median(b):.2f}"

    names = list(CANDIDATES)
    header = ["test", "unit", *names, "filtered/pasta", "filtered/direct", "proxied/direct"]
    rows = []
    for label, unit, *_ in TESTS:
        r = {c: results[c][label] for c in names}
        rows.append([label, unit, *(cell(r[c], c, label) for c in names),
                     ratio(r["filtered"], r["pasta"]), ratio(r["filtered"], r["direct"]),
                     ratio(r["proxied"], r["direct"])])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print()
    print(f"median (min-max) over {RUNS} rounds; higher is better, so a ratio below 1 means filtered is slower")
    for row in [header, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
    print("proxied runs only the python-client bulk test (iperf3 and the rate client do not use proxies)")
    if "filtered" not in failed:
        try:
            idle, busy = supervisor_rss(0), supervisor_rss(1000)
            print(f"filtered launcher+supervisor RSS: {idle / 1024:.1f} MiB idle, {busy / 1024:.1f} MiB with 1000 open flows"
                  " (targets: <= 8 and <= 32 MiB)")
        except Exception as e:
            print(f"filtered RSS: failed: {e}")
    for cand, err in failed.items():
        print(f"{cand} failed: {err}")


main()
PY

home=$(getent passwd "$user" | cut -d: -f6)
# In the background and waited for, not exec'd nor in the foreground: the EXIT trap must run
# (servers, netns), and bash only runs a trap for SIGTERM once a foreground child has ended.
(
  cd "$work"
  exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups \
    env -i HOME="$home" USER="$user" PATH=/usr/bin:/bin RUNS="$RUNS" SECS="$SECS" CONNS="$CONNS" BULK_PORT="$BULK_PORT" \
    python3 "$work/driver.py" "$BIN" "$SERVER" "$IPERF_PORT" "$CONN_PORT"
) &
driver=$!
pids=("$driver" "${pids[@]}") # stopped first, so that it stops its own child
status=0
wait "$driver" || status=$?
exit "$status"
