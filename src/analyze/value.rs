//! The data tree both PyTorch dump forms are read into: what a Python pickle
//! or a JSON document holds, with no code and no classes behind it. A pickled
//! object that would have been built by calling a class is kept as an inert
//! [`Object`] that records the class name and its arguments.

use crate::units::Bytes;

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

/// What the value trees read from untrusted files may take, in bytes, all
/// files of one analysis together: a floor, and a number of bytes for each
/// byte of file read (up to a cap a file). A pickle's memo lets a few bytes
/// stand for any number of copies of a value (a 4 KiB string referenced
/// through nested lists of 8 references each is 16 million copies); a tree
/// copied out past this is refused rather than filling the machine's
/// memory.
#[derive(Clone, Debug)]
pub struct TreeBudget {
    left: u64,
    granted: u64,
    floor: u64,
    per_byte: u64,
    file_cap: u64,
}

/// A tree that would take more than its budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("its values take more than {} once copied out (an analysis allows {} and {per_byte} bytes for each byte of the files it reads): a pickle memo repeating values past what any flight-recorder dump holds, or more dumps than this machine can hold", Bytes(*granted), Bytes(*floor))]
pub struct OverBudget {
    pub granted: u64,
    pub per_byte: u64,
    pub floor: u64,
}

impl TreeBudget {
    /// `floor` bytes to start with; each file read grants `per_byte` bytes
    /// for each of its bytes, at most `file_cap`.
    pub fn new(floor: u64, per_byte: u64, file_cap: u64) -> Self {
        TreeBudget {
            left: floor,
            granted: floor,
            floor,
            per_byte,
            file_cap,
        }
    }

    /// Grants what a file of `len` bytes may take.
    pub fn grant(&mut self, len: u64) {
        let more = len.saturating_mul(self.per_byte).min(self.file_cap);
        self.left = self.left.saturating_add(more);
        self.granted = self.granted.saturating_add(more);
    }

    /// Takes `bytes` from what is left.
    pub fn take(&mut self, bytes: u64) -> Result<(), OverBudget> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(OverBudget {
                granted: self.granted,
                per_byte: self.per_byte,
                floor: self.floor,
            }),
        }
    }
}

/// The bytes a value takes in a tree: its slot, and the text or bytes it
/// owns (a container's items are values of their own).
pub fn footprint(v: &Value) -> u64 {
    match v {
        Value::Str(s) | Value::HugeInt(s) | Value::Global(s) => slot_and(s.len()),
        Value::Bytes(b) => slot_and(b.len()),
        Value::Object(o) => object_footprint(&o.class),
        _ => slot_and(0),
    }
}

/// The bytes of a value's slot and `heap` bytes it owns.
pub fn slot_and(heap: usize) -> u64 {
    (std::mem::size_of::<Value>() + heap) as u64
}

/// The bytes an object of `class` takes before its arguments and items.
pub fn object_footprint(class: &str) -> u64 {
    slot_and(std::mem::size_of::<Object>() + class.len())
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
        assert_eq!(Value::BigInt(1 << 70).as_int(), Some(1 << 70));
    }

    #[test]
    fn the_budget_has_a_floor_and_grants_by_the_byte_up_to_a_cap() {
        let mut b = TreeBudget::new(100, 10, 1_000);
        assert_eq!(b.take(60), Ok(()));
        b.grant(5);
        assert_eq!(b.take(90), Ok(()), "40 left of the floor and 50 granted");
        let over = OverBudget {
            granted: 150,
            per_byte: 10,
            floor: 100,
        };
        assert_eq!(b.take(1), Err(over));
        b.grant(1 << 40);
        assert_eq!(b.take(1_000), Ok(()), "a file grants at most its cap");
        assert!(b.take(1).is_err());
        let s = Value::Str("abc".into());
        let slot = std::mem::size_of::<Value>() as u64;
        assert_eq!((footprint(&s), footprint(&Value::Int(1))), (slot + 3, slot));
    }
}
