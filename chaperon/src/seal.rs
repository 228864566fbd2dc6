//! The user's record key, and the seals made with it: what the chaperon writes into the state
//! directory for itself or for a compute node (a job's `job.json`, each line of a project's
//! scope record) carries an HMAC-SHA256 under a key that no jail ever sees, and is read back
//! only once the seal checks. The state directory is hidden in every jail; should a jail reach
//! it all the same (a `~/.local` symlinked into a tree it may write), what it writes there is
//! refused, never used, so it cannot choose what a job runs, which jobs a session acts on, or
//! which directory a cleanup removes.
//!
//! ```text
//! <state>/records.key   32 random bytes, 0600, made once (O_EXCL, linked into place whole);
//!                       read through a descriptor opened without following a symlink.
//!                       Homes are shared: the compute nodes read the same key.
//! sealed text           "<64 hex digits of HMAC-SHA256> <data>"; the MAC covers a purpose
//!                       ("job.json", "scope"), a context (the job directory's name) and
//!                       the data, so a sealed text is good for one use in one place only.
//! ```

use ring::hmac;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The key's file name in the state directory.
pub const KEY_FILE: &str = "records.key";
const KEY_LEN: usize = 32;
const TAG_HEX: usize = 64;

/// The user's record key.
pub struct Key(hmac::Key);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// A sealed text that did not check: what it was, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsealed {
    #[error(
        "it carries no seal (written by an earlier agent-sandbox, or by something other than this user's chaperon)"
    )]
    NoSeal,
    #[error("its seal does not match: it was altered, or written by something other than this user's chaperon")]
    Mismatch,
}

impl Key {
    /// The key in `state_dir`, made there first if there is none (by the chaperon, outside
    /// every jail).
    pub fn load_or_create(state_dir: &Path) -> Result<Key, String> {
        match Key::load(state_dir) {
            Err(KeyError::Missing(_)) => {
                create(state_dir)?;
                Key::load(state_dir).map_err(|e| e.to_string())
            }
            other => other.map_err(|e| e.to_string()),
        }
    }

    /// The key in `state_dir`: a regular file of this user, of 32 bytes, that nobody else
    /// can read or write.
    pub fn load(state_dir: &Path) -> Result<Key, KeyError> {
        let path = state_dir.join(KEY_FILE);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&path);
        let f = match f {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(KeyError::Missing(path)),
            Err(e) => return Err(KeyError::Bad(path, e.to_string())),
        };
        let m = f.metadata().map_err(|e| KeyError::Bad(path.clone(), e.to_string()))?;
        let me = nix::unistd::geteuid().as_raw();
        if !m.is_file() || m.uid() != me || m.mode() & 0o077 != 0 || m.len() != KEY_LEN as u64 {
            return Err(KeyError::Bad(
                path,
                format!(
                    "not a {KEY_LEN}-byte regular file of uid {me} with mode 0600 (uid {}, mode {:o}, {} bytes)",
                    m.uid(),
                    m.mode() & 0o7777,
                    m.len()
                ),
            ));
        }
        let mut bytes = Vec::with_capacity(KEY_LEN + 1);
        (&f).take(KEY_LEN as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| KeyError::Bad(path.clone(), e.to_string()))?;
        if bytes.len() != KEY_LEN {
            return Err(KeyError::Bad(path, format!("{} bytes, not {KEY_LEN}", bytes.len())));
        }
        Ok(Key::from_bytes(&bytes))
    }

    pub fn from_bytes(bytes: &[u8]) -> Key {
        Key(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    /// The MAC of `data` for `purpose` in `context`: each is length-prefixed, so no two
    /// different triples are the same message.
    fn tag(&self, purpose: &str, context: &[u8], data: &[u8]) -> hmac::Tag {
        let mut c = hmac::Context::with_key(&self.0);
        for part in [purpose.as_bytes(), context] {
            c.update(&(part.len() as u64).to_be_bytes());
            c.update(part);
        }
        c.update(data);
        c.sign()
    }

    /// `data` sealed: the MAC in hex, a space, the data.
    pub fn seal(&self, purpose: &str, context: &[u8], data: &[u8]) -> Vec<u8> {
        let tag = self.tag(purpose, context, data);
        let mut out = Vec::with_capacity(TAG_HEX + 1 + data.len());
        for b in tag.as_ref() {
            out.extend_from_slice(format!("{b:02x}").as_bytes());
        }
        out.push(b' ');
        out.extend_from_slice(data);
        out
    }

    /// The data of a sealed text, once its MAC checks (compared in constant time); nothing of
    /// it otherwise.
    pub fn open<'a>(&self, purpose: &str, context: &[u8], sealed: &'a [u8]) -> Result<&'a [u8], Unsealed> {
        let (Some(hex), Some(b' ')) = (sealed.get(..TAG_HEX), sealed.get(TAG_HEX)) else {
            return Err(Unsealed::NoSeal);
        };
        let data = &sealed[TAG_HEX + 1..];
        let mut tag = [0u8; KEY_LEN];
        for (i, pair) in hex.chunks(2).enumerate() {
            let digit = |c: u8| (c as char).to_digit(16);
            match (digit(pair[0]), digit(pair[1])) {
                (Some(h), Some(l)) => tag[i] = (h * 16 + l) as u8,
                _ => return Err(Unsealed::NoSeal),
            }
        }
        let mut msg = Vec::with_capacity(32 + purpose.len() + context.len() + data.len());
        for part in [purpose.as_bytes(), context] {
            msg.extend_from_slice(&(part.len() as u64).to_be_bytes());
            msg.extend_from_slice(part);
        }
        msg.extend_from_slice(data);
        hmac::verify(&self.0, &msg, &tag).map_err(|_| Unsealed::Mismatch)?;
        Ok(data)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the user's record key {0} is missing (it is made when a session first uses Slurm); fix: resubmit the job from a session")]
    Missing(PathBuf),
    #[error("the user's record key {0} cannot be used: {1}; fix: remove it (jobs submitted before then will be refused and must be resubmitted)")]
    Bad(PathBuf, String),
}

/// Makes the key: 32 random bytes written whole into a new private file, then linked into
/// place, which never replaces an existing key (another chaperon's, made meanwhile, wins).
fn create(state_dir: &Path) -> Result<(), String> {
    let fail = |what: &Path, e: std::io::Error| format!("cannot make the user's record key {}: {e}", what.display());
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(state_dir).map_err(|e| fail(state_dir, e))?;
    let mut bytes = [0u8; KEY_LEN];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| fail(state_dir, std::io::Error::other("no randomness")))?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let tmp = state_dir.join(format!(".{KEY_FILE}.{}.{nanos}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()
    })();
    let linked = written.and_then(|()| match std::fs::hard_link(&tmp, state_dir.join(KEY_FILE)) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    });
    let _ = std::fs::remove_file(&tmp);
    linked.map_err(|e| fail(&state_dir.join(KEY_FILE), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_opens_only_for_its_purpose_context_and_bytes() {
        let k = Key::from_bytes(&[7; 32]);
        let sealed = k.seal("job.json", b"s-1-0", b"{\"a\":1}");
        assert_eq!(k.open("job.json", b"s-1-0", &sealed), Ok(&b"{\"a\":1}"[..]));
        assert_eq!(k.open("scope", b"s-1-0", &sealed), Err(Unsealed::Mismatch), "another purpose");
        assert_eq!(k.open("job.json", b"s-1-1", &sealed), Err(Unsealed::Mismatch), "another job directory");
        assert_eq!(Key::from_bytes(&[8; 32]).open("job.json", b"s-1-0", &sealed), Err(Unsealed::Mismatch));
        // Every byte changed, one at a time: the tag's digits and the data alike.
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            assert!(k.open("job.json", b"s-1-0", &bad).is_err(), "byte {i} altered");
        }
        let mut longer = sealed.clone();
        longer.push(b' ');
        assert_eq!(k.open("job.json", b"s-1-0", &longer), Err(Unsealed::Mismatch));
        assert_eq!(k.open("job.json", b"s-1-0", b"{\"a\":1}"), Err(Unsealed::NoSeal));
        assert_eq!(k.open("job.json", b"s-1-0", b""), Err(Unsealed::NoSeal));
        // The purpose and context are length-prefixed: moving a byte between them changes it.
        let a = k.seal("ab", b"c", b"d");
        assert!(k.open("a", b"bc", &a).is_err());
    }

    #[test]
    fn the_key_is_made_once_private_and_a_bad_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("chaperon-seal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(matches!(Key::load(&dir), Err(KeyError::Missing(_))));
        let k = Key::load_or_create(&dir).unwrap();
        let path = dir.join(KEY_FILE);
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!((m.mode() & 0o777, m.len()), (0o600, 32));
        let again = Key::load_or_create(&dir).unwrap();
        let s = k.seal("p", b"", b"x");
        assert!(again.open("p", b"", &s).is_ok(), "the same key, not a new one");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Key::load(&dir).unwrap_err().to_string().contains("mode 0600"));
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
        assert!(matches!(Key::load(&dir), Err(KeyError::Bad(..))), "a symlink is not followed");
        assert!(Key::load_or_create(&dir).is_err(), "nor replaced");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
