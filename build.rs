//! The built-in policy (`src/policy/builtin.toml`), the lowest layer of every launch, turned
//! into JSON here once instead of parsed as TOML at every start: the TOML parser took a third
//! of a millisecond of each launch, serde_json reads the same tree in a tenth of that.
//! `policy::builtin_layer` reads it; a unit test checks that both give the same layer.

use std::error::Error;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    let source = "src/policy/builtin.toml";
    println!("cargo:rerun-if-changed={source}");
    let text = std::fs::read_to_string(source)?;
    let tree: toml::Value = toml::from_str(&text).map_err(|e| format!("{source}: {e}"))?;
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("cargo sets OUT_DIR")?).join("builtin.json");
    std::fs::write(out, serde_json::to_string(&tree)?)?;
    Ok(())
}
