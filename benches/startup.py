#!/usr/bin/env python3
"""Startup benchmark: agent-sandbox's full default jail vs bwrap, measured in one run.

Runs the commands interleaved (A, B, A, B, ...) so that machine noise hits both alike,
reports medians and the ratio, the launcher's peak RSS (wait4), the cost of 50 sessions
started at once, and the memory 50 idle sessions hold (PSS from /proc). Run it through
benches/startup.sh, which builds the binary and drops to an unprivileged user.
"""
import os
import statistics
import subprocess
import sys
import time

ASB = sys.argv[1]
RUNS = int(os.environ.get("RUNS", "200"))
# Milliseconds of idle between launches (default none: back to back). A researcher's launch
# on a login node starts on an idle machine: with a gap, what the last launch left (the
# kernel's namespace teardown, the cleanup waiter) is done, and the cores sleep in between,
# so each hand-over between processes wakes one.
GAP_MS = float(os.environ.get("GAP_MS", "0"))
CONCURRENT = int(os.environ.get("CONCURRENT", "50"))

CANDIDATES = {
    "agent-sandbox": [ASB, "-q", "run", "--", "true"],
    "agent-sandbox (isolated, no fallback warning)": [ASB, "-q", "--net", "isolated", "run", "--", "true"],
    "bwrap": ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent", "true"],
}


def run_once(argv):
    t0 = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=[
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0),
    ])
    _, status, _ = os.wait4(pid, 0)
    dt = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{argv} failed with {status}")
    return dt


def startup():
    times = {k: [] for k in CANDIDATES}
    for _ in range(5):  # warm caches
        for argv in CANDIDATES.values():
            run_once(argv)
    for _ in range(RUNS):
        for name, argv in CANDIDATES.items():
            if GAP_MS:
                time.sleep(GAP_MS / 1e3)
            times[name].append(run_once(argv))
    return times


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def concurrent_start():
    argv = CANDIDATES["agent-sandbox (isolated, no fallback warning)"]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(CONCURRENT)]
    errors = [p.communicate()[1].decode() for p in procs]
    dt = time.perf_counter() - t0
    failed = [(p.returncode, e) for p, e in zip(procs, errors) if p.returncode]
    if failed:
        sys.exit(f"{len(failed)} of {CONCURRENT} concurrent runs failed, first: {failed[0]}")
    return dt


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(root):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def idle_sessions():
    argv = [ASB, "-q", "--net", "isolated", "run", "--", "sleep", "30"]
    procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(CONCURRENT)]
    time.sleep(2.0)
    total = 0
    nproc = 0
    launcher_hwm = 0
    unreadable = 0
    for p in procs:
        launcher_hwm = max(launcher_hwm, status_kib(p.pid, "VmHWM"))
        for pid in descendants(p.pid):
            kib = pss_kib(pid)
            unreadable += kib == 0
            total += kib
            nproc += 1
    if unreadable:
        # The jail's init is not dumpable: only root reads its smaps. The test
        # fifty_idle_sessions_cost_at_most_one_mib_each (tests/jail.rs) counts every process.
        print(f"  note: {unreadable} processes unreadable as this user (counted 0): the figure is low")
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()
    return total, nproc, launcher_hwm


def main():
    if os.environ.get("ONLY_CONCURRENT"):
        for _ in range(5):
            print(f"{concurrent_start()*1e3:.0f} ms")
        return
    times = startup()
    gap = f", {GAP_MS:g} ms idle before each" if GAP_MS else ""
    print(f"startup, {RUNS} interleaved runs each (wall time per launch{gap})")
    print(f"  {'command':48} {'median':>9} {'p10':>9} {'p90':>9}")
    for name, xs in times.items():
        print(f"  {name:48} {statistics.median(xs)*1e3:7.2f}ms {pct(xs,.1)*1e3:7.2f}ms {pct(xs,.9)*1e3:7.2f}ms")
    base = statistics.median(times["bwrap"])
    for name in times:
        if name != "bwrap":
            print(f"  ratio {name} / bwrap = {statistics.median(times[name]) / base:.2f}  (target <= 1.00)")
    dt = concurrent_start()
    print(f"{CONCURRENT} sessions started at once (run -- true): all done in {dt*1e3:.0f} ms ({dt/CONCURRENT*1e3:.2f} ms each)")
    total, nproc, hwm = idle_sessions()
    print(f"launcher peak RSS (VmHWM, largest of {CONCURRENT}) = {hwm/1024:.1f} MiB (target <= 8 MiB)")
    print(f"{CONCURRENT} idle sessions (run -- sleep): {total/1024:.1f} MiB PSS in {nproc} processes, {total/CONCURRENT/1024:.2f} MiB per session")


if __name__ == "__main__":
    main()
