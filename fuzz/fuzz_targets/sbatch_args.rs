//! sbatch arguments and batch scripts come from inside the jail: any argv and any script
//! give a request or an error naming the problem, never a panic; `#SBATCH` lines go through
//! the same grammar as the command line.
#![no_main]
use chaperon::commands::sbatch::{parse_directives, parse_sbatch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (args, script) = text.split_once("\n\n").unwrap_or((&text, ""));
    let argv: Vec<String> = args.split('\n').map(str::to_string).collect();
    let _ = parse_directives(script);
    let _ = parse_sbatch(&argv, Some(script), &[]);
    let _ = parse_sbatch(&argv, None, &[]);
});
