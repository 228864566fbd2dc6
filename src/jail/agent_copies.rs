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
        let (data, _) = read_file(&m.file).map_err(|e| annotate(&m.file, e))?;
        if let Some(dir) = m.copy.parent() {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        write_new(&m.copy, &data).map_err(|e| annotate(&m.copy, e))?;
        super::waiter::remove_after_exit(&[&m.copy]);
    }
    Ok(())
}

fn annotate(p: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

/// Writes the listed keys of each copy into the user's file (replaced in one rename, its mode
/// kept), then removes the copy. A copy or a file that is not a JSON object is not merged: the
/// user's file is never guessed at.
pub fn merge_back(merges: &[MergeBack]) {
    for m in merges {
        if let Err(why) = merge_one(m) {
            eprintln!(
                "agent-sandbox: warning: what the agent kept in {} this session was not saved: {why}",
                m.file.display()
            );
        }
        let _ = std::fs::remove_file(&m.copy);
        if let Some(dir) = m.copy.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn merge_one(m: &MergeBack) -> Result<(), String> {
    let (copy, _) = read_file(&m.copy).map_err(|e| format!("its copy: {e}"))?;
    let (real_bytes, mode) = read_file(&m.file).map_err(|e| e.to_string())?;
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
    let dir = m.file.parent().ok_or("no parent directory")?;
    let name = m.file.file_name().ok_or("no file name")?.to_string_lossy();
    let tmp = dir.join(format!(".{name}.agent-sandbox-{}", std::process::id()));
    write_new(&tmp, text.as_bytes()).map_err(|e| e.to_string())?;
    let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode));
    std::fs::rename(&tmp, &m.file).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        e.to_string()
    })
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
        let m = MergeBack { file: file.clone(), copy: dir.join("copies/s1/0"), keys: vec!["numStartups".into()] };
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
}
