//! The value grammars: what an option's or a word's value must look like (`ValueKind`,
//! `validate`), each following the Slurm 22.05 function that reads it, and the readers of the
//! values the chaperon looks inside (dependencies, cluster names). Knows no option table and no
//! command: `table` parses options against the tables the commands keep. Pure functions; any
//! input gives a value or an error, never a panic (the values come from the jail).

/// Longest job name accepted (Slurm's own limit is larger; names are shown back in squeue).
pub const MAX_JOB_NAME: usize = 256;
/// Values quoted back in error messages are cut to this many characters.
const ECHO_CHARS: usize = 64;

/// What an option's value must look like. Each kind follows the Slurm 22.05 function that reads
/// it (named in the doc), so a value Slurm takes is never refused here; where Slurm's reader is
/// looser than the syntax it documents (C's `strtol` takes leading spaces and a sign), so is the
/// kind. Control characters are refused by every kind before its own check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// Printable text, may be empty.
    Text,
    /// `parse_int(.., positive = false)` (proc_args.c): a whole `strtol` number, 0 or more.
    Int,
    /// `parse_int(.., positive = true)`: a whole `strtol` number, 1 or more.
    PositiveInt,
    /// `parse_uint16` (proc_args.c): a whole `strtoll` number below NO_VAL16 (65534).
    Uint16,
    /// `parse_uint32`: a whole `strtoll` number below NO_VAL (4294967294).
    Uint32,
    /// `parse_uint64`: a whole `strtoll` number below LLONG_MAX (no unit suffix).
    Uint64,
    /// `arg_set_nice` (slurm_opt.c): the number `strtoll` reads at the start, within +/-2147483645.
    Nice,
    /// `time_str2mins` (parse_time.c): MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, -1,
    /// UNLIMITED, INFINITE.
    Time,
    /// `str_to_mbytes` (proc_args.c): a `strtoll` number, 0 or more, with an optional K/M/G/T
    /// suffix and a B after it (megabytes without one).
    Memory,
    /// `parse_time(.., 0)` (parse_time.c) giving a time, as --begin, --deadline and scontrol's
    /// StartTime read it: now[+N[unit]], today, HH:MM[:SS] [AM|PM], MM/DD[/YY], YYYY-MM-DD[THH:MM[:SS]]...
    DateTime,
    /// `parse_time(.., 1)` as sacct's --starttime/--endtime read it: also a value that names no
    /// time at all (blank), which sacct takes as "not given".
    DateTimeOrBlank,
    /// A hostlist expression (`node[01-04,7] gpu3`) as `hostlist_create` (hostlist.c) reads it;
    /// never a value with a '/' (Slurm would read it as a file on the submit host).
    NodeList,
    /// Printable, non-empty, at most `MAX_JOB_NAME` bytes.
    JobName,
    /// A non-empty path, not resolved here (the chaperon resolves it against the project).
    Path,
    /// `123,456_7,...`.
    JobIdList,
    /// Slurm's `--dependency` syntax; see `dependency_job_ids`.
    Dependency,
    /// `ALL`, `NONE`, or a comma list of `NAME[=VALUE]` (with `ALL`/`NONE` allowed as items).
    ExportSpec,
    /// `get_signal_opts` (proc_args.c) as srun runs it: `[R][:]SIG[@seconds]`.
    Signal,
    /// `get_signal_opts` as sbatch runs it: `[R][B][R][:]SIG[@seconds]` (B: the batch shell only).
    SbatchSignal,
    /// `sig_name2num` (proc_args.c) alone, as scancel reads --signal: a name or a number.
    SignalName,
    /// `-M`/`--clusters` of the read-only commands: `all`, or cluster names separated by commas
    /// (`slurmdb_get_info_cluster`, slurmdb_defs.c); see `cluster_names`.
    Clusters,
    /// One of these words, ASCII case-insensitive (Slurm compares with strcasecmp).
    Choice(&'static [&'static str]),
    /// Slurm reads only the first character: it must be the first letter of one of these words,
    /// ASCII case-insensitive (--open-mode's `arg[0]`, sacct --units' `get_unit_type(*optarg)`).
    Initial(&'static [&'static str]),
    /// scontrol's OverSubscribe/Shared: a prefix of YES or NO (any case), else `parse_uint16`.
    YesNo,
    /// Only the checks every value gets; validated elsewhere.
    Any,
    /// No value at all: an optional value (a later release's) the chaperon cannot honour is
    /// refused with this reason.
    Refused(&'static str),
}

/// Cuts `s` for quoting in an error: at most `ECHO_CHARS` characters, so one error stays short.
pub(crate) fn clip(s: &str) -> String {
    match s.char_indices().nth(ECHO_CHARS) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Characters no value may hold: C0/C1 controls (NUL, newline, ESC...), DEL, and the Unicode
/// line and paragraph separators. A newline in a value would end a line in the generated
/// script or an audit record; NUL would cut a C string short on the Slurm side.
fn is_forbidden(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Checks one value against its grammar. The error is the fix an agent needs, in one line.
pub fn validate(kind: ValueKind, v: &str) -> Result<(), &'static str> {
    if v.chars().any(is_forbidden) {
        return Err("values may not contain control characters (newline, NUL, escape...)");
    }
    let b = v.as_bytes();
    match kind {
        ValueKind::Text | ValueKind::Any => Ok(()),
        ValueKind::Int => check(parse_int(b, false), "expected a whole number, 0 or more"),
        ValueKind::PositiveInt => check(parse_int(b, true), "expected a whole number, 1 or more"),
        ValueKind::Uint16 => check(parse_uint(b, NO_VAL16), "expected a whole number from 0 to 65533"),
        ValueKind::Uint32 => check(parse_uint(b, NO_VAL32), "expected a whole number from 0 to 4294967293"),
        ValueKind::Uint64 => check(parse_uint(b, i64::MAX), "expected a whole number of megabytes (no unit suffix)"),
        ValueKind::Nice => check(is_nice(b), "expected a nice value from -2147483645 to 2147483645"),
        ValueKind::Time => {
            check(is_time(v), "expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, UNLIMITED or INFINITE")
        }
        ValueKind::Memory => {
            check(is_memory(b), "expected a size such as 500M, 4G, 102MB or 1024 (suffix K, M, G or T, then B)")
        }
        ValueKind::DateTime | ValueKind::DateTimeOrBlank => check(
            parse_time(b, kind == ValueKind::DateTimeOrBlank),
            "expected now[+N{seconds|minutes|hours|days|weeks}], today, tomorrow, midnight, noon, HH:MM[:SS], \
             MM/DD[/YY] or YYYY-MM-DD[THH:MM[:SS]]",
        ),
        ValueKind::NodeList if v.contains('/') => {
            Err("a node list with '/' is read as a file on the login node; name the nodes, e.g. node[01-04]")
        }
        ValueKind::NodeList => check(is_hostlist(b), "expected a node list such as node[01-04,7],gpu3"),
        ValueKind::JobName => {
            check(!v.is_empty() && v.len() <= MAX_JOB_NAME, "expected a non-empty job name of at most 256 bytes")
        }
        ValueKind::Path => check(!v.is_empty(), "expected a non-empty path"),
        ValueKind::JobIdList => check(
            !v.is_empty() && v.split(',').all(|id| parse_job_id(id, false).is_some()),
            "expected job ids such as 123 or 123_4, separated by commas",
        ),
        ValueKind::Dependency => dependency_job_ids(v).map(|_| ()),
        ValueKind::ExportSpec => {
            check(is_export_spec(v), "expected ALL, NONE, or NAME[=VALUE] items separated by commas")
        }
        ValueKind::Signal => check(is_signal(b, false), "expected [R:]SIGNAL[@seconds], e.g. USR1@60 or 10"),
        ValueKind::SbatchSignal => check(is_signal(b, true), "expected [{B|R|BR}:]SIGNAL[@seconds], e.g. B:USR1@60"),
        ValueKind::SignalName => {
            check(sig_name2num(b) as u16 != 0, "expected a signal name or number, such as USR1 or 10")
        }
        ValueKind::Clusters => check(
            !cluster_names(v).is_empty() && cluster_names(v).iter().all(|n| is_cluster_name(n)),
            "expected all, or cluster names separated by commas",
        ),
        ValueKind::Choice(words) => {
            check(words.iter().any(|w| w.eq_ignore_ascii_case(v)), "not one of the values this option accepts")
        }
        ValueKind::Initial(words) => check(
            b.first()
                .is_some_and(|c| words.iter().any(|w| w.as_bytes().first().is_some_and(|f| f.eq_ignore_ascii_case(c)))),
            "not one of the values this option accepts",
        ),
        ValueKind::YesNo => check(is_yes_no(b), "expected yes, no, or a number"),
        ValueKind::Refused(why) => Err(why),
    }
}

fn check(ok: bool, why: &'static str) -> Result<(), &'static str> {
    if ok {
        Ok(())
    } else {
        Err(why)
    }
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn parse_u32(s: &str) -> Option<u32> {
    if is_digits(s) {
        s.parse().ok()
    } else {
        None
    }
}

/// The byte at `i`, or NUL past the end: a C string, read as Slurm's parsers read it.
fn at(b: &[u8], i: usize) -> u8 {
    b.get(i).copied().unwrap_or(0)
}

/// C's `isspace` in the C locale.
fn c_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// True if `b[i..]` starts with `word`, ASCII case-insensitive (`xstrncasecmp(.., strlen(word))`).
fn starts_ci(b: &[u8], i: usize, word: &str) -> bool {
    b.get(i..).and_then(|rest| rest.get(..word.len())).is_some_and(|p| p.eq_ignore_ascii_case(word.as_bytes()))
}

/// What C's `strtol`/`strtoll` (base 10, 64-bit long) read from the start of `b`.
struct Strtol {
    /// Clamped to i64::MIN/MAX on overflow, as strtol does (with errno ERANGE).
    value: i64,
    /// Where the number ends; 0 when no digits were read (strtol's `endptr == nptr`).
    end: usize,
    overflow: bool,
}

fn strtol(b: &[u8]) -> Strtol {
    let mut i = 0;
    while c_space(at(b, i)) {
        i += 1;
    }
    let neg = at(b, i) == b'-';
    if matches!(at(b, i), b'+' | b'-') {
        i += 1;
    }
    let start = i;
    let mut mag: u64 = 0;
    let mut overflow = false;
    while at(b, i).is_ascii_digit() {
        let d = u64::from(at(b, i) - b'0');
        match mag.checked_mul(10).and_then(|m| m.checked_add(d)) {
            Some(m) => mag = m,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start {
        return Strtol { value: 0, end: 0, overflow: false };
    }
    let limit = if neg { 1u64 << 63 } else { i64::MAX as u64 };
    if overflow || mag > limit {
        return Strtol { value: if neg { i64::MIN } else { i64::MAX }, end: i, overflow: true };
    }
    // mag <= 2^63 here, so the negation fits (2^63 becomes i64::MIN).
    let value = if neg { 0i64.wrapping_sub_unsigned(mag) } else { mag as i64 };
    Strtol { value, end: i, overflow: false }
}

/// `parse_int`: strtol must read the whole value (an empty one reads as 0); the result must be
/// 0 or more (1 or more if `positive`) and not LONG_MAX, which is also what an overflow gives.
fn parse_int(b: &[u8], positive: bool) -> bool {
    let r = strtol(b);
    r.end == b.len() && r.value >= i64::from(positive) && r.value != i64::MAX
}

const NO_VAL16: i64 = 0xfffe;
const NO_VAL32: i64 = 0xffff_fffe;

/// `parse_uint16/32/64`: strtoll must read the whole value (an empty one reads as 0), and the
/// result must be neither LLONG_MIN/MAX nor negative, and below `no_val`.
fn parse_uint(b: &[u8], no_val: i64) -> bool {
    let r = strtol(b);
    r.end == b.len() && r.value != i64::MIN && r.value != i64::MAX && (0..no_val).contains(&r.value)
}

/// `arg_set_nice`: `strtoll(arg, NULL, 10)` ignores whatever follows the number (and reads no
/// number as 0); only `llabs(nice) > NICE_OFFSET - 3` is refused. An overflow (whose llabs is
/// undefined in C) is refused here.
fn is_nice(b: &[u8]) -> bool {
    let r = strtol(b);
    !r.overflow && r.value.unsigned_abs() <= 0x8000_0000 - 3
}

/// `_is_valid_timespec` and `time_str2secs`: "-1", INFINITE or UNLIMITED, else digits, at most
/// one '-' (never after a ':') and two ':', with enough digit groups for the separators. The
/// numbers are read with `%d`: any length is taken (an overflow is Slurm's business).
fn is_time(v: &str) -> bool {
    if ["-1", "INFINITE", "UNLIMITED"].iter().any(|w| w.eq_ignore_ascii_case(v)) {
        return true;
    }
    let (mut groups, mut dashes, mut colons, mut in_digits) = (0, 0, 0, false);
    for c in v.bytes() {
        match c {
            b'0'..=b'9' => {
                groups += usize::from(!in_digits);
                in_digits = true;
            }
            b'-' if colons > 0 => return false,
            b'-' => (dashes, in_digits) = (dashes + 1, false),
            b':' => (colons, in_digits) = (colons + 1, false),
            _ => return false,
        }
    }
    // D-HH:MM needs three digit groups and D-HH:MM:SS four; MM:SS two and HH:MM:SS three.
    let needed = match colons {
        0 => 1,
        n => n + 1 + usize::from(dashes > 0),
    };
    groups >= needed && dashes <= 1 && colons <= 2
}

/// `str_to_mbytes`: strtoll reads a number (no overflow, not negative), then nothing, or one of
/// K, M, G, T (any case) alone or followed by B/b ("102MB", "4gb").
fn is_memory(b: &[u8]) -> bool {
    let r = strtol(b);
    if r.end == 0 || r.overflow || r.value < 0 {
        return false;
    }
    match &b[r.end..] {
        [] => true,
        [unit, rest @ ..] => {
            matches!(unit.to_ascii_uppercase(), b'K' | b'M' | b'G' | b'T') && matches!(rest, [] | [b'B' | b'b'])
        }
    }
}

/// `parse_time`'s unit names after `now+N`/`now-N`, in its order (the longer spelling first).
const TIME_UNITS: &[&str] =
    &["seconds", "second", "minutes", "minute", "hours", "hour", "days", "day", "weeks", "week"];

/// `parse_time` (parse_time.c) as a check: walks `b` as Slurm's loop does and says whether it
/// reaches the end without `goto prob`. A value naming neither a date nor a time makes Slurm
/// return 0, an error for --begin but "not given" for sacct (`blank_ok`). Where Slurm's index
/// arithmetic would read past the end of the string (`now` not at the start), this refuses.
fn parse_time(b: &[u8], blank_ok: bool) -> bool {
    if starts_ci(b, 0, "uts") {
        let r = strtol(&b[3..]);
        return r.end == b.len() - 3 && r.value >= 1_000_000 && r.value != i64::MAX;
    }
    let (mut have_time, mut have_date) = (false, false);
    let mut pos = 0;
    loop {
        if pos > b.len() {
            return false;
        }
        let c = at(b, pos);
        if c == 0 || c == b'\n' {
            break;
        }
        if matches!(c, b' ' | b'\t' | b'-' | b'T') {
            pos += 1;
            continue;
        }
        let word = [("today", 0), ("tomorrow", 0), ("midnight", 1), ("noon", 1), ("fika", 1), ("teatime", 1)]
            .into_iter()
            .find(|(w, _)| starts_ci(b, pos, w));
        if let Some((w, is_time)) = word {
            if is_time == 1 {
                have_time = true;
            } else {
                have_date = true;
            }
            pos += w.len();
            continue;
        }
        if starts_ci(b, pos, "now") {
            let mut i = pos + 3;
            loop {
                match at(b, i) {
                    b'+' | b'-' => {
                        // Slurm adds the absolute index to pos (`pos += i`), right only at 0.
                        match get_delta(b, pos + i) {
                            Some(end) => pos = end,
                            None => return false,
                        }
                        break;
                    }
                    b' ' | b'\t' => i += 1,
                    0 | b'\n' => {
                        pos += i - 1;
                        break;
                    }
                    _ => return false,
                }
            }
            (have_time, have_date) = (true, true);
            pos += 1;
            continue;
        }
        if !c.is_ascii_digit() {
            return false;
        }
        let next = if at(b, pos + 1) == b':' || at(b, pos + 2) == b':' {
            have_time = true;
            get_time(b, pos)
        } else {
            have_date = true;
            get_date(b, pos)
        };
        match next {
            Some(end) => pos = end + 1,
            None => return false,
        }
    }
    // Past this point Slurm only builds the time with mktime, which takes every date read above.
    blank_ok || have_time || have_date
}

/// `_get_delta`: after the sign at `pos`, digits (spaces skipped) up to an optional unit name,
/// at least one digit. Returns the index of the last byte read.
fn get_delta(b: &[u8], pos: usize) -> Option<usize> {
    let mut offset = pos + 1;
    if offset > b.len() {
        return None;
    }
    let mut digits = 0;
    while !matches!(at(b, offset), 0 | b'\n') {
        let c = at(b, offset);
        if c_space(c) {
            offset += 1;
            continue;
        }
        if let Some(unit) = TIME_UNITS.iter().find(|u| starts_ci(b, offset, u)) {
            offset += unit.len();
            break;
        }
        if !c.is_ascii_digit() {
            return None;
        }
        digits += 1;
        offset += 1;
    }
    (digits > 0).then(|| offset - 1)
}

/// Two digits at `i` as a number, if both are digits.
fn two_digits(b: &[u8], i: usize) -> Option<u32> {
    let (x, y) = (at(b, i), at(b, i + 1));
    (x.is_ascii_digit() && y.is_ascii_digit()).then(|| u32::from(x - b'0') * 10 + u32::from(y - b'0'))
}

/// `_get_time`: H[H]:MM[:SS], then spaces and an optional AM/PM (any case). Returns the index of
/// the last byte read.
fn get_time(b: &[u8], pos: usize) -> Option<usize> {
    let mut offset = pos;
    let mut hour = u32::from(at(b, offset).checked_sub(b'0').filter(|d| *d <= 9)?);
    offset += 1;
    if at(b, offset) != b':' {
        hour = hour * 10 + u32::from(at(b, offset).checked_sub(b'0').filter(|d| *d <= 9)?);
        offset += 1;
    }
    if hour > 23 || at(b, offset) != b':' {
        return None;
    }
    two_digits(b, offset + 1).filter(|m| *m <= 59)?;
    offset += 3;
    if at(b, offset) == b':' {
        two_digits(b, offset + 1).filter(|s| *s <= 59)?;
        offset += 3;
    }
    while c_space(at(b, offset)) {
        offset += 1;
    }
    if starts_ci(b, offset, "pm") {
        if hour + 12 > 24 {
            return None;
        }
        offset += 2;
    } else if starts_ci(b, offset, "am") {
        if hour > 12 {
            return None;
        }
        offset += 2;
    }
    Some(offset - 1)
}

/// One or two digits at `*offset` as a number in `lo..=hi`, moving `*offset` past them.
fn day_or_month(b: &[u8], offset: &mut usize, first: i32, lo: i32, hi: i32) -> Option<()> {
    let mut n = first;
    *offset += 1;
    if at(b, *offset).is_ascii_digit() {
        n = n * 10 + i32::from(at(b, *offset) - b'0');
        *offset += 1;
    }
    (lo..=hi).contains(&n).then_some(())
}

/// `_get_date`: YYYY-MM-DD, or M[M][./]D[D][./][YY]. Returns the index of the last byte read.
fn get_date(b: &[u8], pos: usize) -> Option<usize> {
    let digit = |i: usize| at(b, i).is_ascii_digit().then(|| i32::from(at(b, i) - b'0'));
    let mut offset = pos;
    if b.len() >= offset + 7 && at(b, offset + 4) == b'-' && at(b, offset + 7) == b'-' {
        for i in offset..offset + 4 {
            digit(i)?;
        }
        offset += 5;
        // Slurm takes the month's first byte unchecked (`c - '0'`, a signed char); only the
        // range check below stands, which a non-digit fails.
        let first = i32::from(at(b, offset) as i8) - i32::from(b'0');
        day_or_month(b, &mut offset, first, 1, 12)?;
        offset += 1; // the '-', not checked by Slurm either
        let first = digit(offset)?;
        day_or_month(b, &mut offset, first, 1, 31)?;
        return Some(offset - 1);
    }
    let first = digit(offset)?;
    day_or_month(b, &mut offset, first, 1, 12)?;
    if matches!(at(b, offset), b'.' | b'/') {
        offset += 1;
    }
    let first = digit(offset)?;
    day_or_month(b, &mut offset, first, 1, 31)?;
    if matches!(at(b, offset), b'.' | b'/') {
        offset += 1;
    }
    if digit(offset).is_some() {
        digit(offset + 1)?;
        offset += 2;
    }
    Some(offset - 1)
}

/// Hosts one range may span, and the prefix ranges one name may expand to (hostlist.c/.h).
const MAX_RANGE: u64 = 64 * 1024;
const MAX_RANGES: usize = 256 * 1024;

/// C's `strtoul` (base 10) on `s`: the value (wrapping, as a '-' negates it) and the bytes left
/// after the number, or None when no digits were read.
fn strtoul(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut i = 0;
    while c_space(at(s, i)) {
        i += 1;
    }
    let neg = at(s, i) == b'-';
    if matches!(at(s, i), b'+' | b'-') {
        i += 1;
    }
    let start = i;
    let mut n: u64 = 0;
    let mut overflow = false;
    while at(s, i).is_ascii_digit() {
        match n.checked_mul(10).and_then(|m| m.checked_add(u64::from(at(s, i) - b'0'))) {
            Some(m) => n = m,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start {
        return None;
    }
    let n = if overflow {
        u64::MAX
    } else if neg {
        n.wrapping_neg()
    } else {
        n
    };
    Some((n, &s[i..]))
}

/// `_parse_single_range` (one-dimensional names): `lo[-hi]`, no 'x' (a box), no negative hi,
/// lo <= hi, at most MAX_RANGE hosts. Returns how many hosts it spans.
fn single_range(item: &[u8]) -> Option<u64> {
    if item.contains(&b'x') {
        return None;
    }
    let (lo, hi) = match item.iter().position(|&c| c == b'-') {
        Some(i) => (&item[..i], Some(&item[i + 1..])),
        None => (item, None),
    };
    if hi.is_some_and(|h| h.first() == Some(&b'-')) {
        return None;
    }
    let (lo, lo_rest) = strtoul(lo)?;
    // With a non-empty hi the junk after lo goes unchecked (Slurm checks only hi's end).
    let hi = match hi.filter(|h| !h.is_empty()) {
        Some(h) => match strtoul(h)? {
            (n, []) => n,
            _ => return None,
        },
        None if lo_rest.is_empty() => lo,
        None => return None,
    };
    let span = hi.wrapping_sub(lo).wrapping_add(1);
    (lo <= hi && span <= MAX_RANGE).then_some(span)
}

/// `_parse_range_list`: comma-separated ranges. Returns the hosts they span together.
fn range_list(inner: &[u8]) -> Option<u64> {
    let mut total: u64 = 0;
    for (n, item) in inner.split(|&c| c == b',').enumerate() {
        if n >= MAX_RANGES {
            return None; // Slurm calls fatal()
        }
        total = total.saturating_add(single_range(item)?);
    }
    Some(total)
}

/// `_hostlist_create_bracketed` with `_next_tok` (separators space, tab and comma, where a comma
/// inside brackets belongs to its name): for each name, the last `[..]` must close at the end of
/// the name and hold a valid range list; a `[..]` before it in the prefix must too, and may
/// expand to at most MAX_PREFIX_CNT names. A '[' that never closes is part of the name.
fn is_hostlist(b: &[u8]) -> bool {
    let sep = |c: u8| matches!(c, b' ' | b'\t' | b',');
    // Slurm's strchr calls search to the end of the string each time; cached here (the searches
    // only move right), or a long value of many names would take quadratic time.
    let (mut opens, mut closes) = (NextByte::new(b'['), NextByte::new(b']'));
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && sep(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        // `_next_tok`: up to a separator, but a `[..]` that opens before it reaches on to its ']'.
        let start = i;
        let mut parse = start;
        'token: loop {
            while i < b.len() && !sep(b[i]) {
                i += 1;
            }
            loop {
                let Some(open) = opens.first_from(b, parse).filter(|&o| o <= i) else { break 'token };
                let Some(close) = closes.first_from(b, parse).filter(|&c| c >= open) else { break 'token };
                if close < i {
                    parse = close + 1;
                } else {
                    i = close;
                    continue 'token;
                }
            }
        }
        if !hostlist_token(&b[start..i]) {
            return false;
        }
    }
    true
}

/// The first index of `byte` at or after a position, for positions that never decrease: each
/// byte of the value is looked at about once over all calls.
struct NextByte {
    byte: u8,
    /// Where the last search started; `found` is the first match at or after it (None: none).
    searched_from: Option<usize>,
    found: Option<usize>,
}

impl NextByte {
    fn new(byte: u8) -> Self {
        NextByte { byte, searched_from: None, found: None }
    }

    fn first_from(&mut self, b: &[u8], pos: usize) -> Option<usize> {
        // The last answer still holds if its search began at or before `pos` and it is not behind `pos`.
        let holds = self.searched_from.is_some_and(|s| s <= pos) && self.found.is_none_or(|f| f >= pos);
        if !holds {
            let start = pos.min(b.len());
            self.found = b[start..].iter().position(|&x| x == self.byte).map(|p| p + start);
            self.searched_from = Some(pos);
        }
        self.found
    }
}

fn hostlist_token(tok: &[u8]) -> bool {
    let Some(open) = tok.iter().rposition(|&c| c == b'[') else { return true };
    let Some(close) = tok[open..].iter().position(|&c| c == b']').map(|c| c + open) else { return true };
    if !matches!(tok.get(close + 1), None | Some(b',')) || range_list(&tok[open + 1..close]).is_none() {
        return false;
    }
    // `_push_range_list`: the prefix may hold one more `[..]` (the last '[' and the last ']' after
    // it); deeper ones are expanded recursively, and Slurm ignores failures there.
    let prefix = &tok[..open];
    let Some(p_open) = prefix.iter().rposition(|&c| c == b'[') else { return true };
    let Some(p_close) = prefix[p_open..].iter().rposition(|&c| c == b']').map(|c| c + p_open) else {
        return true;
    };
    range_list(&prefix[p_open + 1..p_close]).is_some_and(|n| n <= MAX_RANGE)
}

/// `123`, `123_4`, and with `array_star` also `123_*`. Zero is not a job id.
fn parse_job_id(s: &str, array_star: bool) -> Option<u32> {
    let (job, task) = match s.split_once('_') {
        Some((j, t)) => (j, Some(t)),
        None => (s, None),
    };
    let ok_task = match task {
        None => true,
        Some("*") => array_star,
        Some(t) => parse_u32(t).is_some(),
    };
    parse_u32(job).filter(|&id| id != 0 && ok_task)
}

const DEPENDENCY_TYPES: &[&str] = &["after", "afterany", "afterok", "afternotok", "aftercorr", "afterburstbuffer"];

/// Checks a `--dependency` value and returns the job ids it names, so the chaperon can check
/// each is in scope. Accepted: `type:id[:id...]` items joined by `,` (all) or `?` (any), never
/// both; `singleton`; a plain `id[,id...]` list (Slurm's old form, meaning afterany). Types are
/// case-insensitive as in Slurm; an id is `N`, `N_M` or `N_*`; `after` ids may carry `+minutes`.
pub fn dependency_job_ids(v: &str) -> Result<Vec<u32>, &'static str> {
    const BAD: &str = "expected type:jobid[:jobid] items joined by ',' or '?', types after, afterany, afterok, \
                       afternotok, aftercorr, afterburstbuffer, singleton";
    if v.is_empty() {
        return Err(BAD);
    }
    if v.contains(',') && v.contains('?') {
        return Err("use either ',' (all) or '?' (any) between dependencies, not both");
    }
    let mut ids = Vec::new();
    for item in v.split([',', '?']) {
        if item.eq_ignore_ascii_case("singleton") {
            continue;
        }
        let Some((kind, list)) = item.split_once(':') else {
            // Old form: a bare job id, only in a ',' list of bare ids.
            if v.contains(':') || v.contains('?') {
                return Err(BAD);
            }
            ids.push(parse_job_id(item, true).ok_or(BAD)?);
            continue;
        };
        let kind = DEPENDENCY_TYPES.iter().find(|t| t.eq_ignore_ascii_case(kind)).ok_or(BAD)?;
        for id in list.split(':') {
            let id = match id.split_once('+') {
                Some((id, minutes)) if *kind == "after" && parse_u32(minutes).is_some() => id,
                Some(_) => return Err(BAD),
                None => id,
            };
            ids.push(parse_job_id(id, true).ok_or(BAD)?);
        }
    }
    Ok(ids)
}

fn is_env_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_') && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn is_export_spec(v: &str) -> bool {
    // What the variables may do is checked when the export is applied inside the jail; here
    // only the shape. A VALUE cannot hold a comma (Slurm splits on every comma).
    !v.is_empty()
        && v.split(',').all(|item| match item.split_once('=') {
            Some((name, _value)) => is_env_name(name),
            None => item == "ALL" || item == "NONE" || is_env_name(item),
        })
}

/// Slurm's `signals_mapping` table (proc_args.c).
const SIGNAL_NAMES: &[&str] = &[
    "HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1", "USR2", "URG", "CONT", "STOP", "TSTP", "TTIN",
    "TTOU", "XCPU",
];

/// `sig_name2num`: a strtol number followed only by spaces (its value, 0 if none), else after
/// spaces and an optional SIG (any case) a name of the table followed only by spaces. 0 means
/// unknown. The number is returned as the C `int` Slurm returns (truncated).
fn sig_name2num(b: &[u8]) -> i32 {
    let r = strtol(b);
    if r.end != 0 {
        return if b[r.end..].iter().all(|&c| c_space(c)) { r.value as i32 } else { 0 };
    }
    let mut i = 0;
    while c_space(at(b, i)) {
        i += 1;
    }
    if starts_ci(b, i, "SIG") {
        i += 3;
    }
    let known =
        SIGNAL_NAMES.iter().any(|name| starts_ci(b, i, name) && b[i + name.len()..].iter().all(|&c| c_space(c)));
    // Any non-zero stands for "found"; the signal's number does not matter to the check.
    i32::from(known)
}

/// `get_signal_opts`: an R (reservation) flag, in sbatch also B (batch shell) then another R,
/// one optional ':', then a signal for `sig_name2num` that is 1..=65535 once cast to uint16, then
/// optionally '@' and a strtol number 0..=65535 that ends the value (an empty one reads as 0).
fn is_signal(b: &[u8], sbatch: bool) -> bool {
    let mut i = 0;
    let mut flag = |c: u8| {
        if at(b, i).eq_ignore_ascii_case(&c) {
            i += 1;
        }
    };
    flag(b'R');
    if sbatch {
        flag(b'B');
        flag(b'R');
    }
    if at(b, i) == b':' {
        i += 1;
    }
    let rest = &b[i.min(b.len())..];
    let (sig, time) = match rest.iter().position(|&c| c == b'@') {
        Some(at_sign) => (&rest[..at_sign], Some(&rest[at_sign + 1..])),
        None => (rest, None),
    };
    // `(uint16_t) sig_name2num(..)`: Slurm keeps the low 16 bits of the number.
    let sig_ok = sig_name2num(sig) as u16 != 0;
    let time_ok = time.is_none_or(|t| {
        let r = strtol(t);
        (r.end == t.len()) && (0..=0xffff).contains(&r.value)
    });
    sig_ok && time_ok
}

/// Cluster names as Slurm reads `-M`/`--clusters` (`slurm_addto_char_list`, lowercased): the
/// comma-separated names of `v`, empty items skipped; `["all"]` for `all` (any case) and for
/// sacct's old spelling `-1`, which mean every cluster. Quoted and bracketed (`c[1-2]`) forms,
/// which Slurm also expands, are refused by `ValueKind::Clusters` and not handled here.
pub fn cluster_names(v: &str) -> Vec<String> {
    if v.eq_ignore_ascii_case("all") || v == "-1" {
        return vec!["all".to_string()];
    }
    v.split(',').filter(|n| !n.is_empty()).map(str::to_ascii_lowercase).collect()
}

/// A cluster name: what slurm.conf's ClusterName holds in practice (letters, digits, '_', '-', '.').
fn is_cluster_name(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|c| c.is_ascii_alphanumeric() || b"_-.".contains(&c))
}

/// scontrol's OverSubscribe/Shared (`update_job.c`): `xstrncasecmp(val, "YES", MAX(len, 1))`,
/// the same for NO, else `parse_uint16`.
fn is_yes_no(b: &[u8]) -> bool {
    let prefix_of = |word: &[u8]| !b.is_empty() && b.len() <= word.len() && b.eq_ignore_ascii_case(&word[..b.len()]);
    prefix_of(b"YES") || prefix_of(b"NO") || parse_uint(b, NO_VAL16)
}

/// Every kind once (`Choice` and `Initial` with sample words): the unit tests and the
/// fuzz target (`read_every_way`) walk this one list.
pub const EVERY_KIND: &[ValueKind] = &[
    ValueKind::Text,
    ValueKind::Int,
    ValueKind::PositiveInt,
    ValueKind::Uint16,
    ValueKind::Uint32,
    ValueKind::Uint64,
    ValueKind::Nice,
    ValueKind::Time,
    ValueKind::Memory,
    ValueKind::DateTime,
    ValueKind::DateTimeOrBlank,
    ValueKind::NodeList,
    ValueKind::JobName,
    ValueKind::Path,
    ValueKind::JobIdList,
    ValueKind::Dependency,
    ValueKind::ExportSpec,
    ValueKind::Signal,
    ValueKind::SbatchSignal,
    ValueKind::SignalName,
    ValueKind::Clusters,
    ValueKind::Choice(&["user"]),
    ValueKind::Initial(&["append", "truncate"]),
    ValueKind::YesNo,
    ValueKind::Any,
    ValueKind::Refused("no value"),
];

/// Reads `v` with every value reader this module has (each kind's `validate`, the dependency
/// and cluster-name readers), dropping the answers: the fuzz target's one call, so it walks
/// whatever this module reads, never a copy of the list.
pub fn read_every_way(v: &str) {
    for &kind in EVERY_KIND {
        let _ = validate(kind, v);
    }
    let _ = dependency_job_ids(v);
    let _ = cluster_names(v);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values a kind must accept, and values it must refuse.
    type Cases = (&'static [&'static str], &'static [&'static str]);

    /// Per kind: values it must accept (each one Slurm 22.05 takes, by the function named) and
    /// values it must refuse (each one Slurm refuses, or one it would read as a file).
    fn cases(kind: ValueKind) -> Cases {
        match kind {
            ValueKind::Text => (&["", "gpu:a100:2", "a b", "é ünïcode", "x=y,z"], &[]),
            ValueKind::Any => (&["", "anything at all"], &[]),
            ValueKind::Refused(_) => (&[], &["", "x", "v0.0.40"]),
            ValueKind::Int
            | ValueKind::PositiveInt
            | ValueKind::Uint16
            | ValueKind::Uint32
            | ValueKind::Uint64
            | ValueKind::Nice => integer_cases(kind),
            ValueKind::Memory | ValueKind::Time => size_and_duration_cases(kind),
            ValueKind::DateTime | ValueKind::DateTimeOrBlank => date_cases(kind),
            ValueKind::NodeList
            | ValueKind::JobIdList
            | ValueKind::Dependency
            | ValueKind::ExportSpec
            | ValueKind::Clusters => list_cases(kind),
            ValueKind::JobName => (&["job", "my job #1", "ünï"], &[""]),
            ValueKind::Path => (&["out.%j", "/tmp/x", "a b", "../up"], &[""]),
            ValueKind::Signal | ValueKind::SbatchSignal | ValueKind::SignalName => signal_cases(kind),
            ValueKind::Choice(_) => (&["user", "USER"], &["", "users", "mcs"]),
            // arg_set_open_mode reads arg[0] only.
            ValueKind::Initial(_) => (&["a", "append", "T", "trunc", "apple"], &["", "x", " a"]),
            // scontrol OverSubscribe: a prefix of YES or NO, else parse_uint16 ("" reads as 0).
            ValueKind::YesNo => (&["y", "YES", "ye", "n", "No", "0", "3", ""], &["yess", "nope", "65534", "x"]),
        }
    }

    /// Integers as Slurm's parse_int, parse_uint* and arg_set_nice read them.
    fn integer_cases(kind: ValueKind) -> Cases {
        match kind {
            // parse_int(.., false): strtol takes spaces and a sign; p[0] must be NUL, so an empty
            // value is 0; LONG_MAX (also what an overflow gives) is refused.
            ValueKind::Int => (
                &["0", "4", "007", "+4", " 4", "-0", "", "4294967296", "9223372036854775806"],
                &["-1", "4x", "1.5", "4 ", " ", "+", "9223372036854775807", "99999999999999999999"],
            ),
            // parse_int(.., true): as Int, but the result must be above 0.
            ValueKind::PositiveInt => (&["1", "+2", " 3", "0001"], &["0", "", "-0", "-1", "x", "1e3"]),
            // parse_uint16: strtoll over the whole value, below NO_VAL16; "" reads as 0.
            ValueKind::Uint16 => (&["0", "65533", "", "+5", " 5"], &["65534", "-1", "5x", " ", "1.0"]),
            // parse_uint32: below NO_VAL.
            ValueKind::Uint32 => (&["0", "4294967293", "+7"], &["4294967294", "-1", "4G"]),
            // parse_uint64 (scontrol MinMemoryNode): below LLONG_MAX, no unit suffix.
            ValueKind::Uint64 => (&["1024", "9223372036854775806"], &["4G", "9223372036854775807", "-1", "x"]),
            // arg_set_nice: strtoll(arg, NULL, 10) ignores what follows the number; only
            // llabs(nice) > NICE_OFFSET - 3 is refused.
            ValueKind::Nice => (
                &["0", "-5", "+5", "100", "2147483645", "-2147483645", "10abc", "", "abc"],
                &["2147483646", "-2147483646", "99999999999999999999"],
            ),
            _ => unreachable!("{kind:?} has its cases elsewhere"),
        }
    }

    /// Memory sizes and time limits.
    fn size_and_duration_cases(kind: ValueKind) -> Cases {
        match kind {
            // str_to_mbytes: strtoll, then nothing or K/M/G/T (any case) with an optional B.
            ValueKind::Memory => (
                &[
                    "1024",
                    "4G",
                    "500M",
                    "2t",
                    "16k",
                    "0",
                    "102MB",
                    "4gb",
                    "1Tb",
                    "16Kb",
                    " 5G",
                    "+5",
                    "-0",
                    "9223372036854775807",
                ],
                &["", "G", "4.5G", "-1G", "4 G", "4P", "4GBB", "4B", "4Gx", "99999999999999999999", "0x10"],
            ),
            // time_str2secs / _is_valid_timespec: "-1" is INFINITE, "5-" is five days, "-5" passes
            // the syntax check, and %d takes any number of digits.
            ValueKind::Time => (
                &[
                    "30",
                    "0",
                    "5:00",
                    "1:30:00",
                    "2-0",
                    "2-12",
                    "2-12:30",
                    "2-12:30:15",
                    "UNLIMITED",
                    "infinite",
                    "Unlimited",
                    "-1",
                    "5-",
                    "-5",
                    "123456789",
                    "1:2",
                    "0:0:0",
                ],
                &[
                    "",
                    "1:2:3:4",
                    "1-2-3",
                    "1:",
                    ":5",
                    "1h",
                    "1-2:3:4:5",
                    "never",
                    "1:-2",
                    "1-2:",
                    "+5",
                    " 5",
                    "5 ",
                    "1-:2",
                    "1.5",
                ],
            ),
            _ => unreachable!("{kind:?} has its cases elsewhere"),
        }
    }

    /// Dates and times as parse_time reads them.
    fn date_cases(kind: ValueKind) -> Cases {
        match kind {
            // parse_time(.., 0): every form its loop reads; 'T' and '-' between parts are skipped.
            ValueKind::DateTime => (
                &[
                    "now",
                    "NOW",
                    "now+1hour",
                    "now-2days",
                    "now + 5 minutes",
                    "now+60",
                    "now+1weeks",
                    "today",
                    "tomorrow",
                    "midnight",
                    "noon",
                    "fika",
                    "teatime",
                    "16:00",
                    "4:00 PM",
                    "12:00am",
                    "10:30:15",
                    "0130",
                    "1231",
                    "123124",
                    "1/30",
                    "1/30/24",
                    "1.30.24",
                    "2026-11-24",
                    "2026-11-24T10:00",
                    "2026-11-24T10:00:30",
                    "2026-02-30",
                    "12/31-16:00",
                    "today 16:00",
                    "tomorrow noon",
                    "uts1700000000",
                ],
                &[
                    "",
                    "soon",
                    "Today",
                    "now+",
                    "now+1h",
                    "now+5min",
                    "nowish",
                    "now 12:00",
                    "25:00",
                    "12:60",
                    "13:00pm",
                    "13/01",
                    "1/32",
                    "2024-13-01",
                    "2024-1-5",
                    "1/2/2024",
                    "uts123",
                    "T",
                    "-",
                    " ",
                    "elevenses",
                    "today now",
                ],
            ),
            // parse_time(.., 1) in sacct: only `goto prob` sets errno; naming nothing returns 0.
            ValueKind::DateTimeOrBlank => {
                (&["T", "", " ", "-", "now-2days", "2026-11-24T10:00", "now"], &["soon", "now+", "1/32"])
            }
            _ => unreachable!("{kind:?} has its cases elsewhere"),
        }
    }

    /// Lists Slurm splits: nodes, job ids, dependencies, exported variables, clusters.
    fn list_cases(kind: ValueKind) -> Cases {
        match kind {
            // hostlist_create: space and comma separate names; a name's last [..] must end it.
            ValueKind::NodeList => (
                &[
                    "node01",
                    "node[01-04,7],gpu3",
                    "a.b-c_d",
                    "n1 n2",
                    "n1,,n2",
                    "",
                    "rack[1-2]n[1-4]",
                    "n[",
                    "node[001-100]",
                    "n[1-]",
                ],
                &[
                    "/etc/hosts",
                    "../x",
                    "n[]",
                    "n[1,]",
                    "n[3-1]",
                    "n[1-2]x",
                    "n[1-70000]",
                    "n[a-b]",
                    "n[1x2]",
                    "n[1--2]",
                ],
            ),
            ValueKind::JobIdList => (&["123", "123,456", "123_4,5"], &["", "0", "1,", ",1", "a", "123_", "1_*", "1 2"]),
            ValueKind::Dependency => (
                &[
                    "afterok:20:21,afterany:23",
                    "afterok:20:21?afterany:23",
                    "singleton",
                    "SINGLETON,afterok:5",
                    "after:5+10:6",
                    "AfterOK:7",
                    "aftercorr:1_2",
                    "afternotok:1_*",
                    "afterburstbuffer:9",
                    "123",
                    "123,456",
                ],
                &[
                    "",
                    "afterok",
                    "afterok:",
                    "afterok:x",
                    "afterok:0",
                    "afterok:1,afterany:2?afterok:3",
                    "expand:5",
                    "afterok:5+10",
                    "singleton:5",
                    "123?456",
                    "123,afterok:5",
                    "afterok:1,",
                    "after:5+",
                ],
            ),
            ValueKind::ExportSpec => (
                &["ALL", "NONE", "EDITOR", "ALL,BASH_ENV=/tmp/x", "A=1,B=,_C", "NONE,X=y z"],
                &["", "1X=2", "A-B=1", "ALL,", ",A", "=x", "a b"],
            ),
            // slurmdb_get_info_cluster: "all" (any case) or names; empty items are skipped.
            ValueKind::Clusters => (
                &["all", "ALL", "All", "-1", "local", "a,b", "a,", ",a", "cluster-1.x", "Big_One"],
                &["", ",", "a b", "a;b", "'a'", "c[1-2]", "a/b"],
            ),
            _ => unreachable!("{kind:?} has its cases elsewhere"),
        }
    }

    /// Signals, with the flags and delays srun and sbatch read.
    fn signal_cases(kind: ValueKind) -> Cases {
        match kind {
            // get_signal_opts in srun: an R flag, ':', sig_name2num cast to uint16, '@' and a
            // strtol 0..=65535 (an empty one reads as 0). B is sbatch's only.
            ValueKind::Signal => (
                &[
                    "USR1",
                    "SIGUSR1",
                    "usr1@60",
                    "10",
                    "R:TERM",
                    "R:10@0",
                    "XCPU@65535",
                    "USR1@",
                    "USR1@ 5",
                    "-1",
                    "65537",
                    " USR1 ",
                    ":USR1",
                    "RUSR1",
                    "sigterm",
                ],
                &[
                    "",
                    "0",
                    "65536",
                    "FOO",
                    "B:USR2",
                    "R:",
                    "USR1@65536",
                    "USR1@x",
                    "@60",
                    "SIG",
                    "USR1@5 ",
                    "USR1@-1",
                    "USR1x",
                    "USR",
                ],
            ),
            ValueKind::SbatchSignal => (
                &["B:USR2@90", "BR:10@0", "RB:USR1", "B:10", "RBR:USR1", "BUSR1", "USR1@60", "b:usr1"],
                &["", "X:USR1", "B:", "B:USR1@65536", "BB:USR1", "B:FOO"],
            ),
            // sig_name2num alone (scancel -s), stored in a uint16 that must not be 0.
            ValueKind::SignalName => (
                &["USR1", "SIGUSR1", "usr1", "10", "-1", " 15 ", "65537"],
                &["", "0", "FOO", "B:USR1", "USR1@60", "65536"],
            ),
            _ => unreachable!("{kind:?} has its cases elsewhere"),
        }
    }

    #[test]
    fn every_value_kind_accepts_and_refuses_its_table() {
        for &kind in EVERY_KIND {
            let (good, bad) = cases(kind);
            for v in good {
                assert_eq!(validate(kind, v), Ok(()), "{kind:?} should accept {v:?}");
            }
            for v in bad {
                assert!(validate(kind, v).is_err(), "{kind:?} should refuse {v:?}");
            }
        }
        assert!(validate(ValueKind::JobName, &"j".repeat(256)).is_ok());
        assert!(validate(ValueKind::JobName, &"j".repeat(257)).is_err());
    }

    #[test]
    fn no_value_kind_accepts_a_control_character() {
        for &kind in EVERY_KIND {
            // A kind that takes no value refuses these too (every_value_kind_... checks it).
            let Some(good) = cases(kind).0.iter().find(|v| !v.is_empty()) else { continue };
            for bad in ["\n", "\0", "\r", "\t", "\x1b", "\x7f", "\u{85}", "\u{2028}", "\u{2029}"] {
                for v in [format!("{good}{bad}"), format!("{bad}{good}")] {
                    assert!(validate(kind, &v).is_err(), "{kind:?} accepted {v:?}");
                }
            }
        }
    }

    #[test]
    fn dependency_names_every_job_it_waits_for() {
        assert_eq!(dependency_job_ids("afterok:20:21,afterany:23"), Ok(vec![20, 21, 23]));
        assert_eq!(dependency_job_ids("after:5+10?singleton?aftercorr:7_3"), Ok(vec![5, 7]));
        assert_eq!(dependency_job_ids("singleton"), Ok(vec![]));
        assert_eq!(dependency_job_ids("12,13_*"), Ok(vec![12, 13]));
    }

    #[test]
    fn cluster_names_split_and_lowercase_as_slurm_does() {
        assert_eq!(cluster_names("all"), ["all"]);
        assert_eq!(cluster_names("ALL"), ["all"]);
        assert_eq!(cluster_names("-1"), ["all"], "sacct's old spelling of all");
        assert_eq!(cluster_names("Local"), ["local"]);
        assert_eq!(cluster_names("a,,B,"), ["a", "b"]);
        assert_eq!(cluster_names("all,a"), ["all", "a"], "all is only special as the whole value");
        assert!(cluster_names("").is_empty());
    }

    #[test]
    fn snakemake_and_submitit_values_are_accepted() {
        assert_eq!(validate(ValueKind::Memory, "102MB"), Ok(()));
        assert_eq!(validate(ValueKind::Clusters, "all"), Ok(()));
        assert_eq!(validate(ValueKind::DateTimeOrBlank, "2026-11-24T10:00"), Ok(()));
        assert_eq!(validate(ValueKind::DateTimeOrBlank, "now"), Ok(()));
        assert_eq!(validate(ValueKind::Nice, "-10"), Ok(()));
    }

    #[test]
    fn a_node_list_with_a_slash_is_refused_with_the_reason() {
        let why = validate(ValueKind::NodeList, "./hosts").unwrap_err();
        assert!(why.contains("file"), "{why}");
    }

    #[test]
    fn long_node_lists_take_linear_time() {
        // Each name would make a naive search for ']' scan to the end of the value.
        let many = "x[,".repeat(300_000);
        let t = std::time::Instant::now();
        let _ = validate(ValueKind::NodeList, &many);
        let _ = validate(ValueKind::NodeList, &"n1,".repeat(300_000));
        let _ = validate(ValueKind::NodeList, &format!("{}[", "a,".repeat(300_000)));
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
    }

    #[test]
    fn odd_values_never_panic() {
        let atoms = ["now", "+", "-", "1", ":", "[", "]", ",", " ", "T", "uts", "é", "B", "R", "@", "x", "9", "/"];
        let mut seed = 0x1234_5678_9abc_def1_u64;
        for _ in 0..20_000 {
            let mut v = String::new();
            for _ in 0..(seed % 9) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                v.push_str(atoms[(seed % atoms.len() as u64) as usize]);
            }
            read_every_way(&v);
        }
    }
}
