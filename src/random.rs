//! The launcher's one source of secret randomness: the kernel's, through `ring`, so tokens,
//! nonces and secrets cannot be told apart by where they came from, and none falls back to
//! something predictable when the kernel has none to give.

use std::io;

/// `N` random bytes, or an error: never a predictable stand-in.
pub fn bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b)
        .map_err(|_| io::Error::other("the kernel gave no random bytes (getrandom)"))?;
    Ok(b)
}

/// `N` random bytes as `2N` lowercase hex digits.
pub fn hex<const N: usize>() -> io::Result<String> {
    Ok(bytes::<N>()?.iter().map(|x| format!("{x:02x}")).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_draw_is_new_and_hex_is_twice_as_long() {
        let a = super::bytes::<16>().unwrap();
        let b = super::bytes::<16>().unwrap();
        assert_ne!(a, b);
        let h = super::hex::<16>().unwrap();
        assert_eq!(h.len(), 32);
        assert!(h.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
}
