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

/// A pattern compiled once for matching many names (environment scrubbing runs every
/// pattern against every variable at each start): the common shapes `NAME`, `PREFIX*`,
/// `*SUFFIX` and `*PART*` become plain byte comparisons; anything else uses `glob_match`.
pub struct Pattern {
    shape: Shape,
    ci: bool,
}

enum Shape {
    Exact(Vec<u8>),
    Prefix(Vec<u8>),
    Suffix(Vec<u8>),
    Contains(Vec<u8>),
    Other(String),
}

impl Pattern {
    pub fn new(pattern: &str, case_insensitive: bool) -> Pattern {
        let p = if case_insensitive { pattern.to_ascii_lowercase() } else { pattern.to_string() };
        let inner_free = |s: &str| !s.contains(['*', '?']);
        let b = p.as_bytes();
        let shape = if inner_free(&p) {
            Shape::Exact(b.to_vec())
        } else if p.len() >= 2 && p.starts_with('*') && p.ends_with('*') && inner_free(&p[1..p.len() - 1]) {
            Shape::Contains(b[1..b.len() - 1].to_vec())
        } else if p.ends_with('*') && inner_free(&p[..p.len() - 1]) {
            Shape::Prefix(b[..b.len() - 1].to_vec())
        } else if p.starts_with('*') && inner_free(&p[1..]) {
            Shape::Suffix(b[1..].to_vec())
        } else {
            Shape::Other(p)
        };
        Pattern { shape, ci: case_insensitive }
    }

    pub fn matches(&self, text: &str) -> bool {
        let t = text.as_bytes();
        let eq = |a: &[u8], b: &[u8]| if self.ci { a.eq_ignore_ascii_case(b) } else { a == b };
        match &self.shape {
            Shape::Exact(p) => eq(t, p),
            Shape::Prefix(p) => t.len() >= p.len() && eq(&t[..p.len()], p),
            Shape::Suffix(p) => t.len() >= p.len() && eq(&t[t.len() - p.len()..], p),
            Shape::Contains(p) => p.is_empty() || t.windows(p.len()).any(|w| eq(w, p)),
            Shape::Other(p) if self.ci => glob_match_ci(p, text),
            Shape::Other(p) => glob_match(p, text),
        }
    }
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
        // Compiled patterns decide exactly as glob_match does.
        let patterns =
            ["SSH_*", "*_TOKEN", "*password*", "KUBECONFIG", "*", "a?c", "*a*b", "", "**", "*x", "x*", "*_*_*"];
        let texts = [
            "SSH_AUTH_SOCK",
            "GH_TOKEN",
            "DB_PASSWORD",
            "db_password_file",
            "KUBECONFIG",
            "kubeconfig",
            "abc",
            "",
            "x",
            "_a_b_",
            "PASSWORD",
        ];
        for p in patterns {
            for ci in [false, true] {
                let c = Pattern::new(p, ci);
                for t in texts {
                    let want = if ci { glob_match_ci(p, t) } else { glob_match(p, t) };
                    assert_eq!(c.matches(t), want, "{p} ci={ci} vs {t}");
                }
            }
        }
        assert!(!glob_match("*password*", "DB_PASSWORD_FILE"));
    }
}
