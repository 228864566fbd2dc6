//! Git's config format, read as git's own reader reads it (config.c), and written in one form
//! git reads one way. Pure: the git guard (`jail::guard::gitconfig`) checks what a repository's
//! config may hold with it, and the plan takes credentials out of the user's global config
//! with it (`plan::gitstrip`).

/// Larger configs are refused, not read (git writes a few hundred bytes).
pub const MAX_CONFIG: usize = 1 << 20;

/// One entry, `section.subsection.key = value`, as git names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// Lower case.
    pub section: String,
    /// As written (git keeps its case); None for `[section]`.
    pub subsection: Option<Vec<u8>>,
    /// Lower case.
    pub key: String,
    /// None: the key alone on its line (boolean true).
    pub value: Option<Vec<u8>>,
}

impl Entry {
    /// `section.subsection.key`, for messages.
    pub fn name(&self) -> String {
        match &self.subsection {
            Some(s) => format!("{}.{}.{}", self.section, String::from_utf8_lossy(s), self.key),
            None => format!("{}.{}", self.section, self.key),
        }
    }
}

/// Where git's reader would stop with an error: the line, from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntaxError {
    pub line: usize,
}

// ---- Reading, as git's config.c does ------------------------------------------------

struct Source<'a> {
    b: &'a [u8],
    i: usize,
    eof: bool,
    line: usize,
}

impl Source<'_> {
    /// git's get_next_char: CR LF reads as LF; the end reads as a newline with `eof` set.
    fn next(&mut self) -> u8 {
        let Some(&c) = self.b.get(self.i) else {
            self.eof = true;
            return b'\n';
        };
        self.i += 1;
        if c == b'\r' && self.b.get(self.i) == Some(&b'\n') {
            self.i += 1;
            self.line += 1;
            return b'\n';
        }
        if c == b'\n' {
            self.line += 1;
        }
        c
    }

    fn err<T>(&self) -> Result<T, SyntaxError> {
        Err(SyntaxError { line: self.line + 1 })
    }
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// Every entry of a config file, in order; an error where git's reader stops with one. NUL
/// bytes and a carriage return not before a newline are refused here (git takes them in
/// values; nothing legitimate writes them).
pub fn parse(b: &[u8]) -> Result<Vec<Entry>, SyntaxError> {
    let mut s = Source { b, i: 0, eof: false, line: 0 };
    if b.starts_with(b"\xef\xbb\xbf") {
        s.i = 3;
    }
    if b.contains(&0) || b.windows(2).any(|w| w[0] == b'\r' && w[1] != b'\n') || b.ends_with(b"\r") {
        return s.err();
    }
    let mut out = vec![];
    let mut head: Option<(String, Option<Vec<u8>>)> = None;
    let mut comment = false;
    loop {
        let c = s.next();
        if c == b'\n' {
            if s.eof {
                return Ok(out);
            }
            comment = false;
            continue;
        }
        if comment || is_space(c) {
            continue;
        }
        if c == b'#' || c == b';' {
            comment = true;
            continue;
        }
        if c == b'[' {
            head = Some(section_header(&mut s)?);
            continue;
        }
        if !c.is_ascii_alphabetic() {
            return s.err();
        }
        let Some((section, subsection)) = head.clone() else {
            // A key before any section: git refuses the file.
            return s.err();
        };
        let (key, value) = key_value(&mut s, c)?;
        out.push(Entry { section, subsection, key, value });
    }
}

/// After `[`: `name]`, `name "sub"]` or the old `name.sub]` (whose subsection git lowers).
fn section_header(s: &mut Source) -> Result<(String, Option<Vec<u8>>), SyntaxError> {
    let mut name = Vec::new();
    loop {
        let c = s.next();
        if s.eof {
            return s.err();
        }
        if c == b']' {
            break;
        }
        if is_space(c) {
            return extended_header(s, name, c);
        }
        if !is_key_char(c) && c != b'.' {
            return s.err();
        }
        name.push(c.to_ascii_lowercase());
    }
    let name = String::from_utf8(name).or_else(|_| s.err())?;
    match name.split_once('.') {
        Some((sec, sub)) if !sec.is_empty() => Ok((sec.to_string(), Some(sub.as_bytes().to_vec()))),
        None if !name.is_empty() => Ok((name, None)),
        _ => s.err(),
    }
}

/// `[name "sub"]`: whitespace, a quoted subsection (`\x` is `x`), then `]` at once.
fn extended_header(s: &mut Source, name: Vec<u8>, mut c: u8) -> Result<(String, Option<Vec<u8>>), SyntaxError> {
    loop {
        if c == b'\n' {
            return s.err();
        }
        c = s.next();
        if !is_space(c) {
            break;
        }
    }
    if c != b'"' || name.is_empty() || name.contains(&b'.') {
        return s.err();
    }
    let mut sub = Vec::new();
    loop {
        let mut c = s.next();
        if c == b'\n' {
            return s.err();
        }
        if c == b'"' {
            break;
        }
        if c == b'\\' {
            c = s.next();
            if c == b'\n' {
                return s.err();
            }
        }
        sub.push(c);
    }
    if s.next() != b']' {
        return s.err();
    }
    let name = String::from_utf8(name).or_else(|_| s.err())?;
    Ok((name, Some(sub)))
}

/// A key starting with `first`, then ` = value` or the end of the line.
fn key_value(s: &mut Source, first: u8) -> Result<(String, Option<Vec<u8>>), SyntaxError> {
    let mut key = vec![first.to_ascii_lowercase()];
    let mut c;
    loop {
        c = s.next();
        if s.eof || !is_key_char(c) {
            break;
        }
        key.push(c.to_ascii_lowercase());
    }
    while c == b' ' || c == b'\t' {
        c = s.next();
    }
    let key = String::from_utf8(key).or_else(|_| s.err())?;
    if c == b'\n' {
        return Ok((key, None));
    }
    if c != b'=' {
        return s.err();
    }
    Ok((key, Some(value(s)?)))
}

/// git's parse_value: quotes, the escapes `\n \t \b \\ \"`, a backslash at the end of a line
/// continuing it, comments outside quotes, whitespace at the end trimmed.
fn value(s: &mut Source) -> Result<Vec<u8>, SyntaxError> {
    let mut v = Vec::new();
    let (mut quote, mut comment) = (false, false);
    let mut trim: Option<usize> = None;
    loop {
        let mut c = s.next();
        if c == b'\n' {
            if quote {
                return s.err();
            }
            if let Some(t) = trim {
                v.truncate(t);
            }
            return Ok(v);
        }
        if comment {
            continue;
        }
        if is_space(c) && !quote {
            if trim.is_none() {
                trim = Some(v.len());
            }
            if !v.is_empty() {
                v.push(c);
            }
            continue;
        }
        if !quote && (c == b';' || c == b'#') {
            comment = true;
            continue;
        }
        trim = None;
        if c == b'\\' {
            c = match s.next() {
                b'\n' => continue,
                b't' => b'\t',
                b'b' => b'\x08',
                b'n' => b'\n',
                b'\\' => b'\\',
                b'"' => b'"',
                _ => return s.err(),
            };
            v.push(c);
            continue;
        }
        if c == b'"' {
            quote = !quote;
            continue;
        }
        v.push(c);
    }
}

// ---- Writing, in one form git reads one way ----------------------------------------

fn escape(out: &mut Vec<u8>, v: &[u8], in_header: bool) {
    for &c in v {
        match c {
            b'\\' => out.extend(b"\\\\"),
            b'"' => out.extend(b"\\\""),
            b'\n' if !in_header => out.extend(b"\\n"),
            b'\t' if !in_header => out.extend(b"\\t"),
            b'\x08' if !in_header => out.extend(b"\\b"),
            c => out.push(c),
        }
    }
}

/// Whether a value reads back as itself without quotes: no whitespace at either end, none
/// but spaces inside, nothing git reads as a quote, an escape or a comment. Other readers of
/// configs (GitPython, libgit2, editors) take these as git does.
fn plain(v: &[u8]) -> bool {
    !v.is_empty()
        && v.first() != Some(&b' ')
        && v.last() != Some(&b' ')
        && v.iter().all(|&c| (c == b' ' || c.is_ascii_graphic() || c >= 0x80) && !b"\"\\;#".contains(&c))
}

/// The entries as a config: a header whenever the section changes, a value quoted only
/// where it must be.
pub fn write(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut current: Option<(&str, Option<&[u8]>)> = None;
    for e in entries {
        let this = (e.section.as_str(), e.subsection.as_deref());
        if current != Some(this) {
            out.push(b'[');
            out.extend(e.section.as_bytes());
            if let Some(sub) = &e.subsection {
                out.extend(b" \"");
                escape(&mut out, sub, true);
                out.push(b'"');
            }
            out.extend(b"]\n");
            current = Some(this);
        }
        out.push(b'\t');
        out.extend(e.key.as_bytes());
        if let Some(v) = &e.value {
            out.extend(b" = ");
            if plain(v) {
                out.extend(v);
            } else {
                out.push(b'"');
                escape(&mut out, v, false);
                out.push(b'"');
            }
        }
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_as_git_reads_them() {
        let cfg = b"\xef\xbb\xbf# comment\n[core]\n\tbare = false ; trailing\n\tFileMode\n[Remote \"Origin\"]\n\turl = \"a b\" c\\\n d \n[branch.Main]\n\tremote=origin\r\n[x] y = \"q\\\"\\\\\\n\"\n";
        let e = parse(cfg).expect("parses");
        let got: Vec<(String, Option<String>)> =
            e.iter().map(|e| (e.name(), e.value.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()))).collect();
        assert_eq!(
            got,
            vec![
                ("core.bare".into(), Some("false".into())),
                ("core.filemode".into(), None),
                ("remote.Origin.url".into(), Some("a b c d".into())),
                ("branch.main.remote".into(), Some("origin".into())),
                ("x.y".into(), Some("q\"\\\n".into())),
            ]
        );
    }

    #[test]
    fn what_git_refuses_is_refused_and_what_nothing_writes_too() {
        for bad in [
            &b"key = v\n"[..],       // before any section
            b"[core\n",              // unterminated header
            b"[core] x = \"open\n",  // unterminated quote
            b"[core]\n\tx = \\q\n",  // unknown escape
            b"[core]\n\tx ; c\n",    // a comment after a lone key
            b"[a \"b\" ]\n",         // no space before ]
            b"[]\n",                 // empty section
            b"[core]\n\t1x = y\n",   // key not starting with a letter
            b"[core]\n\tx = a\0b\n", // NUL
            b"[core]\n\tx = a\rb\n", // a lone CR
            b"[a.b \"c\"]\n",        // a dotted name with a subsection (git reads it; nothing writes it)
        ] {
            assert!(matches!(parse(bad), Err(SyntaxError { .. })), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn written_configs_read_back_to_the_same_entries() {
        let cfg: &[u8] = b"[core]\n\tbare\n\tx = \" lead and \\t tab\\n\"\n[remote \"we\\\"ird\\\\\"]\n\turl = \"a;b#c\"\n\tfetch = \n\tpush = a b  c\n\tmirror = \xc3\xa9t\xc3\xa9\n";
        let e = parse(cfg).expect("parses");
        let w = write(&e);
        assert_eq!(parse(&w).expect("reparses"), e);
        assert_eq!(write(&parse(&w).expect("reparses")), w, "writing is a fixed point");
    }
}
