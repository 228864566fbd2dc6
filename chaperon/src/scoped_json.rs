//! A JSON document a Slurm command printed (`scontrol show job --json`, `show step --json`,
//! `listjobs --json`: `{"jobs": [...], "meta": ..., "errors": ..., "warnings": ...}`, or
//! `"steps"` in place of `"jobs"`) narrowed to a session's scope: the records of jobs out of
//! scope are dropped, everything else is kept as Slurm wrote it. A document without the list
//! the chaperon expects is refused, never passed on unnarrowed. Pure.

use serde_json::Value;

/// Keeps in `doc[list]` the records whose job is in `ids`: a job record by its `job_id`, or,
/// for an array task or a heterogeneous job's component, by the array's or the het job's id
/// (the one the scope recorded at submission); a step record by the job of its `id`
/// (`"24000033.batch"`, or `{"job_id": ...}`), its array's or its het job's. Err: what is
/// wrong with the document.
pub fn narrow(doc: &mut Value, list: &str, ids: &[u32]) -> Result<(), String> {
    let records = doc
        .get_mut(list)
        .and_then(Value::as_array_mut)
        .ok_or_else(|| format!("Slurm's JSON has no \"{list}\" list, so it cannot be narrowed to your jobs"))?;
    records.retain(|r| jobs_of(r).into_iter().any(|j| ids.contains(&j)));
    Ok(())
}

/// The job ids a record belongs to (0, Slurm's "none", left out).
fn jobs_of(record: &Value) -> Vec<u32> {
    let mut out = vec![];
    for v in [
        record.get("job_id"),
        record.get("array_job_id"),
        record.get("het_job_id"),
        record.pointer("/array/job_id"),
        record.pointer("/het/job_id"),
    ]
    .into_iter()
    .flatten()
    {
        out.extend(number(v));
    }
    match record.get("id") {
        Some(Value::String(step)) => out.extend(step.split(['.', '_', '+']).next().and_then(|j| j.parse::<u32>().ok())),
        Some(id @ Value::Object(_)) => out.extend(id.get("job_id").and_then(number)),
        _ => {}
    }
    out.retain(|&j| j != 0);
    out
}

/// A job id as Slurm writes it: a number, or `{"set": true, "number": N}` (data_parser
/// v0.0.40 and later).
fn number(v: &Value) -> Option<u32> {
    let n = match v {
        Value::Object(o) if o.get("set").and_then(Value::as_bool) == Some(true) => o.get("number")?,
        Value::Object(_) => return None,
        n => n,
    };
    n.as_u64().and_then(|n| u32::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(n: u64) -> Value {
        json!({"set": true, "infinite": false, "number": n})
    }

    #[test]
    fn jobs_out_of_scope_are_dropped_and_the_rest_is_kept() {
        // As scontrol 24.11 prints it (fields cut): a plain job, two tasks of array 35, someone
        // else's job.
        let mut doc = json!({
            "jobs": [
                {"job_id": 33, "array_job_id": set(0), "het_job_id": set(0), "user_name": "me"},
                {"job_id": 36, "array_job_id": set(35), "het_job_id": set(0)},
                {"job_id": 35, "array_job_id": set(35), "het_job_id": set(0)},
                {"job_id": 40, "array_job_id": set(0), "het_job_id": set(0), "user_name": "other"},
            ],
            "last_backfill": set(0),
            "meta": {"slurm": {"release": "24.11.5"}},
            "errors": [],
            "warnings": [{"description": "w"}],
        });
        narrow(&mut doc, "jobs", &[33, 35]).unwrap();
        let kept: Vec<u64> = doc["jobs"].as_array().unwrap().iter().map(|j| j["job_id"].as_u64().unwrap()).collect();
        assert_eq!(kept, [33, 36, 35]);
        assert_eq!(doc["meta"]["slurm"]["release"], "24.11.5");
        assert_eq!(doc["warnings"][0]["description"], "w");
        assert_eq!(doc["last_backfill"], set(0));
    }

    #[test]
    fn steps_by_their_job() {
        let mut doc = json!({"steps": [
            {"id": "33.batch", "array": {"job_id": 0, "task_id": 4294967294u64}},
            {"id": "36.0", "array": {"job_id": 35, "task_id": 1}},
            {"id": "40.extern", "array": {"job_id": 0}},
            {"id": {"job_id": 33, "step_id": "0"}},
        ]});
        narrow(&mut doc, "steps", &[33, 35]).unwrap();
        assert_eq!(doc["steps"].as_array().unwrap().len(), 3);
        assert!(!doc.to_string().contains("40.extern"));
    }

    #[test]
    fn a_document_without_the_list_is_refused() {
        for bad in [json!({}), json!({"jobs": {}}), json!([]), json!({"steps": []})] {
            let mut d = bad.clone();
            assert!(narrow(&mut d, "jobs", &[1]).is_err(), "{bad}");
        }
        // Records with no job id, or a job id Slurm says is unset, are no one's in scope.
        let mut doc = json!({"jobs": [{"name": "x"}, {"job_id": set(1)}, {"job_id": {"set": false, "number": 1}},
                                      {"job_id": -1}, {"job_id": 1u64 << 40}]});
        narrow(&mut doc, "jobs", &[1]).unwrap();
        assert_eq!(doc["jobs"].as_array().unwrap().len(), 1);
    }
}
