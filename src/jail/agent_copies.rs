//! The copies of the agent's own files the plan gives the jail (`plan::agent_home`,
//! `Plan::merges`): made in the state directory before the session from the user's file, and
//! after it, the plan's harmless keys of what the agent left there written into the user's
//! file, nothing else (an MCP server or a hook the jail added never reaches it).

use crate::plan::agent_home::{merge_keys, MergeBack};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The largest file copied or merged: `~/.claude.json` grows with every project, and a
/// larger one is left alone.
const MAX: u64 = 64 << 20;

/// A regular file's bytes, read without following a link at its last component.
fn read_file(p: &Path) -> std::io::Result<(Vec<u8>, u32)> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(p)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    if meta.len() > MAX {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "larger than 64 MiB"));
    }
    let mut data = vec![];
    f.take(MAX).read_to_end(&mut data)?;
    Ok((data, meta.permissions().mode() & 0o7777))
}

/// Writes `data` to a new file `p` (mode 0600; a leftover of a killed launcher is replaced).
fn write_new(p: &Path, data: &[u8]) -> std::io::Result<()> {
    let _ = std::fs::remove_file(p);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)?;
    f.write_all(data)
}

/// Makes each copy from the user's file as it is now. The waiter removes them if the
/// launcher is killed before it merges.
pub fn prepare(merges: &[MergeBack]) -> std::io::Result<()> {
    for m in merges {
        let (mut data, _) = read_file(&m.file).map_err(|e| annotate(&m.file, e))?;
        if !m.strip.is_empty() {
            data = without(&data, &m.strip);
        }
        if let Some(dir) = m.copy.parent() {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        write_new(&m.copy, &data).map_err(|e| annotate(&m.copy, e))?;
        super::waiter::remove_after_exit(&[&m.copy]);
    }
    Ok(())
}

/// `data` without the top-level `keys` (a key the jail is not to read: the API key Claude
/// Code kept, when the session injects it from outside). Not a JSON object: as it is.
fn without(data: &[u8], keys: &[String]) -> Vec<u8> {
    let Ok(serde_json::Value::Object(mut map)) = serde_json::from_slice::<serde_json::Value>(data) else {
        return data.to_vec();
    };
    if !keys.iter().any(|k| map.contains_key(k)) {
        return data.to_vec();
    }
    for k in keys {
        map.remove(k);
    }
    serde_json::to_vec_pretty(&map).unwrap_or_else(|_| data.to_vec())
}

fn annotate(p: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

/// Writes the listed keys of each copy into the user's file (its mode kept), then removes the
/// copy. A copy or a file that is not a JSON object is not merged: the user's file is never
/// guessed at.
pub fn merge_back(merges: &[MergeBack]) {
    for m in merges {
        if let Err(why) = merge_one(m) {
            eprintln!(
                "agent-sandbox: warning: what the agent kept in {} this session was not saved: {why}",
                m.file.display()
            );
        }
        let _ = std::fs::remove_file(&m.copy);
        let _ = std::fs::remove_file(staged(&m.copy));
        if let Some(dir) = m.copy.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Where the merged text is written before it replaces the user's file: next to the copy,
/// in the state directory, which no jail sees. A file in the user's directory (as before)
/// could be swapped by a concurrent session that writes there between the write and the
/// rename (issue 32, F13).
fn staged(copy: &Path) -> std::path::PathBuf {
    let mut name = copy.as_os_str().to_owned();
    name.push(".merged");
    name.into()
}

fn merge_one(m: &MergeBack) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let (copy, _) = read_file(&m.copy).map_err(|e| format!("its copy: {e}"))?;
    // Launchers merging into the same file take turns (a lock in the state directory).
    let _lock = m.copy.parent().and_then(Path::parent).map(|d| lock(&d.join("merge.lock"))).transpose()?;
    // The user's file, opened once without following a link: read through this descriptor,
    // and, where the state directory is on another filesystem, written through it too.
    let mut real = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&m.file)
        .map_err(|e| e.to_string())?;
    let meta = real.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() || meta.len() > MAX {
        return Err("not a regular file of at most 64 MiB".into());
    }
    let mut real_bytes = vec![];
    (&mut real).take(MAX).read_to_end(&mut real_bytes).map_err(|e| e.to_string())?;
    let copy: serde_json::Value = serde_json::from_slice(&copy).map_err(|e| format!("the copy is not JSON: {e}"))?;
    let before: serde_json::Value =
        serde_json::from_slice(&real_bytes).map_err(|e| format!("the file is not JSON: {e}"))?;
    if !copy.is_object() || !before.is_object() {
        return Err("not a JSON object".into());
    }
    let mut merged = before.clone();
    merge_keys(&mut merged, &copy, &m.keys);
    if merged == before {
        return Ok(());
    }
    let text = serde_json::to_string_pretty(&merged).map_err(|e| e.to_string())?;
    let mode = meta.permissions().mode() & 0o7777;
    let tmp = staged(&m.copy);
    let same_fs = m.copy.parent().and_then(|d| std::fs::metadata(d).ok()).is_some_and(|d| d.dev() == meta.dev());
    if !same_fs {
        // No rename across filesystems: the user's file rewritten in place, through the
        // descriptor opened above (a name the jail swaps in meanwhile is not written).
        return write_through(&mut real, text.as_bytes());
    }
    write_new(&tmp, text.as_bytes()).map_err(|e| e.to_string())?;
    let staged_file = std::fs::File::open(&tmp).map_err(|e| e.to_string())?;
    let _ = staged_file.set_permissions(std::fs::Permissions::from_mode(mode));
    let _ = staged_file.sync_all();
    std::fs::rename(&tmp, &m.file).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        e.to_string()
    })?;
    // What is at the name now is what was written (a jail that renamed a file of its own
    // onto the name since would have replaced it): said, not guessed at.
    let now = std::fs::symlink_metadata(&m.file).map_err(|e| e.to_string())?;
    let ours = staged_file.metadata().map_err(|e| e.to_string())?;
    if (now.dev(), now.ino()) != (ours.dev(), ours.ino()) {
        return Err(format!("{} was replaced while it was written", m.file.display()));
    }
    Ok(())
}

/// Replaces the contents of the open file `f` with `data`.
fn write_through(f: &mut std::fs::File, data: &[u8]) -> Result<(), String> {
    use std::io::{Seek, SeekFrom};
    f.set_len(0).map_err(|e| e.to_string())?;
    f.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    f.write_all(data).map_err(|e| e.to_string())?;
    f.sync_all().map_err(|e| e.to_string())
}

/// An exclusive lock on `p` (made 0600 if missing), held until the file is dropped.
fn lock(p: &Path) -> Result<std::fs::File, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)
        .map_err(|e| format!("{}: {e}", p.display()))?;
    agent_sandbox_sys::file::flock(&f, libc::LOCK_EX).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The round trip on real files: the agent's session copy gains a key that names a command
    /// and one that does not; only the second reaches the user's file, whose mode stays.
    #[test]
    fn only_the_listed_keys_of_the_copy_reach_the_users_file() {
        let dir = std::env::temp_dir().join(format!("asb-merge-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(".claude.json");
        std::fs::write(&file, r#"{"numStartups": 1, "theme": "dark"}"#).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let m = MergeBack {
            file: file.clone(),
            copy: dir.join("copies/s1/0"),
            keys: vec!["numStartups".into()],
            strip: vec![],
        };
        prepare(std::slice::from_ref(&m)).unwrap();
        std::fs::write(&m.copy, r#"{"numStartups": 2, "theme": "dark", "mcpServers": {"x": {"command": "sh"}}}"#)
            .unwrap();
        merge_back(std::slice::from_ref(&m));
        let after: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(after, serde_json::json!({"numStartups": 2, "theme": "dark"}));
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o640);
        assert!(!m.copy.exists() && !dir.join("copies/s1").exists(), "the copy is gone");
        // A copy that is not JSON leaves the user's file as it was.
        prepare(std::slice::from_ref(&m)).unwrap();
        std::fs::write(&m.copy, "not json").unwrap();
        merge_back(std::slice::from_ref(&m));
        let again: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(again, after);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 32, F13: a concurrent session that can write the user's file's directory
    /// watches it and renames a file of its own onto every name made there. The merge makes
    /// no name there (it writes next to the copy, in the state directory), so what the user
    /// finds afterwards is the merge, every time.
    #[test]
    fn a_concurrent_writer_in_the_files_directory_cannot_swap_what_is_merged() {
        use std::os::unix::ffi::OsStrExt;
        let dir = std::env::temp_dir().join(format!("asb-merge-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("agent")).unwrap();
        let file = dir.join("agent/auth.json");
        let evil = br#"{"anthropic": {"type": "api_key", "key": "!touch /tmp/pwned"}}"#;
        // SAFETY: inotify on a directory we made; the descriptor is closed below.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        assert!(fd >= 0);
        let cpath = std::ffi::CString::new(dir.join("agent").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path and the descriptor made above.
        assert!(unsafe { libc::inotify_add_watch(fd, cpath.as_ptr(), libc::IN_CREATE | libc::IN_MOVED_TO) } >= 0);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (agent, stop2) = (dir.join("agent"), stop.clone());
        let attacker = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut swapped = 0;
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one pollfd of ours.
                if unsafe { libc::poll(&mut pfd, 1, 20) } <= 0 {
                    continue;
                }
                // SAFETY: reading inotify events into a buffer we own.
                let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                let mut off = 0usize;
                while n > 0 && off + 16 <= n as usize {
                    let len = u32::from_ne_bytes(buf[off + 12..off + 16].try_into().unwrap()) as usize;
                    let raw = &buf[off + 16..off + 16 + len];
                    let name = String::from_utf8_lossy(raw.split(|b| *b == 0).next().unwrap_or_default()).into_owned();
                    off += 16 + len;
                    if name.starts_with(".auth.json") {
                        let mine = agent.join("mine");
                        std::fs::write(&mine, evil).unwrap();
                        if std::fs::rename(&mine, agent.join(&name)).is_ok() {
                            swapped += 1;
                        }
                    }
                }
            }
            swapped
        });
        let keys = vec!["openai-codex[type=oauth].refresh".to_string()];
        let mut seen_evil = 0;
        for i in 0..30 {
            std::fs::write(&file, r#"{"openai-codex": {"type": "oauth", "refresh": "r"}}"#).unwrap();
            let m = MergeBack {
                file: file.clone(),
                copy: dir.join(format!("copies/s{i}/0")),
                keys: keys.clone(),
                strip: vec![],
            };
            prepare(std::slice::from_ref(&m)).unwrap();
            std::fs::write(&m.copy, format!(r#"{{"openai-codex": {{"type": "oauth", "refresh": "r{i}"}}}}"#)).unwrap();
            merge_back(std::slice::from_ref(&m));
            if std::fs::read(&file).unwrap() == evil {
                seen_evil += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let swapped = attacker.join().unwrap();
        // SAFETY: the descriptor made above, closed once.
        unsafe { libc::close(fd) };
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!((seen_evil, swapped), (0, 0), "the jail's file became the user's");
    }

    /// Issue 32, F8: with the key injected from outside, the copy the jail gets of
    /// ~/.claude.json has no `primaryApiKey`, and the user's file keeps it.
    #[test]
    fn a_stripped_key_is_not_in_the_copy_and_stays_in_the_users_file() {
        let dir = std::env::temp_dir().join(format!("asb-merge-strip-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(".claude.json");
        std::fs::write(&file, r#"{"primaryApiKey": "sk-ant-secret", "numStartups": 1}"#).unwrap();
        let m = MergeBack {
            file: file.clone(),
            copy: dir.join("copies/s1/0"),
            keys: vec!["numStartups".into(), "primaryApiKey".into()],
            strip: vec!["primaryApiKey".into()],
        };
        prepare(std::slice::from_ref(&m)).unwrap();
        let copy = std::fs::read_to_string(&m.copy).unwrap();
        assert!(!copy.contains("sk-ant-secret") && copy.contains("numStartups"), "{copy}");
        std::fs::write(&m.copy, r#"{"numStartups": 2}"#).unwrap();
        merge_back(std::slice::from_ref(&m));
        let after: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(after, serde_json::json!({"primaryApiKey": "sk-ant-secret", "numStartups": 2}));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
