//! Shell-style `*` and `?` matching for policy patterns (paths, env names, device globs).
//! No character classes and no `**`: policy patterns stay simple enough to read at a glance.

/// Matches `text` against `pattern` where `*` is any run (also empty) and `?` one byte.
/// Works on bytes without allocating: it runs for every variable and mount at startup.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    glob_bytes(pattern.as_bytes(), text.as_bytes(), |a, b| a == b)
}

/// Case-insensitive (ASCII) variant, for environment patterns such as `*password*`.
pub fn glob_match_ci(pattern: &str, text: &str) -> bool {
    glob_bytes(pattern.as_bytes(), text.as_bytes(), |a, b| a.eq_ignore_ascii_case(&b))
}

fn glob_bytes(p: &[u8], t: &[u8], eq: impl Fn(u8, u8) -> bool) -> bool {
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] != b'*' && (p[pi] == b'?' || eq(p[pi], t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

pub fn has_glob(s: &str) -> bool {
    s.contains('*') || s.contains('?')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases = [
            ("*", "", true),
            ("*", "abc", true),
            ("SSH_*", "SSH_AUTH_SOCK", true),
            ("SSH_*", "XSSH_AUTH", false),
            ("*_TOKEN", "GH_TOKEN", true),
            ("*_TOKEN", "GH_TOKENS", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("/dev/nvidia*", "/dev/nvidia0", true),
            ("/dev/nvidia*", "/dev/nvidiactl", true),
            ("/dev/nvidia*", "/dev/dri/card0", false),
            ("*a*b*", "xxaxxbxx", true),
            ("*a*b", "xxaxxbxxb", true),
            ("", "", true),
            ("", "a", false),
        ];
        for (p, t, want) in cases {
            assert_eq!(glob_match(p, t), want, "{p} vs {t}");
        }
        assert!(glob_match_ci("*password*", "DB_PASSWORD_FILE"));
        assert!(!glob_match("*password*", "DB_PASSWORD_FILE"));
    }
}
