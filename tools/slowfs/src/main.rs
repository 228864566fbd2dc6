//! slowfs: a network-filesystem stand-in for benches and tests (not part of the product).
//!
//! A FUSE passthrough of a backing directory that sleeps a fixed delay before answering each
//! metadata request (lookup, getattr, setattr, open, opendir, readdir, create, mkdir, mknod,
//! unlink, rmdir, rename, link, symlink, readlink, statfs, access, fsync), as NFS, Lustre or GPFS
//! pay a network round trip for each, and counts every request by kind. Data (read, write)
//! goes through undelayed: what is measured is the metadata traffic.
//!
//!   slowfs BACKING MOUNTPOINT [--delay-us N] [--ttl-ms N] [--stats FILE] [--threads N]
//!          [--trace FILE] [--readdirplus]
//!
//! `--readdirplus`: a listing's entries come with their attributes, in its one round trip, as
//! NFS's READDIRPLUS (Linux's client lists so by default): the kernel then knows the names
//! listed, for the cache's time, without a lookup of each.
//!
//! `--trace FILE`: one line per metadata request, `µs kind backing-path[/name]` (CLOCK_MONOTONIC
//! as it arrived: the clock of the launcher's `AGENT_SANDBOX_TIMING` marks), to see where a
//! program's requests go and when.
//!
//! Run as root it mounts with `allow_other,default_permissions`: the kernel checks access
//! against the backing files' owners and modes, so the files keep their users. Created files
//! are given to the caller (uid and gid of the request). MOUNTPOINT may be BACKING itself
//! (the backing directory is held open before the mount covers it).
//!
//! Signals: SIGUSR1 writes the counters to the stats file, SIGUSR2 zeroes them, SIGTERM or
//! SIGINT writes them and unmounts. The kernel's attribute and entry caches live for
//! `--ttl-ms` (default 0: every stat and path walk reaches the filesystem, the worst case of a
//! network filesystem that revalidates).

mod counters;
mod fs;

use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};

struct Args {
    backing: PathBuf,
    mountpoint: PathBuf,
    delay: Duration,
    ttl: Duration,
    stats: Option<PathBuf>,
    trace: Option<PathBuf>,
    threads: usize,
    readdirplus: bool,
}

fn usage() -> String {
    "usage: slowfs BACKING MOUNTPOINT [--delay-us N] [--ttl-ms N] [--stats FILE] [--threads N] [--trace FILE] \
     [--readdirplus]"
        .into()
}

fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut pos = vec![];
    let (mut delay, mut ttl, mut stats, mut trace, mut threads) = (1000u64, 0u64, None, None, 4usize);
    let mut readdirplus = false;
    while let Some(a) = argv.next() {
        let mut value = |name: &str| argv.next().ok_or_else(|| format!("{name} needs a value\n{}", usage()));
        let number = |name: &str, v: String| v.parse::<u64>().map_err(|_| format!("{name}: `{v}` is not a number"));
        match a.as_str() {
            "--delay-us" => delay = number("--delay-us", value("--delay-us")?)?,
            "--ttl-ms" => ttl = number("--ttl-ms", value("--ttl-ms")?)?,
            "--stats" => stats = Some(PathBuf::from(value("--stats")?)),
            "--trace" => trace = Some(PathBuf::from(value("--trace")?)),
            "--threads" => {
                threads = usize::try_from(number("--threads", value("--threads")?)?).map_err(|e| e.to_string())?.max(1)
            }
            "--readdirplus" => readdirplus = true,
            "-h" | "--help" => return Err(usage()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{}", usage())),
            _ => pos.push(PathBuf::from(a)),
        }
    }
    let [backing, mountpoint] = <[PathBuf; 2]>::try_from(pos).map_err(|_| usage())?;
    Ok(Args {
        backing,
        mountpoint,
        delay: Duration::from_micros(delay),
        ttl: Duration::from_millis(ttl),
        stats,
        trace,
        threads,
        readdirplus,
    })
}

/// Stops the tool with its message and status.
fn fail(code: i32, why: String) -> ! {
    eprintln!("slowfs: {why}");
    std::process::exit(code);
}

/// The filesystem the arguments ask for: the backing tree, its delays, and its trace file.
fn filesystem(args: &Args) -> fs::SlowFs {
    let fs = match fs::SlowFs::new(&args.backing, args.delay, args.ttl) {
        Ok(f) => f.with_readdirplus(args.readdirplus),
        Err(e) => fail(1, format!("{}: {e}", args.backing.display())),
    };
    match &args.trace {
        None => fs,
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => fs.traced(f),
            Err(e) => fail(1, format!("{}: {e}", p.display())),
        },
    }
}

/// Mounts `fs` as root would, every user allowed, on `args.threads` threads.
fn mount(fs: fs::SlowFs, args: &Args) -> fuser::BackgroundSession {
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        fuser::MountOption::FSName("slowfs".into()),
        fuser::MountOption::Subtype("slowfs".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::Suid,
        fuser::MountOption::Dev,
    ];
    cfg.acl = fuser::SessionACL::All;
    cfg.n_threads = Some(args.threads);
    match fuser::spawn_mount(fs, &args.mountpoint, &cfg) {
        Ok(s) => s,
        Err(e) => fail(
            1,
            format!(
                "mounting on {}: {e} (run as root, with fusermount3 from Debian's fuse3)",
                args.mountpoint.display()
            ),
        ),
    }
}

fn main() {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => fail(2, e),
    };
    // Signals are taken by sigwait on this thread: blocked here, before the FUSE threads
    // start, so that every thread inherits the mask.
    let mut set = SigSet::empty();
    for s in [Signal::SIGUSR1, Signal::SIGUSR2, Signal::SIGTERM, Signal::SIGINT] {
        set.add(s);
    }
    if let Err(e) = set.thread_block() {
        fail(1, format!("blocking signals: {e}"));
    }
    // One descriptor per inode the kernel knows of: a tree walk of a big project needs many.
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 1 << 20, 1 << 20);
    let fs = filesystem(&args);
    let counts = fs.counters();
    let session = mount(fs, &args);
    let dump = || {
        if let Some(p) = &args.stats {
            if let Err(e) = std::fs::write(p, counts.render()) {
                eprintln!("slowfs: writing {}: {e}", p.display());
            }
        }
    };
    loop {
        match set.wait() {
            Ok(Signal::SIGUSR1) => dump(),
            Ok(Signal::SIGUSR2) => counts.reset(),
            Ok(_) => break,
            Err(e) => {
                eprintln!("slowfs: sigwait: {e}");
                break;
            }
        }
    }
    dump();
    // Detached at once, even while a process still has a file open there (a session's cleanup
    // waiter may outlive its launcher): it goes when the last one closes.
    // EINVAL: gone already, with a mount above it detached first.
    if let Err(e) = nix::mount::umount2(&args.mountpoint, nix::mount::MntFlags::MNT_DETACH).or_else(|e| {
        if e == nix::errno::Errno::EINVAL {
            Ok(())
        } else {
            Err(e)
        }
    }) {
        eprintln!("slowfs: unmounting {}: {e}", args.mountpoint.display());
    }
    drop(session);
}
