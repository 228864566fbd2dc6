//! The built-in policy (`src/policy/builtin.toml`), the lowest layer of every launch, turned
//! into JSON here once instead of parsed as TOML at every start: the TOML parser took a third
//! of a millisecond of each launch, serde_json reads the same tree in a tenth of that.
//! `policy::builtin_layer` reads it; a unit test checks that both give the same layer. The
//! credential catalogue (`src/policy/credentials.toml`) becomes Rust source, a static table
//! (`plan::catalogue::CATALOGUE`): even its JSON took 0.1 ms of every start to read. Its
//! schema is checked here; a unit test compares the table with the TOML.

use std::error::Error;
use std::fmt::Write;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("cargo sets OUT_DIR")?);
    let source = "src/policy/builtin.toml";
    println!("cargo:rerun-if-changed={source}");
    let tree: toml::Value = toml::from_str(&std::fs::read_to_string(source)?).map_err(|e| format!("{source}: {e}"))?;
    std::fs::write(out_dir.join("builtin.json"), serde_json::to_string(&tree)?)?;

    let source = "src/policy/credentials.toml";
    println!("cargo:rerun-if-changed={source}");
    let tree: toml::Value = toml::from_str(&std::fs::read_to_string(source)?).map_err(|e| format!("{source}: {e}"))?;
    std::fs::write(out_dir.join("credentials.rs"), catalogue_source(&tree).map_err(|e| format!("{source}: {e}"))?)?;
    Ok(())
}

/// `&[Store { .. }, ..]` for the catalogue's `[[store]]` tables.
fn catalogue_source(tree: &toml::Value) -> Result<String, String> {
    let top = tree.as_table().ok_or("not a table")?;
    if let Some(k) = top.keys().find(|k| *k != "store") {
        return Err(format!("unknown key `{k}`"));
    }
    let stores = top.get("store").and_then(|s| s.as_array()).ok_or("no [[store]] tables")?;
    let mut out = String::from("&[\n");
    for (i, s) in stores.iter().enumerate() {
        let t = s.as_table().ok_or(format!("store {i}: not a table"))?;
        const KEYS: [&str; 10] =
            ["name", "tool", "paths", "found", "doc", "list_vars", "value_prefixes", "login_of", "derived", "made"];
        if let Some(k) = t.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!("store {i}: unknown key `{k}`"));
        }
        let text = |k: &str| t.get(k).and_then(|v| v.as_str()).ok_or(format!("store {i}: `{k}` must be a string"));
        let list = |k: &str| -> Result<Vec<&str>, String> {
            match t.get(k) {
                None => Ok(vec![]),
                Some(v) => v
                    .as_array()
                    .and_then(|a| a.iter().map(|e| e.as_str()).collect::<Option<Vec<&str>>>())
                    .ok_or(format!("store {i}: `{k}` must be a list of strings")),
            }
        };
        let login = match t.get("login_of") {
            None => "None".to_string(),
            Some(_) => format!("Some({:?})", text("login_of")?),
        };
        let derived = match t.get("derived").map(|v| v.as_str()) {
            None => "None",
            Some(Some("git-config")) => "Some(Derived::GitConfig)",
            Some(Some("ssh-config")) => "Some(Derived::SshConfig)",
            Some(_) => return Err(format!("store {i}: `derived` is git-config or ssh-config")),
        };
        let made = match t.get("made").map(|v| v.as_str()) {
            None => "None",
            Some(Some("dir")) => "Some(Made::Dir)",
            Some(Some("file")) => "Some(Made::File)",
            Some(_) => return Err(format!("store {i}: `made` is dir or file")),
        };
        writeln!(
            out,
            "    Store {{ name: {:?}, tool: {:?}, paths: &{:?}, found: {:?}, doc: {:?}, list_vars: &{:?}, \
             value_prefixes: &{:?}, login_of: {login}, derived: {derived}, made: {made} }},",
            text("name")?,
            text("tool")?,
            list("paths")?,
            text("found")?,
            text("doc")?,
            list("list_vars")?,
            list("value_prefixes")?,
        )
        .map_err(|e| e.to_string())?;
    }
    out.push(']');
    Ok(out)
}
