//! Paths in the plan's serialized forms (`--dry-run --json`, the jail's blueprint): a string
//! when the path is UTF-8, an array of its bytes when not. A Linux path is bytes, and serde's
//! own impl refuses those that are not UTF-8: a project, a working directory or a file in a
//! listed tree with such a name would stop every launch that serializes its plan. Read back
//! from either form. Use with `#[serde(with = "os_path")]` (`os_path::vec` for a list).

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    match p.to_str() {
        Some(text) => s.serialize_str(text),
        None => s.serialize_bytes(p.as_os_str().as_bytes()),
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    d.deserialize_any(PathVisitor)
}

struct PathVisitor;

impl<'de> Visitor<'de> for PathVisitor {
    type Value = PathBuf;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a path: a string, or an array of its bytes")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<PathBuf, E> {
        Ok(v.into())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<PathBuf, E> {
        Ok(v.into())
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<PathBuf, E> {
        Ok(OsStr::from_bytes(v).into())
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<PathBuf, E> {
        Ok(OsString::from_vec(v).into())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PathBuf, A::Error> {
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element::<u8>()? {
            bytes.push(b);
        }
        Ok(OsString::from_vec(bytes).into())
    }
}

struct Out<'a>(&'a Path);

impl Serialize for Out<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize(self.0, s)
    }
}

struct In(PathBuf);

impl<'de> Deserialize<'de> for In {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<In, D::Error> {
        deserialize(d).map(In)
    }
}

/// A list of paths, each as above.
pub mod vec {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for p in v {
            seq.serialize_element(&Out(p))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
        Ok(Vec::<In>::deserialize(d)?.into_iter().map(|p| p.0).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Both {
        #[serde(with = "super")]
        one: PathBuf,
        #[serde(with = "super::vec")]
        many: Vec<PathBuf>,
    }

    #[test]
    fn utf8_paths_stay_strings_and_others_cross_as_bytes() {
        let odd = PathBuf::from(OsStr::from_bytes(b"/home/u/proj-\xff/d\xfe"));
        let v = Both { one: "/home/u/proj".into(), many: vec![odd.clone(), "/etc".into()] };
        let text = serde_json::to_string(&v).unwrap();
        assert!(text.starts_with(r#"{"one":"/home/u/proj","many":[["#), "{text}");
        assert!(text.ends_with(r#"],"/etc"]}"#), "{text}");
        assert_eq!(serde_json::from_str::<Both>(&text).unwrap(), v);
        let v = Both { one: odd, many: vec![] };
        assert_eq!(serde_json::from_str::<Both>(&serde_json::to_string(&v).unwrap()).unwrap(), v);
        assert!(serde_json::from_str::<Both>(r#"{"one":[300],"many":[]}"#).is_err(), "a byte is at most 255");
    }
}
