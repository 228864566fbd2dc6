//! The user's git config as the jail sees it: the session's copy of `~/.gitconfig` (and any
//! other global config file the jail shows) without what hands out a credential. Pure: the
//! bytes come from `HostFacts::user_configs`. What is left out, entry by entry (`DROPS`):
//! every `credential.*` entry (a helper is a program that hands out passwords, or names the
//! file that holds them); `http.*extraHeader` (an `Authorization:` header); `http.*cookieFile`
//! and `http.*sslKey` (a login cookie, a client key); `sendemail.*smtpPass`; any key whose name
//! says token, password, secret or API key (`github.token`, `hub.oauthtoken`); any entry whose
//! value or subsection is a URL carrying a password or a token as its user
//! (`url."https://x-access-token:T@github.com/".insteadOf`, `https://ghp_...@github.com`) or
//! holds a token of a known shape; and an `include.path` or `includeIf.*.path` that leads to a
//! hidden path (git stops on an include it may not read, as under the Landlock backend).

use crate::gitconfig::{parse, write, Entry};
use crate::host::GitConfigFile;
use std::path::Path;

/// What the jail gets of one config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to leave out: shown as it is.
    Unchanged,
    /// Shown as `text`: the entries, without those named in `dropped`, written anew (comments
    /// and layout are not kept).
    Stripped { text: String, dropped: Vec<String> },
    /// Not shown at all: it could not be read as git reads it, or is too large, or what is
    /// left is not text.
    Withheld { why: String },
}

/// Why an entry is left out, by its section and key (`*` any key of the section); the
/// subsection may be anything.
const DROPS: &[(&str, &str, &str)] = &[
    ("credential", "*", "a credential helper hands out passwords, or names the file that holds them"),
    ("http", "extraheader", "an extra header carries an Authorization token"),
    ("http", "cookiefile", "a cookie file holds a login session"),
    ("http", "sslkey", "the client certificate's private key"),
    ("sendemail", "smtppass", "the SMTP password"),
];

/// Words in a key's name that say it holds a secret.
const SECRET_WORDS: &[&str] = &["token", "password", "passwd", "secret", "apikey", "api-key"];

/// Prefixes of tokens issued by common hosts: a value that holds one is left out wherever it
/// is (GitHub, GitLab, Hugging Face, OpenAI/Anthropic, Slack, AWS, npm, PyPI, Google).
const TOKEN_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "gldt-",
    "glrt-",
    "hf_",
    "sk-",
    "xoxb-",
    "xoxp-",
    "AKIA",
    "ASIA",
    "npm_",
    "pypi-",
    "AIza",
    "ya29.",
];

/// The jail's view of `file`. `hidden` says whether a path is hidden in this plan; `home`
/// resolves `~/` in include paths.
pub fn strip(file: &GitConfigFile, home: &Path, hidden: &dyn Fn(&Path) -> bool) -> Outcome {
    let Some(bytes) = &file.bytes else {
        return Outcome::Withheld { why: format!("larger than {} bytes", crate::gitconfig::MAX_CONFIG) };
    };
    let entries = match parse(bytes) {
        Ok(e) => e,
        Err(e) => return Outcome::Withheld { why: format!("line {} is not git's config syntax", e.line) },
    };
    let dir = file.path.parent().unwrap_or(Path::new("/"));
    let (kept, dropped): (Vec<Entry>, Vec<Entry>) =
        entries.into_iter().partition(|e| drop_reason(e, dir, home, hidden).is_none());
    if dropped.is_empty() {
        return Outcome::Unchanged;
    }
    match String::from_utf8(write(&kept)) {
        Ok(text) => Outcome::Stripped { text, dropped: dropped.iter().map(shown_name).collect() },
        Err(_) => Outcome::Withheld { why: "a value that is not UTF-8 text".into() },
    }
}

/// Why `e` may not be in the jail's copy, if it may not.
pub fn drop_reason(e: &Entry, dir: &Path, home: &Path, hidden: &dyn Fn(&Path) -> bool) -> Option<&'static str> {
    if let Some((_, _, why)) = DROPS.iter().find(|(s, k, _)| *s == e.section && (*k == "*" || *k == e.key)) {
        return Some(why);
    }
    if SECRET_WORDS.iter().any(|w| e.key.contains(w)) {
        return Some("its name says it holds a secret");
    }
    let value = e.value.as_deref().unwrap_or(b"");
    let sub = e.subsection.as_deref().unwrap_or(b"");
    if carries_secret(value) || carries_secret(sub) {
        return Some("a URL with a password or token, or a token");
    }
    let include = e.key == "path" && matches!(e.section.as_str(), "include" | "includeif");
    if include {
        let target =
            std::str::from_utf8(value).ok().map(|v| lexical(&crate::host::configs::include_target(v, dir, home)));
        if target.is_some_and(|t| hidden(&t)) {
            return Some("it includes a hidden path");
        }
    }
    None
}

/// `p` with `.` and `..` taken lexically (git opens the path as written; `..` above `/` is `/`).
fn lexical(p: &Path) -> std::path::PathBuf {
    let mut out = std::path::PathBuf::from("/");
    for c in p.components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// A URL whose userinfo holds a password (`user:pw@`) or a token as the user name, or a
/// token of a known shape anywhere in the text.
pub fn carries_secret(v: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(v) else { return false };
    if TOKEN_PREFIXES.iter().any(|p| s.split(|c: char| !token_char(c)).any(|w| w.starts_with(p) && w.len() >= 16)) {
        return true;
    }
    let mut rest = s;
    while let Some(i) = rest.find("://") {
        let after = &rest[i + 3..];
        let authority = after.split(['/', '?', '#']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            if userinfo.contains(':') || looks_like_token(userinfo) {
                return true;
            }
        }
        rest = after;
    }
    false
}

fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-.".contains(c)
}

/// A user name that is a token (`https://ghp_x@github.com`, a 40-hex classic token): long
/// and of token characters; user names such as `git` or `jdoe` are not.
fn looks_like_token(user: &str) -> bool {
    user.len() >= 20 && user.chars().all(token_char)
}

/// The entry's name for messages, without a subsection that carries a secret.
fn shown_name(e: &Entry) -> String {
    match e.subsection.as_deref() {
        Some(s) if carries_secret(s) || s.contains(&b'@') => {
            format!("{}.<a URL with credentials>.{}", e.section, e.key)
        }
        _ => e.name(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn file(text: &str) -> GitConfigFile {
        GitConfigFile {
            path: "/home/u/.gitconfig".into(),
            bytes: Some(text.as_bytes().to_vec()),
            role: crate::host::configs::GitRole::Global,
        }
    }

    fn hidden(p: &Path) -> bool {
        p.starts_with("/home/u/.ssh") || p == Path::new("/home/u/.config/git/credentials")
    }

    /// Each of these hands out a credential, or leads git to one; the attack each stops is the
    /// agent reading the token from its copy of your config.
    #[test]
    fn every_way_a_config_carries_a_credential_is_left_out() {
        let cases = [
            ("[credential]\n\thelper = store\n", "credential.helper"),
            ("[credential \"https://h\"]\n\tusername = u\n", "credential.https://h.username"),
            ("[credential]\n\thelper = \"!f() { echo password=$TOKEN; }; f\"\n", "credential.helper"),
            ("[http]\n\textraHeader = Authorization: Bearer abc\n", "http.extraheader"),
            ("[http \"https://h/\"]\n\textraheader = AUTHORIZATION: basic eDp5\n", "http.https://h/.extraheader"),
            ("[http]\n\tcookieFile = ~/.gitcookies\n", "http.cookiefile"),
            ("[http \"https://h\"]\n\tsslKey = ~/k.pem\n", "http.https://h.sslkey"),
            ("[sendemail]\n\tsmtpPass = hunter2\n", "sendemail.smtppass"),
            ("[sendemail \"work\"]\n\tsmtppass = hunter2\n", "sendemail.work.smtppass"),
            ("[github]\n\ttoken = 0123456789abcdef\n", "github.token"),
            ("[hub]\n\toauthtoken = x\n", "hub.oauthtoken"),
            ("[gitlab]\n\tapiKey = x\n", "gitlab.apikey"),
            (
                "[url \"https://x-access-token:ghs_abcdefghijklmnop@github.com/\"]\n\tinsteadOf = https://github.com/\n",
                "url.<a URL with credentials>.insteadof",
            ),
            (
                "[url \"https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/\"]\n\tpushInsteadOf = gh:\n",
                "url.<a URL with credentials>.pushinsteadof",
            ),
            ("[url \"https://oauth2:glpat-abcdefghijklmnopqrst@gitlab.com/\"]\n\tinsteadOf = gl:\n", "url.<a URL with credentials>.insteadof"),
            ("[url \"https://github.com/\"]\n\tinsteadOf = https://u:pw@github.com/\n", "url.https://github.com/.insteadof"),
            ("[remote \"o\"]\n\turl = https://user:pass@h/r.git\n", "remote.o.url"),
            ("[http]\n\tproxy = http://u:p@proxy:3128\n", "http.proxy"),
            ("[alias]\n\tpush-it = !git push https://hf_abcdefghijklmnopqrstu@huggingface.co/x\n", "alias.push-it"),
            ("[include]\n\tpath = ~/.ssh/gitconfig\n", "include.path"),
            ("[includeIf \"gitdir:~/w/\"]\n\tpath = .config/../.config/git/credentials\n", "includeif.gitdir:~/w/.path"),
        ];
        for (cfg, name) in cases {
            match strip(&file(cfg), Path::new("/home/u"), &hidden) {
                Outcome::Stripped { text, dropped } => {
                    assert_eq!(dropped, vec![name.to_string()], "{cfg}");
                    assert!(text.is_empty(), "{cfg}: {text}");
                }
                other => panic!("{cfg}: {other:?}"),
            }
        }
    }

    #[test]
    fn what_configures_git_stays_and_reads_back_the_same() {
        let cfg = "# mine\n[user]\n\tname = Jo Doe\n\temail = jo@example.org\n\tsigningKey = ~/.ssh/id.pub\n\
[core]\n\teditor = vim\n[alias]\n\tst = status -sb\n[url \"git@github.com:\"]\n\tinsteadOf = https://github.com/\n\
[url \"ssh://git@gitlab.example.org/\"]\n\tinsteadOf = gl:\n[include]\n\tpath = ~/.gitconfig.local\n\
[http \"https://h\"]\n\tsslVerify = false\n[credential]\n\thelper = cache\n";
        match strip(&file(cfg), Path::new("/home/u"), &hidden) {
            Outcome::Stripped { text, dropped } => {
                assert_eq!(dropped, vec!["credential.helper"]);
                let before = parse(cfg.as_bytes()).expect("parses");
                let after = parse(text.as_bytes()).expect("parses");
                assert_eq!(after.len(), before.len() - 1);
                assert!(before.iter().filter(|e| e.section != "credential").eq(after.iter()), "{text}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(strip(&file("[user]\n\tname = x\n"), Path::new("/home/u"), &hidden), Outcome::Unchanged);
    }

    #[test]
    fn a_config_that_cannot_be_read_as_git_reads_it_is_withheld() {
        for bad in [
            GitConfigFile {
                path: PathBuf::from("/home/u/.gitconfig"),
                bytes: None,
                role: crate::host::configs::GitRole::Global,
            },
            file("[core\n"),
        ] {
            assert!(matches!(strip(&bad, Path::new("/home/u"), &hidden), Outcome::Withheld { .. }), "{bad:?}");
        }
    }

    #[test]
    fn plain_user_names_and_short_words_are_not_tokens() {
        for ok in
            ["https://jdoe@github.com/x", "ssh://git@h/r", "git@github.com:a/b", "sk-learn", "see hf_x", "https://h/"]
        {
            assert!(!carries_secret(ok.as_bytes()), "{ok}");
        }
    }
}
