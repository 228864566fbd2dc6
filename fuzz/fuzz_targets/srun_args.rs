//! srun arguments come from inside the jail: any argv gives a request or an error naming the
//! problem, never a panic; options after the command are the command's, never srun's.
#![no_main]
use chaperon::commands::srun::parse_srun;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let argv: Vec<String> = text.split('\n').map(str::to_string).collect();
    let _ = parse_srun(&argv, &[]);
});
