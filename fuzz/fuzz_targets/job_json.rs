//! `job.json` is read on the compute node from a directory the user owns: any bytes give a
//! job spec or an error, never a panic.
#![no_main]
use chaperon::job::JobSpec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(spec) = JobSpec::parse(data) {
        let _ = spec.environment(&[("PATH".into(), "/usr/bin".into())]);
    }
});
