//! A repository's config comes from inside the jail: the guard's reader never panics, what it
//! writes reads back to the same entries, and what it installs for a repository that was
//! there (old bytes, then appended entries) reads as exactly those, or is refused.
#![no_main]
use agent_sandbox::jail::guard::gitconfig::{keep_allowed, parse, sanitise, write, Base, Place};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let (old, new) = match data.iter().position(|b| *b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b""[..], data),
    };
    let place = Place { gitdir: Path::new("/p/sub/.git"), root: Path::new("/p") };
    if let Ok(entries) = parse(new) {
        let written = write(&entries);
        assert_eq!(parse(&written).expect("what is written reads back"), entries);
    }
    for base in [Base::New, Base::Existing(old)] {
        if let Ok(out) = sanitise(new, base, &place) {
            assert!(parse(&out).is_ok(), "installed bytes parse");
        }
    }
    if let (Ok(before), Ok((out, _))) = (parse(old), keep_allowed(new, Base::Existing(old), &place)) {
        let after = parse(&out).expect("installed bytes parse");
        assert!(after.starts_with(&before), "the old entries stay first");
    }
});
