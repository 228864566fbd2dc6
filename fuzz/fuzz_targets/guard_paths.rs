//! The git guard reads every trapped path from the jail's memory: splitting it, spelling what
//! means the calling process (`/proc/self`, `/dev/stdout`) as the caller's own, and deciding
//! on a name never panic, and a rewritten path never leaves the caller's own entry by `..`.
#![no_main]
use agent_sandbox::jail::guard::emulate_fuzz::{rewrite_magic, split};
use agent_sandbox::jail::guard::rules::{Dir, Guarded, Kind, Op};
use libfuzzer_sys::fuzz_target;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

struct Empty;
impl Dir for Empty {
    fn has(&self, name: &str) -> bool {
        name.len().is_multiple_of(3)
    }
    fn parent(&self) -> Option<Box<dyn Dir>> {
        None
    }
    fn id(&self) -> Option<(u64, u64)> {
        Some((1, 1))
    }
}

fuzz_target!(|data: &[u8]| {
    let (dir, name) = split(data);
    let _ = (dir, name);
    if let Some(own) = rewrite_magic(data, 42) {
        assert!(own.starts_with(b"/proc/42"), "{:?}", String::from_utf8_lossy(&own));
    }
    let g = Guarded::new(vec!["/p".into()]);
    let path = Path::new(OsStr::from_bytes(dir));
    for op in [Op::Make(Kind::File), Op::Make(Kind::Dir), Op::Make(Kind::Symlink), Op::Write, Op::RenameOnto(Kind::Dir), Op::Remove] {
        let _ = g.decide(&Empty, &Path::new("/p").join(path.strip_prefix("/").unwrap_or(path)), OsStr::from_bytes(name), op);
    }
});
