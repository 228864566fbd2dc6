//! The project's `.env` at exit (review of the agents' homes, A4): aider and Gemini CLI,
//! started outside the jail in the project, load it into their environment, and some of its
//! variables decide what they run or where they send the user's key (`AIDER_LOAD` runs
//! `/run` commands at start, `GOOGLE_GEMINI_BASE_URL` and `*_API_BASE` send the key to another
//! host, `GEMINI_SYSTEM_MD` replaces the system prompt, `BASH_ENV` or `LD_PRELOAD` run code in
//! every command they start). The file stays the jail's to write (everyday data); once the
//! session has ended, a `.env` into which it added or changed such a variable is put back as
//! it was, the jail's version kept aside, named in one line and in the audit log. While the
//! session runs, an agent started outside reads what the jail wrote (docs/security-model.md).

use std::path::{Path, PathBuf};

/// A `.env` larger than this is not kept (nor checked: said at the start).
pub const MAX_BYTES: u64 = 1 << 20;

/// Who reads a variable as something that decides what runs or where the key goes: None for
/// an ordinary one. Names are compared as they are (the environment's are case-sensitive),
/// but for proxies, which programs also read in lower case.
pub fn controls(n: &str) -> Option<&'static str> {
    let prefixed = |ps: &[&str]| ps.iter().any(|p| n.starts_with(p));
    let suffixed = |ss: &[&str]| ss.iter().any(|s| n.ends_with(s));
    if prefixed(&["AIDER_", "LITELLM_", "OPENAI_", "ANTHROPIC_", "AZURE_", "OLLAMA_", "OPENROUTER_"])
        || prefixed(&["AWS_", "WATSONX", "WX_", "GIGACHAT", "HF_", "HUGGINGFACE_", "MISTRAL_", "GROQ_", "COHERE_"])
    {
        return Some("aider (its options, and the hosts and keys of its models)");
    }
    if prefixed(&["GEMINI_", "GOOGLE_", "CODE_ASSIST_", "SANDBOX", "SEATBELT_", "VERTEX"]) {
        return Some("Gemini CLI (its host, system prompt, sandbox and settings)");
    }
    let upper = n.to_ascii_uppercase();
    if suffixed(&["_BASE_URL", "_API_BASE", "_API_URL", "_API_HOST", "_ENDPOINT"]) || upper.ends_with("_PROXY") {
        return Some("the agents' HTTP clients (where the key is sent)");
    }
    // Set in most projects' `.env`, and they change no program run nor host.
    let plain = ["NODE_ENV", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONUTF8"];
    if plain.contains(&n) {
        return None;
    }
    // What decides which program runs, where configs that run one are read from (`HOME`,
    // `XDG_*`: git's config), options that load code, and certificate stores (a host in the
    // middle reads the key).
    let runs = [
        "PATH",
        "HOME",
        "BASH_ENV",
        "ENV",
        "SHELL",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "IFS",
        "EDITOR",
        "VISUAL",
        "BROWSER",
        "PAGER",
        "MANPAGER",
        "LESSOPEN",
        "LESSCLOSE",
        "ZDOTDIR",
        "PROMPT_COMMAND",
        "PERL5OPT",
        "PERL5LIB",
        "PERL5DB",
        "RUBYOPT",
        "RUBYLIB",
        "GCONV_PATH",
        "LUA_INIT",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
    ];
    let run_prefixes =
        ["LD_", "NODE_", "PYTHON", "GIT_", "NPM_CONFIG_", "XDG_", "BASH_FUNC_", "SSH_", "R_PROFILE", "R_ENVIRON"];
    if runs.contains(&n) || prefixed(&run_prefixes) || suffixed(&["_ASKPASS", "_PAGER", "_EDITOR"]) {
        return Some("every program the agent starts");
    }
    None
}

/// The controlling variables a line could assign, read as loosely as any loader could: every
/// name (a run of characters that are no blank, control character, quote, `=`, `:` or `#`:
/// python-dotenv's names are anything up to `=`) that quotes, blanks or control characters
/// and then `=` or `:` follow, wherever it stands in the line. Loaders split lines at more
/// than `\n` (a lone `\r`, U+2028) and skip more than ASCII blanks after a name (U+FEFF,
/// Python's `\x1c`-`\x1f`): a name anywhere counts, so no spelling a loader reads as an
/// assignment is missed (a value holding `NAME=` counts too, which only costs that line).
pub fn controls_in(line: &[u8]) -> Vec<(String, &'static str)> {
    let text = String::from_utf8_lossy(line);
    let skipped = |c: char| c.is_whitespace() || c.is_control() || matches!(c, '\'' | '"' | '`' | '\u{feff}');
    let in_name = |c: char| !(skipped(c) || matches!(c, '=' | ':' | '#'));
    let mut out: Vec<(String, &'static str)> = vec![];
    let mut rest = text.as_ref();
    while let Some(start) = rest.find(in_name) {
        let tail = &rest[start..];
        let end = tail.find(|c: char| !in_name(c)).unwrap_or(tail.len());
        let (name, after) = tail.split_at(end);
        rest = after;
        let next = after.trim_start_matches(skipped);
        if !(next.starts_with('=') || next.starts_with(':')) {
            continue;
        }
        if let Some(who) = controls(name) {
            if !out.iter().any(|(n, _)| n == name) {
                out.push((name.to_string(), who));
            }
        }
    }
    out
}

/// The lines of `text`, without their `\n`.
fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split_inclusive(|c| *c == b'\n').map(|l| l.strip_suffix(b"\n").unwrap_or(l))
}

/// `new` as a `.env` written inside the jail becomes: each line that assigns a controlling
/// variable (`controls_in`) and is not, byte for byte, a line of `old` (what the file held) is
/// left out; the rest is kept as written. Returns it, and the names left out.
pub fn keep_allowed(old: &[u8], new: &[u8]) -> (Vec<u8>, Vec<(String, &'static str)>) {
    let before: std::collections::HashSet<&[u8]> = lines(old).collect();
    let mut kept = Vec::with_capacity(new.len());
    let mut dropped: Vec<(String, &'static str)> = vec![];
    for piece in new.split_inclusive(|c| *c == b'\n') {
        let line = piece.strip_suffix(b"\n").unwrap_or(piece);
        let found = controls_in(line);
        if found.is_empty() || before.contains(line) {
            kept.extend_from_slice(piece);
            continue;
        }
        for f in found {
            if !dropped.iter().any(|(n, _)| *n == f.0) {
                dropped.push(f);
            }
        }
    }
    (kept, dropped)
}

/// The controlling variables `now` assigns in lines `before` did not have.
pub fn added_controls(before: &[u8], now: &[u8]) -> Vec<(String, &'static str)> {
    keep_allowed(before, now).1
}

/// A file's bytes and mode.
type Found = (Vec<u8>, u32);

/// What the session found in each `.env` (None: missing), and its mode.
pub struct Snapshot {
    kept: Vec<(PathBuf, Option<Found>)>,
    aside: PathBuf,
}

/// How a `.env` is reached: as a loader reaches it (through a link), or the name's own file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reach {
    AsLoaders,
    NoLink,
}

/// What `read_bounded` found: the first `MAX_BYTES` of a regular file, its mode, and whether
/// that was the whole file.
struct Bounded {
    data: Vec<u8>,
    mode: u32,
    whole: bool,
}

/// The one reader of a `.env`: through one descriptor (opened without blocking, so a FIFO put
/// there does not hang the launcher; its kind and mode from that descriptor, not the name
/// again), at most `MAX_BYTES`. None if missing or not a regular file.
fn read_bounded(p: &Path, reach: Reach) -> std::io::Result<Option<Bounded>> {
    use std::io::Read;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let no_link = if reach == Reach::NoLink { libc::O_NOFOLLOW } else { 0 };
    let f =
        match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | no_link).open(p)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Ok(None);
    }
    let mut data = vec![];
    f.take(MAX_BYTES + 1).read_to_end(&mut data)?;
    let whole = data.len() as u64 <= MAX_BYTES;
    data.truncate(MAX_BYTES as usize);
    Ok(Some(Bounded { data, mode: meta.permissions().mode() & 0o777, whole }))
}

/// A file as a loader reads it (through a link), with its mode; None if missing; an error if
/// it is larger than `MAX_BYTES` (what a loader reads of it past that is not known).
fn read(p: &Path) -> std::io::Result<Option<Found>> {
    match read_bounded(p, Reach::AsLoaders)? {
        Some(b) if !b.whole => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "larger than 1 MiB")),
        b => Ok(b.map(|b| (b.data, b.mode))),
    }
}

/// A `.env`'s bytes for the guard's memory of it (`Guarded::dotenv_seen`): a regular file, not
/// through a link, its first `MAX_BYTES`.
pub fn read_for_guard(p: &Path) -> std::io::Result<Vec<u8>> {
    read_bounded(p, Reach::NoLink)?.map(|b| b.data).ok_or_else(|| std::io::ErrorKind::InvalidInput.into())
}

/// The `.env` files the agents outside load for a session in `cwd` of `project`: the
/// project's, and each directory's from `cwd` up to it (Gemini CLI looks upwards).
pub fn paths(project: &Path, cwd: &Path) -> Vec<PathBuf> {
    let mut out = vec![project.join(".env")];
    for d in cwd.ancestors().take_while(|d| d.starts_with(project) && *d != project) {
        out.push(d.join(".env"));
    }
    out
}

/// Reads them before the session; the warnings name those that cannot be kept.
pub fn take(paths: &[PathBuf], aside: &Path) -> (Snapshot, Vec<String>) {
    let mut kept = vec![];
    let mut warnings = vec![];
    for p in paths {
        match read(p) {
            Ok(b) => kept.push((p.clone(), b)),
            Err(e) => warnings.push(format!(
                "{}: not checked at exit ({e}): aider and Gemini CLI started outside load it",
                p.display()
            )),
        }
    }
    (Snapshot { kept, aside: aside.to_path_buf() }, warnings)
}

/// A `.env` put back, and why.
pub struct PutBack {
    pub path: PathBuf,
    pub added: Vec<(String, &'static str)>,
    pub kept_at: Option<PathBuf>,
    pub result: Result<(), String>,
}

/// After the session: each `.env` into which the jail added a controlling variable is put
/// back as it was (removed if it was not there), the jail's version kept in `aside`.
pub fn restore(s: &Snapshot) -> Vec<PutBack> {
    let mut out = vec![];
    for (p, before) in &s.kept {
        // One that cannot be read whole any more (grown past `MAX_BYTES`) is not checked: it is
        // put back, what the loaders would read of it unknown; only its first `MAX_BYTES`
        // are kept aside.
        let (now, added) = match read(p) {
            Ok(Some((now, _))) => {
                if before.as_ref().is_some_and(|(b, _)| *b == now) {
                    continue;
                }
                let old = before.as_ref().map(|(b, _)| b.as_slice()).unwrap_or_default();
                let added = added_controls(old, &now);
                (now, added)
            }
            Ok(None) => continue,
            Err(e) => {
                let head = read_bounded(p, Reach::AsLoaders).ok().flatten().map(|b| b.data).unwrap_or_default();
                (head, vec![(format!("what it holds (it cannot be checked: {e})"), "aider and Gemini CLI")])
            }
        };
        if added.is_empty() {
            continue;
        }
        let name = p.to_string_lossy().trim_start_matches('/').replace('/', "%");
        let keep = s.aside.join(name);
        let result = (|| -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&s.aside)?;
            let _ = std::fs::remove_file(&keep);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&keep)?;
            f.write_all(&now)?;
            // The name itself (a link the jail put there is removed, not written through).
            std::fs::remove_file(p)?;
            if let Some((b, mode)) = before {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(*mode)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(p)?;
                f.write_all(b)?;
            }
            Ok(())
        })();
        out.push(PutBack { path: p.clone(), added, kept_at: Some(keep), result: result.map_err(|e| e.to_string()) });
    }
    out
}

/// One line per `.env` put back and an audit record of each.
pub fn report(done: &[PutBack], audit: &crate::audit::AuditLog) {
    for d in done {
        let names: Vec<String> = d.added.iter().map(|(n, who)| format!("{n} (read by {who})")).collect();
        let mut r = audit.record("fs_denied");
        r.check = Some(format!("dotenv: {} added by the jail, put back at exit", names.join(", ")));
        r.path = Some(d.path.display().to_string());
        audit.write(&r);
        let aside = d.kept_at.as_ref().map(|k| k.display().to_string()).unwrap_or_default();
        match &d.result {
            Ok(()) => eprintln!(
                "agent-sandbox: {}: the jail set {}, which agents started outside load from it; put back as it was \
                 (the jail's version: {aside})",
                d.path.display(),
                names.join(", ")
            ),
            Err(e) => eprintln!(
                "agent-sandbox: warning: {}: the jail set {}, which agents started outside load from it, and it could \
                 not be put back ({e}); look at it before starting aider or gemini there",
                d.path.display(),
                names.join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_a_loader_reads_as_an_assignment_is_found() {
        let found = |t: &str| -> Vec<String> { controls_in(t.as_bytes()).into_iter().map(|(n, _)| n).collect() };
        for t in [
            "AIDER_LOAD=x",
            "export AIDER_LOAD = x",
            "  'AIDER_LOAD'=x",
            "\"AIDER_LOAD\"=x",
            "AIDER_LOAD: x",
            // Line breaks and blanks other than `\n` and ASCII ones, as python-dotenv and
            // node's dotenv read them.
            "X=1\rAIDER_LOAD=x",
            "X=1\u{2028}AIDER_LOAD=x",
            "\u{feff}AIDER_LOAD=x",
            "\u{a0}AIDER_LOAD\t=x",
            // Python's `\s` (python-dotenv skips it between a name and `=`), not Rust's.
            "AIDER_LOAD\x1c=x",
            "AIDER_LOAD\x1d=x",
            "AIDER_LOAD\x1e=x",
            "AIDER_LOAD\x1f=x",
            "AIDER_LOAD\u{85}=x",
        ] {
            assert_eq!(found(t), ["AIDER_LOAD"], "{t:?}");
        }
        assert_eq!(found("BASH_FUNC_git%%=() { x; }"), ["BASH_FUNC_git%%"], "python-dotenv takes any name up to `=`");
        for t in [
            "# AIDER_LOAD is not set",
            "AIDER_LOADS",
            "exportAIDER_LOAD=x",
            "NODE_ENV=production",
            "X=AIDER_LOAD",
            "CALLBACK=https://x/cb?git_ref=main",
            "DATABASE_URL=postgres://u:p@h/PATH:x",
            "  \"path\": \"a/b\",",
        ] {
            assert!(found(t).is_empty(), "{t:?}");
        }
        assert_eq!(found("A=1 HTTPS_PROXY=h:1 export PATH=x"), ["HTTPS_PROXY", "PATH"]);
    }

    #[test]
    fn only_controlling_variables_added_or_changed_count() {
        let before = b"DATABASE_URL=x\nAIDER_MODEL=gpt-4o\n";
        assert!(added_controls(before, b"DATABASE_URL=y\nAIDER_MODEL=gpt-4o\nDEBUG=1\n").is_empty());
        let got = added_controls(
            before,
            b"AIDER_MODEL=gpt-4o\nAIDER_LOAD=notes\nexport GOOGLE_GEMINI_BASE_URL=http://x\nhttps_proxy=h\nBASH_ENV=e\n",
        );
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["AIDER_LOAD", "GOOGLE_GEMINI_BASE_URL", "https_proxy", "BASH_ENV"]);
        assert_eq!(added_controls(before, b"AIDER_MODEL=evil\n").len(), 1, "a changed value");
        for n in ["GEMINI_SYSTEM_MD", "OPENAI_API_BASE", "NODE_OPTIONS", "LD_PRELOAD", "PATH", "MY_SERVICE_BASE_URL"] {
            assert!(controls(n).is_some(), "{n}");
        }
        for n in ["HOME", "XDG_CONFIG_HOME", "BROWSER", "SSH_ASKPASS", "AWS_CONFIG_FILE", "WATSONX_URL", "GCONV_PATH"] {
            assert!(controls(n).is_some(), "{n}");
        }
        for n in ["DATABASE_URL", "SECRET_KEY", "PORT", "DEBUG", "NODE_ENV", "PYTHONUNBUFFERED", "path", "home"] {
            assert!(controls(n).is_none(), "{n}");
        }
    }

    #[test]
    fn a_dotenv_written_inside_keeps_everything_but_the_controls_it_did_not_have() {
        let old = b"DATABASE_URL=x\nOPENAI_API_BASE=https://mine\n";
        let new = b"DATABASE_URL=y\nOPENAI_API_BASE=https://mine\nAIDER_LOAD=notes\nPORT=1\nX=1\rNODE_OPTIONS=-r x";
        let (kept, dropped) = keep_allowed(old, new);
        assert_eq!(kept, b"DATABASE_URL=y\nOPENAI_API_BASE=https://mine\nPORT=1\n");
        let names: Vec<&str> = dropped.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["AIDER_LOAD", "NODE_OPTIONS"]);
        let (kept, dropped) = keep_allowed(b"", b"\xff\xfeA=1\n");
        assert_eq!((kept.as_slice(), dropped.len()), (&b"\xff\xfeA=1\n"[..], 0), "bytes kept as written");
    }

    #[test]
    fn a_dotenv_the_jail_added_a_control_to_is_put_back_and_kept_aside() {
        let d = tempfile::tempdir().expect("tempdir");
        let env = d.path().join(".env");
        let other = d.path().join("sub/.env");
        std::fs::create_dir_all(d.path().join("sub")).expect("mkdir");
        std::fs::write(&env, "DATABASE_URL=x\n").expect("write");
        let aside = d.path().join("aside");
        let (s, w) = take(&[env.clone(), other.clone()], &aside);
        assert!(w.is_empty());
        std::fs::write(&env, "DATABASE_URL=x\nAIDER_LOAD=notes.txt\n").expect("write");
        std::fs::write(&other, "PORT=1\n").expect("write");
        let done = restore(&s);
        assert_eq!(done.len(), 1);
        assert!(done[0].result.is_ok());
        assert_eq!(std::fs::read_to_string(&env).expect("read"), "DATABASE_URL=x\n");
        assert_eq!(std::fs::read_to_string(&other).expect("read"), "PORT=1\n", "an ordinary one stays");
        let kept = done[0].kept_at.as_ref().expect("kept");
        assert!(std::fs::read_to_string(kept).expect("aside").contains("AIDER_LOAD"));
    }

    #[test]
    fn a_dotenv_grown_past_what_is_read_is_put_back_unread() {
        let d = tempfile::tempdir().expect("tempdir");
        let env = d.path().join(".env");
        std::fs::write(&env, "DATABASE_URL=x\n").expect("write");
        let (s, _) = take(std::slice::from_ref(&env), &d.path().join("aside"));
        let big = format!("AIDER_LOAD=notes\n{}", "#xxxxxxx\n".repeat(200_000));
        std::fs::write(&env, big).expect("write");
        let done = restore(&s);
        assert_eq!(done.len(), 1);
        assert!(done[0].added[0].0.contains("cannot be checked"), "{:?}", done[0].added);
        assert_eq!(std::fs::read_to_string(&env).expect("read"), "DATABASE_URL=x\n");
    }

    #[test]
    fn the_directories_from_cwd_up_to_the_project_are_looked_at() {
        let p = Path::new("/p");
        assert_eq!(paths(p, p), vec![PathBuf::from("/p/.env")]);
        assert_eq!(
            paths(p, Path::new("/p/a/b")),
            vec![PathBuf::from("/p/.env"), PathBuf::from("/p/a/b/.env"), PathBuf::from("/p/a/.env")]
        );
    }
}
