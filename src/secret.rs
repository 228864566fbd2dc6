//! A session's secret: 32 random bytes its jobs prove to its job ports and every jail of the
//! session to the others (`net::cluster`), made once by the session and carried to its jobs in
//! the frozen policy (hex, in the job directory only the user reads). Typed from where it is
//! made or read to where it signs: never a string on the way, never printed (`Debug` shows no
//! byte of it).

/// Bytes of the secret and of each proof.
pub const LEN: usize = 32;

/// A session's job-port secret: 32 random bytes, shown as hex only in the job directory.
#[derive(Clone)]
pub struct Secret([u8; LEN]);

impl Secret {
    pub fn new() -> Result<Secret, String> {
        crate::random::bytes::<LEN>().map(Secret).map_err(|e| format!("no randomness for the job ports' secret: {e}"))
    }

    pub fn from_hex(h: &str) -> Option<Secret> {
        let h = h.trim();
        if h.len() != 2 * LEN || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut b = [0u8; LEN];
        for (i, out) in b.iter_mut().enumerate() {
            *out = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Secret(b))
    }

    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The HMAC-SHA256 of `parts`, one after the other, under the secret: every proof of the
    /// job ports and of the session network (`net::cluster::peers`).
    pub(crate) fn sign(&self, parts: &[&[u8]]) -> ring::hmac::Tag {
        let mut ctx = ring::hmac::Context::with_key(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.0));
        for part in parts {
            ctx.update(part);
        }
        ctx.sign()
    }

    /// Whether `tag` is `sign(parts)` (compared in constant time).
    pub(crate) fn verifies(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        ring::hmac::verify(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.0), &parts.concat(), tag).is_ok()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn a_secret_goes_to_hex_and_back_and_is_never_shown() {
        let s = Secret::new().unwrap();
        let back = Secret::from_hex(&s.hex()).unwrap();
        assert!(back.verifies(&[b"x"], s.sign(&[b"x"]).as_ref()));
        assert_eq!(back.hex(), s.hex());
        assert_eq!(format!("{s:?}"), "Secret(..)");
        assert!(Secret::from_hex("zz").is_none() && Secret::from_hex(&"0".repeat(63)).is_none());
        for bad in ["", "00", &"zz".repeat(32), &"00".repeat(33)] {
            assert!(Secret::from_hex(bad).is_none(), "{bad}");
        }
    }
}
