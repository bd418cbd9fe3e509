//! A JSON document read straight into a [`Value`] tree, the tree a pickle
//! gives, so one reader serves both dump forms. No intermediate document is
//! built (it took as much memory again as the tree), every value is charged
//! to a [`TreeBudget`], and the values of the keys asked to be skipped (a
//! dump's stack frames) are read past without being kept. Keys keep their
//! order, repeats included (`Value::get` takes the last, as Python does).

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::value::{slot_and, OverBudget, TreeBudget, Value};

/// Why a JSON document could not be read into a tree.
#[derive(Debug, thiserror::Error)]
pub enum JsonTreeError {
    #[error("invalid or truncated JSON: {0}")]
    Syntax(serde_json::Error),
    #[error("{0}")]
    OverBudget(OverBudget),
}

/// Reads `bytes` (one JSON document) into a tree; the values of a dict key
/// in `skip` read as `None`.
pub fn read(bytes: &[u8], budget: &mut TreeBudget, skip: &[&str]) -> Result<Value, JsonTreeError> {
    let mut state = State {
        budget,
        skip,
        over: None,
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let read = Seed(&mut state).deserialize(&mut de).and_then(|v| {
        de.end()?;
        Ok(v)
    });
    match (read, state.over) {
        (_, Some(over)) => Err(JsonTreeError::OverBudget(over)),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(JsonTreeError::Syntax(e)),
    }
}

struct State<'a, 'b> {
    budget: &'a mut TreeBudget,
    skip: &'b [&'b str],
    /// The budget ran out (said apart from a syntax error).
    over: Option<OverBudget>,
}

impl State<'_, '_> {
    /// Charges a value of `heap` bytes besides its slot.
    fn charge<E: de::Error>(&mut self, heap: usize) -> Result<(), E> {
        self.budget.take(slot_and(heap)).map_err(|over| {
            self.over = Some(over);
            E::custom(over)
        })
    }
}

struct Seed<'s, 'a, 'b>(&'s mut State<'a, 'b>);

impl<'de> DeserializeSeed<'de> for Seed<'_, '_, '_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_, '_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::None)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Int(i))
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(match i64::try_from(u) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::BigInt(i128::from(u)),
        })
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Float(f))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        self.0.charge(s.len())?;
        Ok(Value::Str(s.to_owned()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Value, E> {
        self.0.charge(s.len())?;
        Ok(Value::Str(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.charge(0)?;
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(Seed(&mut *self.0))? {
            items.push(v);
        }
        Ok(Value::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.charge(0)?;
        let mut pairs = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            self.0.charge(key.len())?;
            let value = if self.0.skip.contains(&key.as_str()) {
                map.next_value::<IgnoredAny>()?;
                Value::None
            } else {
                map.next_value_seed(Seed(&mut *self.0))?
            };
            pairs.push((Value::Str(key), value));
        }
        Ok(Value::Dict(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roomy() -> TreeBudget {
        TreeBudget::new(1 << 20, 1, 1 << 20)
    }

    #[test]
    fn reads_every_json_type_and_keeps_key_order() {
        let text = br#"{"b": [18446744073709551615, -1, 1.5, null, true], "a": "x", "b": 2}"#;
        let v = read(text, &mut roomy(), &[]).unwrap();
        let pairs = v.as_dict().unwrap();
        let keys: Vec<&str> = pairs.iter().filter_map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["b", "a", "b"]);
        assert_eq!(v.get("b"), Some(&Value::Int(2)), "the last repeat wins");
        let items = pairs[0].1.as_seq().unwrap();
        assert_eq!(items[0].as_int(), Some(i128::from(u64::MAX)));
        assert_eq!(
            &items[1..],
            &[
                Value::Int(-1),
                Value::Float(1.5),
                Value::None,
                Value::Bool(true)
            ]
        );
    }

    #[test]
    fn skipped_keys_read_as_none_and_cost_nothing() {
        let frames = format!(r#"{{"frames": ["{}"], "seq": 1}}"#, "f".repeat(10_000));
        let mut tight = TreeBudget::new(1_000, 0, 0);
        let v = read(frames.as_bytes(), &mut tight, &["frames"]).unwrap();
        assert_eq!(v.get("frames"), Some(&Value::None));
        assert_eq!(v.get("seq"), Some(&Value::Int(1)));
        let err = read(frames.as_bytes(), &mut TreeBudget::new(1_000, 0, 0), &[]).unwrap_err();
        assert!(matches!(err, JsonTreeError::OverBudget(_)), "{err}");
        assert!(err.to_string().contains("more than 1000B"), "{err}");
    }

    #[test]
    fn syntax_errors_say_where() {
        let err = read(br#"{"a": [1, 2"#, &mut roomy(), &[]).unwrap_err();
        assert!(matches!(err, JsonTreeError::Syntax(_)), "{err}");
        assert!(
            err.to_string().starts_with("invalid or truncated JSON: "),
            "{err}"
        );
        let err = read(br#"{"a": 1} x"#, &mut roomy(), &[]).unwrap_err();
        assert!(err.to_string().contains("trailing characters"), "{err}");
    }
}
