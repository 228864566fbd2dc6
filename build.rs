//! The built-in policy (`src/policy/builtin.toml`), the lowest layer of every launch, turned
//! into JSON here once instead of parsed as TOML at every start: the TOML parser took a third
//! of a millisecond of each launch, serde_json reads the same tree in a tenth of that.
//! `policy::builtin_layer` reads it; a unit test checks that both give the same layer. The
//! credential catalogue (`src/policy/credentials.toml`) is turned into JSON the same way
//! (`plan::catalogue`, whose test compares the two too).

use std::error::Error;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    for (source, json) in
        [("src/policy/builtin.toml", "builtin.json"), ("src/policy/credentials.toml", "credentials.json")]
    {
        println!("cargo:rerun-if-changed={source}");
        let text = std::fs::read_to_string(source)?;
        let tree: toml::Value = toml::from_str(&text).map_err(|e| format!("{source}: {e}"))?;
        let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("cargo sets OUT_DIR")?).join(json);
        std::fs::write(out, serde_json::to_string(&tree)?)?;
    }
    Ok(())
}
