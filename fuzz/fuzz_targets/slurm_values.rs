//! Every Slurm option value comes from inside the jail: each value grammar answers any text
//! with Ok or a reason, never a panic.
#![no_main]
use chaperon::grammar::{cluster_names, dependency_job_ids, validate, ValueKind};
use libfuzzer_sys::fuzz_target;

const KINDS: &[ValueKind] = &[
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
    ValueKind::Choice(&["a", "b"]),
    ValueKind::Initial(&["all", "none"]),
    ValueKind::YesNo,
    ValueKind::Any,
];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for k in KINDS {
        let _ = validate(*k, &text);
    }
    let _ = dependency_job_ids(&text);
    let _ = cluster_names(&text);
});
