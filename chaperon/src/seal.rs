//! The user's record key, and the seals made with it: what the chaperon writes into the state
//! directory for itself or for a compute node (a job's `job.json`, each line of a project's
//! scope record) carries an HMAC-SHA256 under a key that no jail ever sees, and is read back
//! only once the seal checks. The state directory is hidden in every jail; should a jail reach
//! it all the same (a `~/.local` symlinked into a tree it may write), what it writes there is
//! refused, never used, so it cannot choose what a job runs, which jobs a session acts on, or
//! which directory a cleanup removes.
//!
//! ```text
//! <state>/records.key   the key ring, 0600, one link, made by the launcher before any jail
//!                       of the user's runs: 40 bytes a key, newest first, each the time it
//!                       was made (8 bytes, seconds since the epoch, big-endian) and the key
//!                       (32 random bytes). A 32-byte file is one key of an earlier
//!                       version, made when its mtime says. Replaced whole (a new file
//!                       renamed over it, under records.key.lock), never written in place;
//!                       read through a descriptor opened without following a symlink.
//!                       Homes are shared: the compute nodes read the same ring.
//! sealed text           "<64 hex digits of HMAC-SHA256> <data>"; the MAC covers a purpose
//!                       ("job.json", "scope"), a context (the job directory's name) and
//!                       the data, so a sealed text is good for one use in one place only.
//!                       Sealed with the newest key; opened by any key of the ring.
//! ```
//!
//! Rotation (`ensure`): a key seals for `ROTATE_AFTER` (30 days), then a new one is made in
//! front of it. A retired key stays in the ring `RETIRED_KEEP` (30 days) after it was
//! retired, and past that as long as a job directory still holds a spec sealed with it (a
//! job pending that long), so no pending job is refused for a rotation. A key a jail once read
//! (or planted) is good for at most those two periods, and for as long as such a job waits.

use ring::hmac;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The key's file name in the state directory.
pub const KEY_FILE: &str = "records.key";
const KEY_LEN: usize = 32;
const TAG_HEX: usize = 64;

/// The user's record key ring: the newest key seals, any of them opens.
pub struct Key(Vec<hmac::Key>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({} in the ring)", self.0.len())
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

/// How long the newest key seals before a new one is made in front of it.
pub const ROTATE_AFTER: u64 = 30 * 86400;
/// How long a retired key stays in the ring at least (then as long as a job still needs it).
pub const RETIRED_KEEP: u64 = 30 * 86400;
/// The most keys the ring holds: the oldest beyond it go, used or not (a job pending for
/// `MAX_KEYS` rotations is refused, and resubmitted).
const MAX_KEYS: usize = 8;
const ENTRY: usize = 8 + KEY_LEN;
/// The lock under which the ring is made or replaced.
const LOCK_FILE: &str = "records.key.lock";

/// How far ahead of the clock a key's made time may be (another node's clock) before the
/// ring is taken as planted and rotated at once.
const AHEAD_SKEW: u64 = 86400;

/// The ring as read: (made, key bytes), newest first, and its file's ctime. The made times
/// are whatever was written (by the launcher, or by anyone who could write the state
/// directory); the ctime is the kernel's, which the user cannot set: a key is taken as made
/// no later than its file was written (`made`), so that a ring planted with a far "made"
/// time rotates as soon as one written then would.
struct Ring(Vec<(u64, [u8; KEY_LEN])>, u64);

impl Ring {
    /// When key `i` was made at the latest: its own time, or its file's ctime if earlier.
    fn made(&self, i: usize) -> u64 {
        self.0[i].0.min(self.1)
    }

    /// A key claims to be made after `now` (beyond another clock's skew): planted.
    fn ahead(&self, now: u64) -> bool {
        self.0.iter().any(|(m, _)| *m > now.saturating_add(AHEAD_SKEW))
    }
}

impl Key {
    /// The ring in `state_dir`, made there first if there is none (by the chaperon, outside
    /// every jail; the launcher made it before the session already, `ensure`).
    pub fn load_or_create(state_dir: &Path) -> Result<Key, String> {
        match Key::load(state_dir) {
            Err(KeyError::Missing(_)) => {
                ensure(state_dir, now(), &|_| true)?;
                Key::load(state_dir).map_err(|e| e.to_string())
            }
            other => other.map_err(|e| e.to_string()),
        }
    }

    /// The ring in `state_dir`: a regular file of this user with one link, that nobody else
    /// can read or write, of whole keys.
    pub fn load(state_dir: &Path) -> Result<Key, KeyError> {
        let ring = read_ring(state_dir)?;
        Ok(Key(ring.0.iter().map(|(_, k)| hmac::Key::new(hmac::HMAC_SHA256, k)).collect()))
    }

    /// The ring in the bytes of a `records.key` (what `load` reads, without its checks of
    /// the file): for tests that act as the user, who can read it. None if not whole keys.
    pub fn from_ring(bytes: &[u8]) -> Option<Key> {
        let ring = parse_ring(bytes, 0)?;
        Some(Key(ring.0.iter().map(|(_, k)| hmac::Key::new(hmac::HMAC_SHA256, k)).collect()))
    }

    pub fn from_bytes(bytes: &[u8]) -> Key {
        Key(vec![hmac::Key::new(hmac::HMAC_SHA256, bytes)])
    }

    /// The MAC of `data` for `purpose` in `context`: each is length-prefixed, so no two
    /// different triples are the same message.
    fn tag(&self, purpose: &str, context: &[u8], data: &[u8]) -> hmac::Tag {
        let mut c = hmac::Context::with_key(&self.0[0]);
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
        // Any key of the ring: a text sealed before the last rotation still opens.
        match self.0.iter().any(|k| hmac::verify(k, &msg, &tag).is_ok()) {
            true => Ok(data),
            false => Err(Unsealed::Mismatch),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the user's record key {0} is missing (the launcher makes it before every session); fix: resubmit the job from a session")]
    Missing(PathBuf),
    #[error("the user's record key {0} cannot be used: {1}; fix: remove it (jobs submitted before then will be refused and must be resubmitted)")]
    Bad(PathBuf, String),
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Reads the ring: opened without following a symlink, and only a private regular file of
/// this user with one link (a hard link elsewhere, made by a jail that once reached the
/// state directory, would keep the key readable from there) and whole keys.
fn read_ring(state_dir: &Path) -> Result<Ring, KeyError> {
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
    let len = m.len() as usize;
    let whole = len == KEY_LEN || (len.is_multiple_of(ENTRY) && (1..=MAX_KEYS).contains(&(len / ENTRY)));
    if !m.is_file() || m.uid() != me || m.mode() & 0o077 != 0 || m.nlink() != 1 || !whole {
        return Err(KeyError::Bad(
            path,
            format!(
                "not a regular file of uid {me} with mode 0600, one link and whole keys (uid {}, mode {:o}, {} links, \
                 {} bytes)",
                m.uid(),
                m.mode() & 0o7777,
                m.nlink(),
                m.len()
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(len + 1);
    (&f).take(len as u64 + 1).read_to_end(&mut bytes).map_err(|e| KeyError::Bad(path.clone(), e.to_string()))?;
    if bytes.len() != len {
        return Err(KeyError::Bad(path, format!("{} bytes read, not {len}", bytes.len())));
    }
    let mut ring =
        parse_ring(&bytes, m.mtime().max(0) as u64).ok_or_else(|| KeyError::Bad(path, "not whole keys".into()))?;
    ring.1 = m.ctime().max(0) as u64;
    Ok(ring)
}

/// The ring in `bytes`: 40 bytes a key, or an earlier version's single key of 32 bytes, made
/// at `mtime` (its file's).
fn parse_ring(bytes: &[u8], mtime: u64) -> Option<Ring> {
    let key = |b: &[u8]| -> [u8; KEY_LEN] {
        let mut k = [0u8; KEY_LEN];
        k.copy_from_slice(b);
        k
    };
    let len = bytes.len();
    if len == KEY_LEN {
        return Some(Ring(vec![(mtime, key(bytes))], u64::MAX));
    }
    if len == 0 || !len.is_multiple_of(ENTRY) || len / ENTRY > MAX_KEYS {
        return None;
    }
    Some(Ring(
        bytes
            .chunks(ENTRY)
            .map(|e| (u64::from_be_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]), key(&e[8..])))
            .collect(),
        u64::MAX,
    ))
}

/// Whether the ring needs a change at `now`: none yet, its newest key is due for rotation
/// (or claims a time to come), or a retired key is past its keep (whether a job still needs
/// it is asked under the lock). Ages count from `Ring::made`.
fn due(ring: &Ring, now: u64) -> bool {
    let keys = &ring.0;
    keys.is_empty()
        || ring.ahead(now)
        || now.saturating_sub(ring.made(0)) >= ROTATE_AFTER
        || keys.len() > MAX_KEYS
        || (1..keys.len()).any(|i| now.saturating_sub(ring.made(i - 1)) >= RETIRED_KEEP)
}

/// The ring of `state_dir` as it should be at `now` (seconds since the epoch): made if there
/// is none, a new key in front once the newest is `ROTATE_AFTER` old, retired keys dropped
/// once retired `RETIRED_KEEP` ago and no longer `in_use` (a job directory's spec sealed
/// with it). Run by the launcher before every session, outside every jail, so that the key
/// exists before a jail could plant one; cheap when nothing is due (one read). What it did,
/// for the audit log.
pub fn ensure(state_dir: &Path, now: u64, in_use: &dyn Fn(&Key) -> bool) -> Result<Option<String>, String> {
    let fail = |what: &Path, e: std::io::Error| format!("cannot make the user's record key {}: {e}", what.display());
    match read_ring(state_dir) {
        Ok(r) if !due(&r, now) => return Ok(None),
        Ok(_) | Err(KeyError::Missing(_)) => {}
        Err(e) => return Err(e.to_string()),
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(state_dir).map_err(|e| fail(state_dir, e))?;
    let lock_path = state_dir.join(LOCK_FILE);
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&lock_path)
        .map_err(|e| fail(&lock_path, e))?;
    // Released when it is closed.
    agent_sandbox_sys::file::flock(&lock, libc::LOCK_EX).map_err(|e| fail(&lock_path, e))?;
    // Read again under the lock: another launcher may have done it meanwhile.
    let (mut keys, existed, ahead) = match read_ring(state_dir) {
        Ok(r) if !due(&r, now) => return Ok(None),
        // Each key's time as `Ring::made` says, kept so in the ring written now.
        Ok(r) => ((0..r.0.len()).map(|i| (r.made(i), r.0[i].1)).collect(), true, r.ahead(now)),
        Err(KeyError::Missing(_)) => (vec![], false, false),
        Err(e) => return Err(e.to_string()),
    };
    let mut did = vec![];
    let fresh = || -> Result<[u8; KEY_LEN], String> {
        let mut bytes = [0u8; KEY_LEN];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| fail(state_dir, std::io::Error::other("no randomness")))?;
        Ok(bytes)
    };
    if keys.is_empty() {
        keys.push((now, fresh()?));
        did.push("made the record key".to_string());
    } else if ahead {
        // Something that could write the state directory made this ring: none of its keys
        // opens anything from now on (a job pending under the old ring is refused and can be
        // submitted again), or a planted key would stay good for its retirement period.
        let dropped = keys.len();
        keys = vec![(now, fresh()?)];
        did.push(format!(
            "made a new record key and dropped the {dropped} of the ring: it held a key claiming to be made in \
             the future (planted by something that could write the state directory?); jobs pending under them \
             are refused and can be submitted again"
        ));
    } else if now.saturating_sub(keys[0].0) >= ROTATE_AFTER {
        keys.insert(0, (now, fresh()?));
        did.push("made a new record key (the last one is 30 days old), the old one kept to open what it sealed".into());
    }
    let before = keys.len();
    let made: Vec<u64> = keys.iter().map(|(m, _)| *m).collect();
    let mut i = 0;
    keys.retain(|(_, k)| {
        i += 1;
        // The newest stays; a retired one while it is recent, or a job still needs it.
        i == 1 || now.saturating_sub(made[i - 2]) < RETIRED_KEEP || in_use(&Key::from_bytes(k))
    });
    keys.truncate(MAX_KEYS);
    if keys.len() < before {
        did.push(format!("dropped {} retired record key(s) no pending job needs", before - keys.len()));
    }
    if did.is_empty() {
        return Ok(None);
    }
    write_ring(state_dir, &keys, existed).map_err(|e| fail(&state_dir.join(KEY_FILE), e))?;
    Ok(Some(did.join("; ")))
}

/// Writes the ring whole into a new private file, then puts it in place: renamed over the
/// ring it replaces (under the lock), or linked where there was none, which never replaces
/// a ring made meanwhile by an earlier version's chaperon (which made it without the lock).
fn write_ring(state_dir: &Path, keys: &[(u64, [u8; KEY_LEN])], existed: bool) -> std::io::Result<()> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let tmp = state_dir.join(format!(".{KEY_FILE}.{}.{nanos}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        let mut bytes = Vec::with_capacity(keys.len() * ENTRY);
        for (made, k) in keys {
            bytes.extend_from_slice(&made.to_be_bytes());
            bytes.extend_from_slice(k);
        }
        f.write_all(&bytes)?;
        f.sync_all()
    })();
    let placed = written.and_then(|()| match existed {
        true => std::fs::rename(&tmp, state_dir.join(KEY_FILE)),
        false => match std::fs::hard_link(&tmp, state_dir.join(KEY_FILE)) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            other => other,
        },
    });
    let _ = std::fs::remove_file(&tmp);
    placed
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
        assert_eq!((m.mode() & 0o777, m.len()), (0o600, ENTRY as u64));
        let again = Key::load_or_create(&dir).unwrap();
        let s = k.seal("p", b"", b"x");
        assert!(again.open("p", b"", &s).is_ok(), "the same key, not a new one");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "the ring and its lock, no temporary file left: {names:?}");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Key::load(&dir).unwrap_err().to_string().contains("mode 0600"));
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
        assert!(matches!(Key::load(&dir), Err(KeyError::Bad(..))), "a symlink is not followed");
        assert!(Key::load_or_create(&dir).is_err(), "nor replaced");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("chaperon-seal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// A hard link elsewhere (made by a jail that once reached the state directory) would keep
    /// the key readable from there: a ring with two links is refused, and left alone.
    #[test]
    fn a_hard_linked_key_is_refused() {
        let dir = fresh_dir("nlink");
        Key::load_or_create(&dir).unwrap();
        std::fs::hard_link(dir.join(KEY_FILE), dir.join("innocent-name")).unwrap();
        let e = Key::load(&dir).unwrap_err().to_string();
        assert!(e.contains("2 links") && e.contains("fix: remove it"), "{e}");
        assert!(ensure(&dir, now(), &|_| true).is_err(), "nor used to rotate");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A key is replaced after 30 days; what the old one sealed opens while the old one is
    /// kept (30 days after it was retired, and then while a job still needs it), then no more.
    #[test]
    fn the_key_rotates_and_old_seals_open_until_their_key_is_dropped() {
        let dir = fresh_dir("rotate");
        let t0 = 1_700_000_000;
        assert_eq!(ensure(&dir, t0, &|_| false).unwrap().as_deref(), Some("made the record key"));
        assert_eq!(ensure(&dir, t0 + 10, &|_| false).unwrap(), None, "nothing due");
        let old = Key::load(&dir).unwrap();
        let sealed = old.seal("job.json", b"j", b"spec");
        let t1 = t0 + ROTATE_AFTER;
        assert!(ensure(&dir, t1, &|_| false).unwrap().unwrap().contains("new record key"));
        let ring = Key::load(&dir).unwrap();
        assert_eq!(ring.0.len(), 2);
        assert!(ring.open("job.json", b"j", &sealed).is_ok(), "sealed before the rotation");
        let new = ring.seal("job.json", b"j", b"spec");
        assert!(old.open("job.json", b"j", &new).is_err(), "sealed with the new key");
        // Past its keep: kept while a job needs it, dropped once none does.
        // (Also the next rotation, the second key being as old by then.)
        let t2 = t1 + RETIRED_KEEP.max(ROTATE_AFTER);
        let did = ensure(&dir, t2, &|k| k.open("job.json", b"j", &sealed).is_ok()).unwrap().unwrap();
        assert!(!did.contains("dropped"), "{did}");
        assert_eq!(Key::load(&dir).unwrap().0.len(), 3, "a pending job still needs the first");
        assert!(ensure(&dir, t2, &|_| false).unwrap().unwrap().contains("dropped 1"));
        let ring = Key::load(&dir).unwrap();
        assert_eq!(ring.0.len(), 2);
        assert!(ring.open("job.json", b"j", &sealed).is_err(), "the old key is gone");
        assert!(ring.open("job.json", b"j", &new).is_ok());
        let m = std::fs::metadata(dir.join(KEY_FILE)).unwrap();
        assert_eq!((m.mode() & 0o777, m.nlink()), (0o600, 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A key of an earlier version (32 bytes) is read as one key made when its file was, and
    /// rotated as any.
    #[test]
    fn an_earlier_versions_key_is_read_and_rotated() {
        let dir = fresh_dir("legacy");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(KEY_FILE);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .unwrap()
            .write_all(&[5; 32])
            .unwrap();
        let sealed = Key::from_bytes(&[5; 32]).seal("scope", b"f", b"line");
        assert!(Key::load(&dir).unwrap().open("scope", b"f", &sealed).is_ok());
        assert!(ensure(&dir, now() + ROTATE_AFTER, &|_| false).unwrap().is_some());
        let ring = Key::load(&dir).unwrap();
        assert_eq!(ring.0.len(), 2);
        assert!(ring.open("scope", b"f", &sealed).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A ring planted with a "made" time to come (outside review of the anchors, N6) is
    /// rotated at once, and one whose time is a little ahead counts its age from its file's
    /// ctime (which the user cannot set): a planted key is good for no longer than a read one.
    #[test]
    fn a_ring_planted_with_a_time_to_come_is_rotated() {
        let dir = fresh_dir("ahead");
        std::fs::create_dir_all(&dir).unwrap();
        let plant = |made: u64| {
            let _ = std::fs::remove_file(dir.join(KEY_FILE));
            let mut bytes = made.to_be_bytes().to_vec();
            bytes.extend_from_slice(&[7; KEY_LEN]);
            let mut f = std::fs::OpenOptions::new();
            f.write(true).create_new(true).mode(0o600);
            f.open(dir.join(KEY_FILE)).unwrap().write_all(&bytes).unwrap();
        };
        let planted = Key::from_bytes(&[7; KEY_LEN]).seal("job.json", b"j", b"forged");
        plant(4_102_444_800); // 2100-01-01
        let did = ensure(&dir, now(), &|_| false).unwrap().unwrap();
        assert!(did.contains("in the future"), "{did}");
        let ring = read_ring(&dir).unwrap();
        assert_eq!(ring.0.len(), 1, "the planted ring is dropped whole (second review, S4)");
        assert_ne!(ring.0[0].1, [7; KEY_LEN], "a new key seals");
        assert!(Key::load(&dir).unwrap().open("job.json", b"j", &planted).is_err(), "the planted key opens nothing");
        // A time a little ahead (within the skew): its age counts from the file's ctime.
        plant(now() + 3600);
        assert!(ensure(&dir, now() + ROTATE_AFTER, &|_| false).unwrap().is_some(), "rotated 30 days after planting");
        // An earlier version's single key with a modification time to come.
        let _ = std::fs::remove_file(dir.join(KEY_FILE));
        let f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(dir.join(KEY_FILE)).unwrap();
        (&f).write_all(&[9; 32]).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(4_102_444_800)).unwrap();
        assert!(ensure(&dir, now(), &|_| false).unwrap().unwrap().contains("in the future"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
