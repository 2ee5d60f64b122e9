//! JSON whose object keys keep the order they were inserted in.
//!
//! fio's tools and the people diffing nines' `--fio-json` against fio's own output read keys in
//! fio's order (percentiles and buckets in numeric order), while `serde_json::Map` sorts keys as
//! strings unless the workspace-wide `preserve_order` feature is switched on, which would change
//! the key order of every other JSON nines writes. This small tree keeps the order locally.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value with ordered objects.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    U64(u64),
    F64(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// An empty object.
    pub fn obj() -> Json {
        Json::Obj(Vec::new())
    }

    /// Appends `key: value` to an object; keys are expected to be unique (asserted).
    pub fn push(&mut self, key: impl Into<String>, value: impl Into<Json>) -> &mut Json {
        let Json::Obj(entries) = self else {
            panic!("Json::push on a non-object");
        };
        let key = key.into();
        debug_assert!(
            entries.iter().all(|(k, _)| *k != key),
            "duplicate key {key}"
        );
        entries.push((key, value.into()));
        self
    }

    /// The value under `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The keys of an object, in order.
    pub fn keys(&self) -> Vec<&str> {
        match self {
            Json::Obj(entries) => entries.iter().map(|(k, _)| k.as_str()).collect(),
            _ => Vec::new(),
        }
    }

    /// Pretty text ending in a newline.
    pub fn to_pretty(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("ordered JSON serialises");
        s.push('\n');
        s
    }

    /// As a `serde_json::Value` (key order lost), for indexing in tests and callers.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("ordered JSON converts")
    }
}

impl From<u64> for Json {
    fn from(v: u64) -> Json {
        Json::U64(v)
    }
}

impl From<u32> for Json {
    fn from(v: u32) -> Json {
        Json::U64(u64::from(v))
    }
}

impl From<f64> for Json {
    fn from(v: f64) -> Json {
        Json::F64(v)
    }
}

impl From<&str> for Json {
    fn from(v: &str) -> Json {
        Json::Str(v.to_string())
    }
}

impl From<String> for Json {
    fn from(v: String) -> Json {
        Json::Str(v)
    }
}

impl From<Vec<Json>> for Json {
    fn from(v: Vec<Json>) -> Json {
        Json::Arr(v)
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::U64(v) => s.serialize_u64(*v),
            // JSON has no NaN or infinity; a rate over no time is reported as 0.
            Json::F64(v) if !v.is_finite() => s.serialize_f64(0.0),
            Json::F64(v) => s.serialize_f64(*v),
            Json::Str(v) => s.serialize_str(v),
            Json::Arr(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(i)?;
                }
                seq.end()
            }
            Json::Obj(entries) => {
                let mut m = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_insertion_order() {
        let mut o = Json::obj();
        o.push("9", 1u64).push("10", 2.5).push("a", "x");
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"9":1,"10":2.5,"a":"x"}"#
        );
        assert_eq!(o.keys(), ["9", "10", "a"]);
        assert_eq!(o.get("10"), Some(&Json::F64(2.5)));
        let mut nan = Json::obj();
        nan.push("r", f64::NAN);
        assert_eq!(serde_json::to_string(&nan).unwrap(), r#"{"r":0.0}"#);
    }
}
