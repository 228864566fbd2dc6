#!/usr/bin/env python3
"""Network-filesystem bench: the same work with the test user's home and project on slowfs
(a FUSE passthrough that waits DELAY_US before each metadata request, tools/slowfs) and on
the local disk, interleaved in one run. Run through benches/netfs.sh (as root).

Each side is a mount namespace of its own where the user's home path shows the bench's home:
  slow:  HOME = slowfs over WORK/slow/home, the project = a second slowfs over
         WORK/slow/project mounted at HOME/bench-project (so each tree has its own counters);
  local: HOME = WORK/local/home bound there, the project inside it (the same files).
Nothing outside these namespaces changes: other users of the machine keep their home.

Measured (medians), each against the same on local disk and, for startup, bwrap:
  startup      `agent-sandbox -q run -- true`, and bwrap's command line of benches/startup.py
  exec --job   the node side of a batch job (`agent-sandbox exec --job DIR`, run directly: the
               job directory a session's sbatch wrote, the job itself cancelled)
  slurm        a Slurm call from inside (benches/slurm.sh's loop: sbatch --hold, squeue)
  guard        benches/guard.sh's file work with the git guard on and off (per file)
and the metadata requests each makes on the home and project trees (slowfs's counters).
"""
import fcntl
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

ASB, SLOWFS, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
USER = os.environ.get("BENCH_USER", "asbtest")
DELAY_US = int(os.environ.get("DELAY_US", "1000"))
# The kernel's attribute and entry cache for slowfs, 1 s by default (NFS keeps attributes 3-60 s,
# acregmin..acdirmax); TTL_MS=0 sends every stat and every step of a path walk to the server.
TTL_MS = int(os.environ.get("TTL_MS", "1000"))
# Another build to compare, measured in the same run (e.g. the build before a change).
BEFORE = os.environ.get("ASB_BEFORE")
RUNS = int(os.environ.get("RUNS", "40"))  # startup samples per candidate
BLOCK = 5  # samples per timer process; blocks of the candidates alternate
JOB_RUNS = int(os.environ.get("JOB_RUNS", "20"))
SLURM_RUNS = int(os.environ.get("SLURM_RUNS", "10"))
FILES = int(os.environ.get("FILES", "300"))
SKIP = set(os.environ.get("SKIP", "").split(","))  # any of: startup,job,slurm,guard
# A directory: slowfs traces each request (`--trace`), and the counted startup runs' requests
# are saved there per tree (`startup-home.trace`, `startup-project.trace`: `µs kind path` a line),
# and one start's timing marks (`startup-timing.txt`, the same clock).
TRACE = os.environ.get("TRACE")
# The user's private runtime directory (`XDG_RUNTIME_DIR`, what pam_systemd makes at login on
# most login nodes: memory, this node's), where a session keeps its sockets; RUNTIME=0 runs
# without one (a login without pam_systemd: the sockets are in the state directory then).
RUNTIME = os.environ.get("RUNTIME", "1") != "0"
# Requests slowfs answers at once: 8, the thread count of a Linux NFS server as nfs-utils ships
# it (nfs.conf `threads=8`); a client keeps far more in flight (64 session slots in NFSv4.1).
THREADS = int(os.environ.get("THREADS", "8"))
# Listings with each entry's attributes in their one round trip (NFS's READDIRPLUS, which
# Linux's client uses by default: `rdirplus`): the names listed are known without a lookup
# each. PLUS=0 lists plainly (each name then looked up on its own, as before stop 48).
PLUS = os.environ.get("PLUS", "1") != "0"

import pwd  # noqa: E402

PW = pwd.getpwnam(USER)
HOME = PW.pw_dir
PROJECT = os.path.join(HOME, "bench-project")
BWRAP = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent", "true"]

TIMER = r"""
import os, sys, time
k = int(sys.argv[1]); argv = sys.argv[2:]; out = []
for _ in range(k):
    t0 = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=[
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0)])
    _, st, _ = os.wait4(pid, 0)
    out.append((time.perf_counter() - t0) * 1e6)
    if os.waitstatus_to_exitcode(st) != 0:
        sys.exit("%s failed: %s" % (argv, st))
print(" ".join("%.0f" % x for x in out))
"""


def sh(*argv, **kw):
    return subprocess.run(argv, check=True, **kw)


class Side:
    """One namespace: `slow` or `local`."""

    def __init__(self, name):
        self.name = name
        self.base = os.path.join(WORK, name)
        self.ns = os.path.join(WORK, "ns-" + name)
        self.daemons = {}  # tree -> (Popen, stats file)
        self.traces = {}  # tree -> slowfs's trace file (TRACE)

    def enter(self):
        return ["nsenter", "--mount=" + self.ns, "--"]

    def as_user(self, argv, cwd=PROJECT, env=()):
        e = ["HOME=" + HOME, "USER=" + USER, "LOGNAME=" + USER, "PATH=/usr/bin:/bin", "LANG=C.UTF-8", *env]
        if RUNTIME:
            e.append("XDG_RUNTIME_DIR=" + runtime_dir())
        return self.enter() + [
            "setpriv", "--reuid=%d" % PW.pw_uid, "--regid=%d" % PW.pw_gid, "--init-groups", "--",
            "env", "-i", *e, "sh", "-c", 'cd "$0" && exec "$@"', cwd, *argv,
        ]

    def run(self, argv, cwd=PROJECT, env=()):
        return subprocess.run(self.as_user(argv, cwd, env), check=True, capture_output=True, text=True).stdout

    def times(self, argv, k=BLOCK):
        return [float(x) for x in self.run(["python3", "-I", "-c", TIMER, str(k), *argv]).split()]

    def counted(self, fn, trace_as=None):
        """Runs fn() between a reset and a dump of this side's counters: {tree: {op: n}}.
        With TRACE and trace_as, the requests fn() made are saved as TRACE/<trace_as>-<tree>.trace."""
        for p, _ in self.daemons.values():
            os.kill(p.pid, signal.SIGUSR2)
        time.sleep(0.05)
        marks = {t: os.path.getsize(tr) for t, tr in self.traces.items()} if trace_as else {}
        fn()
        time.sleep(0.05)
        for tree, at in marks.items():
            with open(self.traces[tree], "rb") as f, open(os.path.join(TRACE, "%s-%s.trace" % (trace_as, tree)), "wb") as out:
                f.seek(at)
                out.write(f.read())
        out = {}
        for tree, (p, stats) in self.daemons.items():
            if os.path.exists(stats):
                os.remove(stats)
            os.kill(p.pid, signal.SIGUSR1)
            for _ in range(200):
                if os.path.exists(stats) and os.path.getsize(stats):
                    break
                time.sleep(0.01)
            with open(stats) as f:
                out[tree] = {k: int(v) for k, v in (line.split() for line in f)}
        return out


def make_tree(root):
    """A home as a researcher's looks to the launcher: dotfiles, secrets it hides, a git
    project of 20 directories of 10 files."""
    home = os.path.join(root, "home")
    os.makedirs(os.path.join(home, ".ssh"))
    os.makedirs(os.path.join(home, ".aws"))
    os.makedirs(os.path.join(home, ".config"))
    files = {".ssh/id_ed25519": "canary\n", ".aws/credentials": "canary\n", ".gitconfig": "[user]\n\tname = Bench\n",
             ".bashrc": "# bench\n", ".profile": "# bench\n"}
    for rel, text in files.items():
        with open(os.path.join(home, rel), "w") as f:
            f.write(text)
    proj = os.path.join(root, "project")
    for d in range(20):
        os.makedirs(os.path.join(proj, "src%d" % d))
        for i in range(10):
            with open(os.path.join(proj, "src%d" % d, "f%d.py" % i), "w") as f:
                f.write("x = %d\n" % i)
    sh("git", "-c", "init.defaultBranch=main", "init", "-q", proj)
    sh("git", "-C", proj, "-c", "user.name=b", "-c", "user.email=b@example.org", "add", ".")
    sh("git", "-C", proj, "-c", "user.name=b", "-c", "user.email=b@example.org", "commit", "-qm", "bench")
    for dirpath, dirs, names in os.walk(root):
        for n in dirs + names:
            os.lchown(os.path.join(dirpath, n), PW.pw_uid, PW.pw_gid)
    os.chmod(os.path.join(home, ".ssh"), 0o700)
    os.chown(home, PW.pw_uid, PW.pw_gid)
    os.chmod(home, 0o750)
    os.chown(proj, PW.pw_uid, PW.pw_gid)


def runtime_dir():
    """The bench user's runtime directory (on the local disk, as /run/user/UID is in memory)."""
    return os.path.join(WORK, "runtime-%d" % PW.pw_uid)


def setup():
    # A private bind of WORK holds the two namespace files (a namespace file may not sit on
    # a shared mount).
    os.makedirs(WORK)
    os.chmod(WORK, 0o755)
    os.makedirs(runtime_dir(), mode=0o700)
    os.chown(runtime_dir(), PW.pw_uid, PW.pw_gid)
    sh("mount", "--bind", WORK, WORK)
    sh("mount", "--make-private", WORK)
    sides = {}
    for name in ("slow", "local"):
        s = Side(name)
        os.makedirs(s.base)
        os.chmod(s.base, 0o755)
        make_tree(s.base)
        open(s.ns, "w").close()
        sh("unshare", "--mount=" + s.ns, "--propagation", "private", "true")
        sides[name] = s
    loc = sides["local"]
    shutil.move(os.path.join(loc.base, "project"), os.path.join(loc.base, "home", "bench-project"))
    sh(*loc.enter(), "mount", "--bind", os.path.join(loc.base, "home"), HOME)
    slow = sides["slow"]
    os.makedirs(os.path.join(slow.base, "home", "bench-project"))
    os.chown(os.path.join(slow.base, "home", "bench-project"), PW.pw_uid, PW.pw_gid)
    for tree, backing, mnt in (("home", "home", HOME), ("project", "project", PROJECT)):
        stats = os.path.join(WORK, "stats-" + tree)
        trace = []
        if TRACE:
            os.makedirs(TRACE, exist_ok=True)
            slow.traces[tree] = os.path.join(WORK, "trace-" + tree)
            trace = ["--trace", slow.traces[tree]]
        p = subprocess.Popen(slow.enter() + [SLOWFS, os.path.join(slow.base, backing), mnt,
                                             "--delay-us", str(DELAY_US), "--ttl-ms", str(TTL_MS),
                                             "--threads", str(THREADS), "--stats", stats, *trace,
                                             *(["--readdirplus"] if PLUS else [])])
        slow.daemons[tree] = (p, stats)
        for _ in range(500):
            with open("/proc/%d/mounts" % p.pid) as f:
                if any(line.split()[1] == mnt and line.split()[2].startswith("fuse") for line in f):
                    break
            if p.poll() is not None:
                sys.exit("slowfs exited at its start (%s)" % p.returncode)
            time.sleep(0.01)
        else:
            sys.exit("slowfs did not mount %s" % mnt)
    return sides


def teardown(sides):
    for s in sides.values():
        for p, _ in s.daemons.values():
            p.send_signal(signal.SIGTERM)
        for p, _ in s.daemons.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run(["umount", s.ns], check=False)
    subprocess.run(["umount", "-l", WORK], check=False)
    shutil.rmtree(WORK, ignore_errors=True)


# Seconds between two blocks: longer than the slow side's attribute cache and a cleanup.
PAUSE = float(os.environ.get("BLOCK_PAUSE", "2"))


def interleaved(cands, runs):
    """cands: {label: (side, argv)} -> {label: [us...]}; blocks alternate between them."""
    out = {k: [] for k in cands}
    for side, argv in cands.values():  # warm
        side.times(argv, 2)
    for _ in range(max(1, runs // BLOCK)):
        for k, (side, argv) in cands.items():
            # Each block starts alike: the last session's cleanup waiter done and the
            # network filesystem's 1 s attribute cache expired (without the pause the first
            # candidate measured ~280 ms above the same build in another slot), and its first
            # run, which meets that cold cache, left out.
            time.sleep(PAUSE)
            out[k] += side.times(argv, BLOCK + 1)[1:]
    return out


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def show_counts(label, counts, per=1):
    parts = []
    for tree in ("home", "project"):
        c = counts.get(tree, {})
        ops = ", ".join("%s %g" % (k, round(v / per, 1)) for k, v in c.items() if v and k not in ("metadata",))
        parts.append("%s %g (%s)" % (tree, round(c.get("metadata", 0) / per, 1), ops or "none"))
    print("  %-34s %s" % (label, "; ".join(parts)))


def startup(sides):
    slow, loc = sides["slow"], sides["local"]
    asb = [ASB, "-q", "run", "--", "true"]
    cands = {"asb-slow": (slow, asb), "asb-local": (loc, asb), "bwrap-slow": (slow, BWRAP),
             "bwrap-local": (loc, BWRAP)}
    before = [BEFORE, "-q", "run", "--", "true"] if BEFORE else None
    if before:
        cands.update({"before-slow": (slow, before), "before-local": (loc, before)})
    t = interleaved(cands, RUNS)
    m = {k: med(v) / 1e3 for k, v in t.items()}
    print("\nstartup, %d runs each, ms (median):" % len(t["asb-slow"]))
    print("  %-26s %8s %8s %8s %9s" % ("", "netfs", "local", "ratio", "+ms"))
    names = {"asb": "agent-sandbox run -- true", "before": "the same, ASB_BEFORE", "bwrap": "bwrap (startup.sh's line)"}
    for who in ("asb", "before", "bwrap"):
        if who + "-slow" not in m:
            continue
        s, lo = m[who + "-slow"], m[who + "-local"]
        print("  %-26s %8.2f %8.2f %8.2f %+9.2f" % (names[who], s, lo, s / lo, s - lo))
    print("  agent-sandbox / bwrap: %.2f on netfs, %.2f on local disk" % (
        m["asb-slow"] / m["bwrap-slow"], m["asb-local"] / m["bwrap-local"]))
    ok = m["asb-slow"] <= 1.5 * m["asb-local"] and m["asb-slow"] - m["asb-local"] <= 20
    print("  target (netfs <= 1.5x local and <= +20 ms): %s" % ("met" if ok else "MISSED"))
    print("metadata requests per run on the netfs trees:")
    n = 5
    show_counts("agent-sandbox run -- true", slow.counted(lambda: slow.times(asb, n)), n)
    if TRACE:
        # One start after the pause, as each measured block's runs meet the cache.
        time.sleep(PAUSE)

        def marked():
            marks = subprocess.run(slow.as_user(asb, env=["AGENT_SANDBOX_TIMING=1"]), capture_output=True, text=True)
            with open(os.path.join(TRACE, "startup-timing.txt"), "w") as f:
                f.write(marks.stderr)
        slow.counted(marked, "startup")
        print("  one start's requests: %s/startup-{home,project}.trace; its timing marks: startup-timing.txt" % TRACE)
    if before:
        show_counts("the same, ASB_BEFORE", slow.counted(lambda: slow.times(before, n)), n)
    show_counts("bwrap", slow.counted(lambda: slow.times(BWRAP, n)), n)


def slurm_ready():
    return shutil.which("sbatch") and subprocess.run(["squeue", "-h"], capture_output=True).returncode == 0


def jobs(sides, policy):
    """A held batch job submitted from a session on each side; its directory is then run by
    `exec --job` directly (the node side, without slurmd), the job cancelled."""
    dirs = {}
    for name, s in sides.items():
        s.run([ASB, "-q", "--policy", policy, "run", "--", "sbatch", "--hold", "-J", "asb-netfs", "--wrap", "true"])
        s.run(["scancel", "--name=asb-netfs"])
        listing = s.run(["sh", "-c", 'ls -t "$HOME/.local/state/agent-sandbox/jobs" | head -n1'])
        dirs[name] = os.path.join(HOME, ".local/state/agent-sandbox/jobs", listing.strip())
    cands = {k: (sides[k], [ASB, "exec", "--job", d]) for k, d in dirs.items()}
    t = interleaved(cands, JOB_RUNS)
    s, lo = med(t["slow"]) / 1e3, med(t["local"]) / 1e3
    print("\nexec --job (node side, batch job `true`), %d runs each, ms (median):" % len(t["slow"]))
    print("  netfs %.2f, local %.2f: %.2fx, %+.2f ms" % (s, lo, s / lo, s - lo))
    show_counts("exec --job", sides["slow"].counted(lambda: sides["slow"].times(cands["slow"][1], 5)), 5)


LOOP = r"""
n=$1; ms() { date +%s%N; }; i=0; : > "$HOME/sb.t"; : > "$HOME/sq.t"
while [ "$i" -lt "$n" ]; do
  a=$(ms); sbatch --hold --parsable -J asb-netfs --wrap true >/dev/null; b=$(ms)
  squeue -h >/dev/null; c=$(ms)
  echo $(( (b - a) / 1000 )) >> "$HOME/sb.t"; echo $(( (c - b) / 1000 )) >> "$HOME/sq.t"; i=$((i + 1))
done
med() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "$(med "$HOME/sb.t") $(med "$HOME/sq.t")"; scancel --name=asb-netfs >/dev/null 2>&1 || true
"""


def slurm(sides, policy):
    r = {}
    for _ in range(3):
        for name, s in sides.items():
            r.setdefault(name + "-direct", []).append(s.run(["sh", "-c", LOOP, "loop", str(SLURM_RUNS)]).split())
            r.setdefault(name + "-jail", []).append(
                s.run([ASB, "-q", "--policy", policy, "run", "--", "sh", "-c", LOOP, "loop", str(SLURM_RUNS)]).split())
    print("\nSlurm calls from inside, %d calls x 3 rounds, ms (median of round medians):" % SLURM_RUNS)
    print("  %-14s %9s %9s %9s %9s" % ("", "direct", "jail", "jail/dir", "+ms"))
    for name in ("slow", "local"):
        for i, cmd in enumerate(("sbatch", "squeue")):
            d = med([int(x[i]) for x in r[name + "-direct"]]) / 1e3
            j = med([int(x[i]) for x in r[name + "-jail"]]) / 1e3
            print("  %-14s %9.2f %9.2f %9.2f %+9.2f" % ("%s %s" % (cmd, "netfs" if name == "slow" else "local"),
                                                       d, j, j / d, j - d))
    slow = sides["slow"]
    inside = [ASB, "-q", "--policy", policy, "run", "--", "sh", "-c", "sbatch --hold -J asb-netfs --wrap true; squeue -h"]
    c = slow.counted(lambda: slow.run(inside))
    slow.run(["scancel", "--name=asb-netfs"])
    show_counts("a session with sbatch + squeue", c)


WORKLOAD = r"""
import os, sys, tarfile, time, shutil, subprocess
n = int(sys.argv[1]); d = "w%d" % os.getpid(); os.mkdir(d)
t0 = time.perf_counter()
for i in range(n):
    with open("%s/f%d" % (d, i), "w") as f: f.write("x")
t1 = time.perf_counter()
for i in range(n):
    os.rename("%s/f%d" % (d, i), "%s/g%d" % (d, i))
t2 = time.perf_counter()
with tarfile.open("%s.tar" % d, "w") as t: t.add(d)
os.mkdir(d + "x")
with tarfile.open("%s.tar" % d) as t: t.extractall(d + "x")
t3 = time.perf_counter()
for i in range(0, n, 10):
    os.mkdir("%s/t%d" % (d, i))
    for k in range(10):
        open("%s/t%d/f%d" % (d, i, k), "w").close()
t4 = time.perf_counter()
shutil.rmtree(d)
t5 = time.perf_counter()
g = ["git", "-c", "user.name=b", "-c", "user.email=b@example.org", "-C", d + "x"]
subprocess.run(g + ["init", "-q"], check=True)
subprocess.run(g + ["add", "."], check=True)
subprocess.run(g + ["commit", "-qm", "bench"], check=True)
t6 = time.perf_counter()
print("%.1f %.1f %.1f %.1f %.1f" % ((t1 - t0) * 1e6 / n, (t2 - t1) * 1e6 / n, (t3 - t2) * 1e6 / n, (t5 - t4) * 1e6 / n, (t6 - t5) * 1e6 / n))
shutil.rmtree(d + "x"); os.remove(d + ".tar")
"""


def guard(sides, noguard):
    cols = ("create", "rename", "untar", "rm-tree", "git-commit")
    argv = {"direct": ["python3", "-I", "-c", WORKLOAD, str(FILES)],
            "guard": [ASB, "-q", "run", "--", "python3", "-I", "-c", WORKLOAD, str(FILES)],
            "noguard": [ASB, "-q", "--policy", noguard, "run", "--", "python3", "-I", "-c", WORKLOAD, str(FILES)]}
    r = {}
    for _ in range(3):
        for name, s in sides.items():
            for k, a in argv.items():
                r.setdefault((name, k), []).append([float(x) for x in s.run(a).split()])
    print("\ngit guard, %d files x 3 rounds, microseconds per file (median):" % FILES)
    print("  %-16s" % "" + "".join("%11s" % c for c in cols))
    m = {}
    for key, rows in r.items():
        m[key] = [med([row[i] for row in rows]) for i in range(len(cols))]
    for name in ("slow", "local"):
        for k in ("direct", "noguard", "guard"):
            print("  %-16s" % ("%s %s" % (k, "netfs" if name == "slow" else "local")) +
                  "".join("%11.1f" % v for v in m[(name, k)]))
        print("  %-16s" % ("guard/no guard") +
              "".join("%11.2f" % (g / n) for g, n in zip(m[(name, "guard")], m[(name, "noguard")])))
    slow = sides["slow"]
    for k in ("noguard", "guard"):
        show_counts("workload, %s (per file)" % k, slow.counted(lambda: slow.run(argv[k])), FILES)


def main():
    sides = setup()
    try:
        print("agent-sandbox %s, slowfs delay %d us per metadata request (attr/entry cache %d ms), kernel %s, "
              "%d cores, load %s" % (subprocess.run([ASB, "--version"], capture_output=True, text=True).stdout.split()[-1],
                                     DELAY_US, TTL_MS, os.uname().release, os.cpu_count(),
                                     open("/proc/loadavg").read().split()[0]))
        print("slowfs answers %d requests at once, lists %s; XDG_RUNTIME_DIR: %s"
              % (THREADS, "with attributes (READDIRPLUS)" if PLUS else "plainly (PLUS=0)",
                 runtime_dir() + " (private, local disk)" if RUNTIME else "unset (RUNTIME=0)"))
        if "startup" not in SKIP:
            startup(sides)
        policy = os.path.join(WORK, "policy.toml")
        with open(policy, "w") as f:
            f.write("[slurm]\nqueries_per_minute = 1000000\n")
        noguard = os.path.join(WORK, "noguard.toml")
        with open(noguard, "w") as f:
            f.write("[filesystem]\nnested_git = true\n")
        os.chmod(policy, 0o644)
        os.chmod(noguard, 0o644)
        if "guard" not in SKIP:
            guard(sides, noguard)
        if SKIP >= {"job", "slurm"}:
            pass
        elif slurm_ready():
            # The test cluster is shared with the test runs: held for the Slurm parts only.
            with open("/tmp/asb-cluster.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if "job" not in SKIP:
                    jobs(sides, policy)
                if "slurm" not in SKIP:
                    slurm(sides, policy)
        else:
            print("\nno Slurm test cluster answering (tests/cluster/start.sh): exec --job and Slurm calls not measured")
        print("load at the end %s" % open("/proc/loadavg").read().split()[0])
    finally:
        teardown(sides)


if __name__ == "__main__":
    main()
