//! sreport arguments come from inside the jail: any argv gives a request or an error naming the
//! problem, never a panic.
#![no_main]
use chaperon::commands::sreport::parse_sreport;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let argv: Vec<String> = text.split('\n').map(str::to_string).collect();
    let _ = parse_sreport(&argv);
});
