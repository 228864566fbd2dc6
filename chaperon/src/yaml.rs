//! A JSON document written as YAML (block style), for `squeue --yaml`: the chaperon filters
//! Slurm's JSON and writes the same data in the format asked for, without a YAML library.
//! Strings are always double-quoted (JSON string escapes are valid YAML), so no value can
//! be mistaken for another type or break the structure.

use serde_json::Value;

pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    write(v, 0, &mut out);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some("null".into()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())),
        Value::Array(a) if a.is_empty() => Some("[]".into()),
        Value::Object(o) if o.is_empty() => Some("{}".into()),
        _ => None,
    }
}

fn write(v: &Value, indent: usize, out: &mut String) {
    let pad = "  ".repeat(indent);
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, child) in map {
                let key = serde_json::to_string(k).unwrap_or_else(|_| "\"\"".into());
                match scalar(child) {
                    Some(s) => out.push_str(&format!("{pad}{key}: {s}\n")),
                    None => {
                        out.push_str(&format!("{pad}{key}:\n"));
                        write(child, indent + 1, out);
                    }
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                match scalar(item) {
                    Some(s) => out.push_str(&format!("{pad}- {s}\n")),
                    None => {
                        out.push_str(&format!("{pad}-\n"));
                        write(item, indent + 1, out);
                    }
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other).unwrap_or_default())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_documents_become_block_yaml() {
        let v: Value = serde_json::from_str(
            r#"{"jobs":[{"job_id":7,"name":"a: b","tags":[],"nodes":["n1","n2"]}],"errors":[],"meta":{"ok":true,"x":null}}"#,
        )
        .unwrap();
        let y = to_yaml(&v);
        assert_eq!(
            y,
            "\"errors\": []\n\"jobs\":\n  -\n    \"job_id\": 7\n    \"name\": \"a: b\"\n    \"nodes\":\n      - \"n1\"\n      - \"n2\"\n    \"tags\": []\n\"meta\":\n  \"ok\": true\n  \"x\": null\n"
        );
    }
}
