//! The data tree both PyTorch dump forms are read into: what a Python pickle
//! or a JSON document holds, with no code and no classes behind it. A pickled
//! object that would have been built by calling a class is kept as an inert
//! [`Object`] that records the class name and its arguments.

/// A Python value, as data.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer outside `i64` that fits `i128`.
    BigInt(i128),
    /// An integer outside `i128`, in decimal.
    HugeInt(String),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    /// Key-value pairs in insertion order (a later pair wins over an earlier one).
    Dict(Vec<(Value, Value)>),
    /// `set` and `frozenset`.
    Set(Vec<Value>),
    /// A reference to a class or function (`GLOBAL`, `STACK_GLOBAL`), never resolved.
    Global(String),
    /// What a call of a class or function (`REDUCE`, `NEWOBJ`, `BUILD`...) would have made.
    Object(Box<Object>),
}

/// An object the pickle asked to construct, recorded without constructing it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Object {
    /// `module.name` of the class or function.
    pub class: String,
    /// Positional arguments of the call.
    pub args: Vec<Value>,
    /// Keyword arguments (`NEWOBJ_EX`).
    pub kwargs: Vec<(Value, Value)>,
    /// The state `BUILD` would have passed to `__setstate__`.
    pub state: Option<Value>,
    /// Items appended to it (`APPEND`, `APPENDS`).
    pub items: Vec<Value>,
    /// Pairs set on it (`SETITEM`, `SETITEMS`).
    pub entries: Vec<(Value, Value)>,
}

impl Value {
    /// The value under a string key of a dict; the last such key wins, as in Python.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(pairs) => pairs
                .iter()
                .rev()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The pairs of a dict.
    pub fn as_dict(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Dict(pairs) => Some(pairs),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The items of a list or a tuple.
    pub fn as_seq(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) | Value::Tuple(items) => Some(items),
            _ => None,
        }
    }

    /// An integer, also when written as a decimal string (PyTorch's JSON dumps
    /// write some counters that way).
    pub fn as_int(&self) -> Option<i128> {
        match self {
            Value::Int(i) => Some(i128::from(*i)),
            Value::BigInt(i) => Some(*i),
            Value::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    pub fn is_none(&self) -> bool {
        matches!(self, Value::None)
    }

    /// A short name of the variant, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) | Value::HugeInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
            Value::Set(_) => "set",
            Value::Global(_) => "global",
            Value::Object(_) => "object",
        }
    }
}

impl From<&serde_json::Value> for Value {
    /// JSON to the same tree a pickle gives, so one reader serves both forms.
    /// (serde_json already caps the nesting depth while parsing.)
    fn from(json: &serde_json::Value) -> Self {
        match json {
            serde_json::Value::Null => Value::None,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::Int(i)
                } else if let Some(u) = n.as_u64() {
                    Value::BigInt(i128::from(u))
                } else {
                    Value::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Array(items) => Value::List(items.iter().map(Value::from).collect()),
            serde_json::Value::Object(map) => Value::Dict(
                map.iter()
                    .map(|(k, v)| (Value::Str(k.clone()), Value::from(v)))
                    .collect(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_takes_the_last_duplicate_key() {
        let d = Value::Dict(vec![
            (Value::Str("a".into()), Value::Int(1)),
            (Value::Str("a".into()), Value::Int(2)),
        ]);
        assert_eq!(d.get("a"), Some(&Value::Int(2)));
        assert_eq!(d.get("b"), None);
        assert_eq!(Value::Int(3).get("a"), None);
    }

    #[test]
    fn ints_from_strings_and_big_numbers() {
        assert_eq!(Value::Str(" 11".into()).as_int(), Some(11));
        assert_eq!(Value::Str("x".into()).as_int(), None);
        let json: serde_json::Value =
            serde_json::from_str("[18446744073709551615, -1, 1.5]").unwrap();
        let v = Value::from(&json);
        let items = v.as_seq().unwrap();
        assert_eq!(items[0].as_int(), Some(i128::from(u64::MAX)));
        assert_eq!(items[1], Value::Int(-1));
        assert_eq!(items[2], Value::Float(1.5));
    }
}
