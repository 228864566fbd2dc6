//! The stub <-> chaperon wire protocol: one frame is a 4-byte magic+version header, a u32
//! little-endian body length capped at `MAX_FRAME`, and a JSON body. Anything else is an
//! error, never a panic: the peer is the jail, which may send garbage on purpose.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};

pub const MAGIC: [u8; 3] = *b"ASB";
pub const VERSION: u8 = 1;
/// Largest body accepted: a batch script (at most 4 MiB) plus arguments (at most 1 MiB), JSON
/// escaped. Bigger requests are refused whole.
pub const MAX_FRAME: u32 = 12 << 20;
/// Bytes of frame bodies one process holds at once, across its connections: a jail that opens
/// many connections and sends most of a large frame on each cannot make the chaperon hold
/// more (issue 33, red team F8: 12 MiB a connection, 256 connections). Past it a frame is
/// refused at once (`Busy`), before any of its body is read.
pub const BODIES_IN_FLIGHT: u64 = 64 << 20;
static IN_FLIGHT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// A body is read (and grown) this much at a time: what is held is what was sent.
const CHUNK: usize = 64 << 10;

/// A reservation of `BODIES_IN_FLIGHT`, given back when dropped.
struct InFlight(u64);

impl InFlight {
    fn take(n: u64) -> Option<InFlight> {
        use std::sync::atomic::Ordering;
        IN_FLIGHT
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
                held.checked_add(n).filter(|t| *t <= BODIES_IN_FLIGHT)
            })
            .ok()
            .map(|_| InFlight(n))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(self.0, std::sync::atomic::Ordering::SeqCst);
    }
}

/// One Slurm command call from inside the jail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The command name the stub was invoked as (`sbatch`, `srun`...).
    pub command: String,
    pub argv: Vec<String>,
    pub cwd: String,
    /// The batch script the stub read, inside the jail, from sbatch's file argument: the
    /// file the jail sees (its private /tmp included), never a host path the chaperon opens.
    pub script: Option<String>,
    /// The Slurm-related environment variables that matter to the command.
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
pub enum Response {
    /// The command ran; its output went to the passed fds; this is its exit status.
    Exited { code: i32 },
    /// Refused before anything reached Slurm, with one line the agent can act on.
    Denied { reason: String },
    /// The chaperon failed (Slurm unreachable, internal error).
    Error { message: String },
    /// salloc: the allocation is granted. The stub runs `command` (empty: the caller's shell)
    /// in the jail with `env` added, and ends the connection when it ends, which relinquishes
    /// the allocation.
    Allocated { job: u32, env: BTreeMap<String, String>, command: Vec<String> },
}

/// Stub -> chaperon, after the request, while the command runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
pub enum Control {
    /// The stub got this signal (Ctrl-C: SIGINT): the chaperon passes it to the command.
    Signal { signal: i32 },
}

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("not an agent-sandbox frame (bad magic)")]
    BadMagic,
    #[error("protocol version {0} is not supported (this side speaks {VERSION})")]
    Version(u8),
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(u32),
    #[error("malformed frame body: {0}")]
    Body(#[from] serde_json::Error),
    #[error("the chaperon is busy (too many large requests at once); retry")]
    Busy,
}

pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, WireError> {
    let body = serde_json::to_vec(msg)?;
    let len = u32::try_from(body.len()).map_err(|_| WireError::TooLarge(u32::MAX))?;
    if len > MAX_FRAME {
        return Err(WireError::TooLarge(len));
    }
    let mut out = Vec::with_capacity(8 + body.len());
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), WireError> {
    w.write_all(&encode(msg)?)?;
    Ok(())
}

/// Takes one whole frame from the front of `buf` (bytes read so far): None while it is
/// incomplete. A frame longer than `max` is an error at once, before its body arrives.
pub fn take_frame<T: for<'de> Deserialize<'de>>(buf: &mut Vec<u8>, max: u32) -> Result<Option<T>, WireError> {
    if buf.len() >= 3 && buf[..3] != MAGIC {
        return Err(WireError::BadMagic);
    }
    if buf.len() < 8 {
        return Ok(None);
    }
    if buf[3] != VERSION {
        return Err(WireError::Version(buf[3]));
    }
    let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    if len > max.min(MAX_FRAME) {
        return Err(WireError::TooLarge(len));
    }
    let end = 8 + len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let msg = serde_json::from_slice(&buf[8..end]);
    buf.drain(..end);
    Ok(Some(msg?))
}

/// Reads one frame. The length is checked before any body byte is buffered.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> Result<T, WireError> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head)?;
    if head[..3] != MAGIC {
        return Err(WireError::BadMagic);
    }
    if head[3] != VERSION {
        return Err(WireError::Version(head[3]));
    }
    let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if len > MAX_FRAME {
        return Err(WireError::TooLarge(len));
    }
    let Some(_held) = InFlight::take(len as u64) else { return Err(WireError::Busy) };
    let mut body = Vec::with_capacity((len as usize).min(CHUNK));
    let got = r.take(len as u64).read_to_end(&mut body)?;
    if got < len as usize {
        return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(serde_json::from_slice(&body)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> Request {
        Request {
            command: "sbatch".into(),
            argv: vec!["--wrap".into(), "true".into()],
            cwd: "/home/u/p".into(),
            script: Some("#!/bin/sh\necho hi\n".into()),
            env: BTreeMap::from([("SLURM_SCOPE".into(), "project".into())]),
        }
    }

    #[test]
    fn round_trip() {
        let bytes = encode(&req()).unwrap();
        let back: Request = read_frame(&mut bytes.as_slice()).unwrap();
        assert_eq!(back, req());
        let r = Response::Denied { reason: "--uid is not allowed".into() };
        let back: Response = read_frame(&mut encode(&r).unwrap().as_slice()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn oversized_length_is_refused_before_reading_the_body() {
        let mut f = Vec::from(MAGIC);
        f.push(VERSION);
        f.extend_from_slice(&(MAX_FRAME + 1).to_le_bytes());
        assert!(matches!(read_frame::<Request>(&mut f.as_slice()), Err(WireError::TooLarge(_))));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for g in
            [&b""[..], b"GET / HTTP/1.1\r\n\r\n", b"ASB\x02\0\0\0\0", b"ASB\x01\x05\0\0\0{{{{{", b"ASB\x01\x02\0\0\0{}"]
        {
            assert!(read_frame::<Request>(&mut &g[..]).is_err(), "{g:?}");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let body = br#"{"command":"sbatch","argv":[],"cwd":"/","script":null,"env":{},"uid":0}"#;
        let mut f = Vec::from(MAGIC);
        f.push(VERSION);
        f.extend_from_slice(&(body.len() as u32).to_le_bytes());
        f.extend_from_slice(body);
        assert!(matches!(read_frame::<Request>(&mut f.as_slice()), Err(WireError::Body(_))));
    }

    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn half_sent_frames_hold_a_bounded_amount_of_memory() {
        // Red team F8: each connection announcing 12 MiB and sending all but a byte made the
        // chaperon hold 12 MiB; 32 of them, 411 MB.
        // Measured in a process of its own: the other tests of this binary, running beside it,
        // grow the same resident set.
        const ALONE: &str = "CHAPERON_WIRE_MEMORY_TEST_ALONE";
        if std::env::var_os(ALONE).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "wire::tests::half_sent_frames_hold_a_bounded_amount_of_memory", "--test-threads=1"])
                .env(ALONE, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("1 passed"),
                "{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        use std::os::unix::net::UnixStream;
        let before = rss_kib();
        let mut held = vec![];
        for _ in 0..16 {
            let (mut jail, chaperon) = UnixStream::pair().unwrap();
            let reader = std::thread::spawn(move || {
                let mut c = chaperon;
                read_frame::<Request>(&mut c)
            });
            let writer = std::thread::spawn(move || {
                let mut f = Vec::from(MAGIC);
                f.push(VERSION);
                f.extend_from_slice(&MAX_FRAME.to_le_bytes());
                f.extend(std::iter::repeat_n(b' ', MAX_FRAME as usize - 1));
                let _ = jail.set_write_timeout(Some(std::time::Duration::from_secs(20)));
                let _ = jail.write_all(&f);
                jail
            });
            held.push((reader, writer));
        }
        // Every writer has sent what its reader took (or was refused at once).
        let mut peers = vec![];
        let mut readers = vec![];
        for (reader, writer) in held {
            peers.push(writer.join().unwrap());
            readers.push(reader);
        }
        let grown_mib = rss_kib().saturating_sub(before) / 1024;
        drop(peers);
        let results: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        assert!(grown_mib <= (BODIES_IN_FLIGHT >> 20) + 32, "{grown_mib} MiB held for 16 half frames");
        assert!(results.iter().any(|r| matches!(r, Err(WireError::Busy))), "past the budget: busy");
    }
}
