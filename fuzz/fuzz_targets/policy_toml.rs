//! Policy files are read from users' homes and from /etc: any bytes must give a parsed layer
//! or an error naming file and line, never a panic, for every kind of file.
#![no_main]
use agent_sandbox::policy::{merge, parse_layer, FileKind, Source, SourcedLayer};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for kind in [FileKind::Site, FileKind::User, FileKind::Admin, FileKind::Profile, FileKind::PolicyFile] {
        if let Ok(layer) = parse_layer(text, Path::new("fuzz.toml"), kind) {
            let sl = SourcedLayer { layer, source: Source::User("fuzz.toml".into()) };
            let _ = merge(std::slice::from_ref(&sl), None);
            let admin = SourcedLayer { layer: sl.layer.clone(), source: Source::Admin("fuzz.toml".into()) };
            let _ = merge(&[], Some(&admin));
        }
    }
});
