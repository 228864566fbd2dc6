//! Every Slurm option value comes from inside the jail: each value grammar answers any text
//! with Ok or a reason, never a panic. The grammar's own `read_every_way` walks every reader
//! it has, so a new value kind is fuzzed without a change here.
#![no_main]
use chaperon::grammar::read_every_way;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    read_every_way(&String::from_utf8_lossy(data));
});
