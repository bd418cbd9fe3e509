//! A data-only reader of Python pickles (protocols 2 to 5, and the protocol 0/1
//! opcodes those still use), enough for PyTorch flight-recorder dumps.
//!
//! Nothing is ever executed: `GLOBAL`/`STACK_GLOBAL` give a [`Value::Global`]
//! naming the class, and `REDUCE`, `NEWOBJ`, `BUILD`, ... give a
//! [`Value::Object`] that records the class name, the arguments and the state
//! as plain data. Input is untrusted: sizes, nesting depth and element count
//! are capped ([`Limits`]), and a truncated or malformed pickle is an error
//! naming the byte offset, never a panic.
//!
//! The pickle is first read into an arena of nodes (containers hold node
//! ids), so the memo shares containers the way Python does (a list memoized
//! while empty and filled later is seen filled through the memo); the tree is
//! then copied out under the depth and element caps, which also stops
//! self-referencing pickles.

use std::collections::HashMap;

use super::pickle_codes::{int_from_le, legacy_string, op, unsupported_name};
use super::value::{footprint, object_footprint, slot_and, Object, OverBudget, TreeBudget, Value};

/// Caps on untrusted input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest file (or pickle) accepted, bytes.
    pub max_file_bytes: u64,
    /// Deepest nesting of containers accepted. The tree is copied out
    /// recursively, so keep this in the hundreds.
    pub max_depth: usize,
    /// Most values (containers, items and leaves) one pickle may hold.
    pub max_elements: usize,
    /// The bytes the trees copied out of the files of one analysis may
    /// take besides what their sizes grant ([`TreeBudget`]).
    pub tree_floor_bytes: u64,
    /// The bytes of tree each byte of a file grants.
    pub tree_bytes_per_byte: u64,
    /// The most bytes of tree one file grants.
    pub tree_file_cap: u64,
    /// Dict keys whose values are not copied out (they read as `None`): a
    /// flight-recorder dump's stack frames, which the analysis never reads
    /// and which a pickle shares by reference from entry to entry.
    pub skip_keys: &'static [&'static str],
}

impl Limits {
    /// A budget of the floor alone; each file read grants its share.
    pub fn tree_budget(&self) -> TreeBudget {
        TreeBudget::new(
            self.tree_floor_bytes,
            self.tree_bytes_per_byte,
            self.tree_file_cap,
        )
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 256 << 20,
            max_depth: 256,
            max_elements: 16_000_000,
            tree_floor_bytes: 64 << 20,
            tree_bytes_per_byte: 128,
            tree_file_cap: 2 << 30,
            skip_keys: &["frames"],
        }
    }
}

/// Why a pickle could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PickleError {
    #[error("the pickle is {size} bytes, over the limit of {cap} bytes")]
    TooLarge { size: u64, cap: u64 },
    #[error("the pickle ends early, at byte {at} (truncated file?)")]
    Truncated { at: usize },
    #[error("unknown pickle opcode 0x{op:02x} at byte {at}")]
    UnknownOpcode { op: u8, at: usize },
    #[error("pickle opcode {name} at byte {at} is not supported by this data-only reader")]
    Unsupported { name: &'static str, at: usize },
    #[error("pickle protocol {0} is not supported (0 to 5 are)")]
    Protocol(u8),
    #[error("malformed pickle at byte {at}: {what}")]
    Malformed { at: usize, what: String },
    #[error("the pickle nests deeper than {0} levels")]
    TooDeep(usize),
    #[error("the pickle holds more than {0} values")]
    TooManyElements(usize),
    #[error("{0}")]
    OverBudget(#[from] OverBudget),
}

type Id = usize;

/// A value under construction; containers refer to other nodes by id.
enum Node {
    Leaf(Value),
    List(Vec<Id>),
    Tuple(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    Set(Vec<Id>),
    Object(Box<ObjectNode>),
}

#[derive(Default)]
struct ObjectNode {
    class: String,
    args: Vec<Id>,
    kwargs: Vec<(Id, Id)>,
    state: Option<Id>,
    items: Vec<Id>,
    entries: Vec<(Id, Id)>,
}

/// Reads one pickle into a [`Value`] tree, under a budget of its own.
pub fn parse(data: &[u8], limits: &Limits) -> Result<Value, PickleError> {
    let mut tree = limits.tree_budget();
    tree.grant(u64::try_from(data.len()).unwrap_or(u64::MAX));
    parse_within(data, limits, &mut tree)
}

/// [`parse`], the tree charged to `tree` (which the caller granted the
/// file's share).
pub fn parse_within(
    data: &[u8],
    limits: &Limits,
    tree: &mut TreeBudget,
) -> Result<Value, PickleError> {
    let size = u64::try_from(data.len()).unwrap_or(u64::MAX);
    if size > limits.max_file_bytes {
        return Err(PickleError::TooLarge {
            size,
            cap: limits.max_file_bytes,
        });
    }
    let mut machine = Machine::new(data, limits);
    let root = machine.run()?;
    let mut budget = Budget {
        values: limits.max_elements,
        tree,
    };
    machine.build(root, 0, &mut budget)
}

/// What copying the tree out may still take.
struct Budget<'t> {
    values: usize,
    tree: &'t mut TreeBudget,
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    /// Offset of the opcode being run, for messages.
    at: usize,
    limits: &'a Limits,
    nodes: Vec<Node>,
    stack: Vec<Id>,
    /// Stack heights at each MARK.
    marks: Vec<usize>,
    memo: HashMap<u64, Id>,
    /// Values and container slots created so far.
    count: usize,
}

impl<'a> Machine<'a> {
    fn new(data: &'a [u8], limits: &'a Limits) -> Self {
        Machine {
            data,
            pos: 0,
            at: 0,
            limits,
            nodes: Vec::new(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            count: 0,
        }
    }

    /// Runs opcodes up to STOP; returns the id of the result.
    fn run(&mut self) -> Result<Id, PickleError> {
        loop {
            self.at = self.pos;
            let op = self.take(1)?[0];
            if self.step(op)? {
                return self.pop();
            }
        }
    }

    /// Runs one opcode; true at STOP.
    fn step(&mut self, op: u8) -> Result<bool, PickleError> {
        match op {
            op::STOP => return Ok(true),
            op::PROTO => {
                let version = self.take(1)?[0];
                if version > 5 {
                    return Err(PickleError::Protocol(version));
                }
            }
            op::FRAME => {
                self.take(8)?;
            }
            op::MARK | op::POP | op::POP_MARK | op::DUP => self.stack_op(op)?,
            op::PUT | op::BINPUT | op::LONG_BINPUT | op::MEMOIZE => self.put_op(op)?,
            op::GET | op::BINGET | op::LONG_BINGET => self.get_op(op)?,
            op::EMPTY_LIST
            | op::EMPTY_DICT
            | op::EMPTY_TUPLE
            | op::EMPTY_SET
            | op::LIST
            | op::DICT
            | op::TUPLE
            | op::TUPLE1
            | op::TUPLE2
            | op::TUPLE3
            | op::FROZENSET => self.make_container(op)?,
            op::APPEND | op::APPENDS | op::SETITEM | op::SETITEMS | op::ADDITEMS => {
                self.fill_container(op)?
            }
            op::GLOBAL | op::STACK_GLOBAL => self.global(op)?,
            op::REDUCE | op::NEWOBJ | op::NEWOBJ_EX | op::BUILD | op::INST | op::OBJ => {
                self.object_op(op)?
            }
            _ => {
                let leaf = self.scalar(op)?;
                self.push_leaf(leaf)?;
            }
        }
        Ok(false)
    }

    fn stack_op(&mut self, op: u8) -> Result<(), PickleError> {
        match op {
            op::MARK => self.marks.push(self.stack.len()),
            op::POP => {
                if self.marks.last() == Some(&self.stack.len()) {
                    self.marks.pop();
                } else {
                    self.pop()?;
                }
            }
            op::POP_MARK => {
                self.pop_mark()?;
            }
            _ => {
                // A reference pushed is a value the containers built of it
                // hold: it counts as one.
                self.add_count(1)?;
                let top = self.top()?;
                self.stack.push(top);
            }
        }
        Ok(())
    }

    fn put_op(&mut self, op: u8) -> Result<(), PickleError> {
        let key = match op {
            op::PUT => self.text_uint()?,
            op::BINPUT => u64::from(self.take(1)?[0]),
            op::LONG_BINPUT => u64::from(self.u32_le()?),
            _ => u64::try_from(self.memo.len()).unwrap_or(u64::MAX),
        };
        let top = self.top()?;
        self.memo.insert(key, top);
        Ok(())
    }

    fn get_op(&mut self, op: u8) -> Result<(), PickleError> {
        let key = match op {
            op::GET => self.text_uint()?,
            op::BINGET => u64::from(self.take(1)?[0]),
            _ => u64::from(self.u32_le()?),
        };
        match self.memo.get(&key) {
            Some(&id) => {
                self.add_count(1)?;
                self.stack.push(id);
                Ok(())
            }
            None => Err(self.malformed(format!("memo key {key} was never stored"))),
        }
    }

    fn make_container(&mut self, op: u8) -> Result<(), PickleError> {
        let node = match op {
            op::EMPTY_LIST => Node::List(Vec::new()),
            op::EMPTY_DICT => Node::Dict(Vec::new()),
            op::EMPTY_TUPLE => Node::Tuple(Vec::new()),
            op::EMPTY_SET => Node::Set(Vec::new()),
            op::LIST => Node::List(self.pop_mark()?),
            op::TUPLE => Node::Tuple(self.pop_mark()?),
            op::FROZENSET => Node::Set(self.pop_mark()?),
            op::DICT => {
                let items = self.pop_mark()?;
                Node::Dict(self.pairs(&items)?)
            }
            _ => {
                let n = usize::from(op - op::TUPLE1 + 1);
                let split = self
                    .stack
                    .len()
                    .checked_sub(n)
                    .ok_or_else(|| self.malformed("stack underflow".into()))?;
                Node::Tuple(self.stack.split_off(split))
            }
        };
        self.push_node(node)
    }

    fn fill_container(&mut self, op: u8) -> Result<(), PickleError> {
        let items = match op {
            op::APPEND => vec![self.pop()?],
            op::SETITEM => {
                let value = self.pop()?;
                let key = self.pop()?;
                vec![key, value]
            }
            _ => self.pop_mark()?,
        };
        self.add_count(items.len())?;
        let target = self.top()?;
        let pairs = matches!(op, op::SETITEM | op::SETITEMS);
        let pairs = if pairs {
            self.pairs(&items)?
        } else {
            Vec::new()
        };
        let bad =
            || format!("opcode 0x{op:02x} applied to a value that is not a matching container");
        match (&mut self.nodes[target], op) {
            (Node::List(list), op::APPEND | op::APPENDS) => list.extend(items),
            (Node::Set(set), op::ADDITEMS) => set.extend(items),
            (Node::Dict(dict), op::SETITEM | op::SETITEMS) => dict.extend(pairs),
            (Node::Object(obj), op::APPEND | op::APPENDS) => obj.items.extend(items),
            (Node::Object(obj), op::SETITEM | op::SETITEMS) => obj.entries.extend(pairs),
            _ => return Err(self.malformed(bad())),
        }
        Ok(())
    }

    fn global(&mut self, op: u8) -> Result<(), PickleError> {
        let name = if op == op::GLOBAL {
            let module = self.line_str()?;
            let name = self.line_str()?;
            format!("{module}.{name}")
        } else {
            let name = self.pop_str()?;
            let module = self.pop_str()?;
            format!("{module}.{name}")
        };
        self.push_leaf(Value::Global(name))
    }

    /// REDUCE, NEWOBJ, NEWOBJ_EX, BUILD, INST, OBJ: recorded, never called.
    fn object_op(&mut self, op: u8) -> Result<(), PickleError> {
        let mut obj = ObjectNode::default();
        match op {
            op::BUILD => return self.build_op(),
            op::INST => {
                let module = self.line_str()?;
                let name = self.line_str()?;
                obj.class = format!("{module}.{name}");
                obj.args = self.pop_mark()?;
            }
            op::OBJ => {
                let mut items = self.pop_mark()?;
                if items.is_empty() {
                    return Err(self.malformed("OBJ without a class".into()));
                }
                let class = items.remove(0);
                obj.class = self.class_name(class)?;
                obj.args = items;
            }
            _ => {
                if op == op::NEWOBJ_EX {
                    let kwargs = self.pop()?;
                    obj.kwargs = match &self.nodes[kwargs] {
                        Node::Dict(pairs) => pairs.clone(),
                        _ => return Err(self.malformed("NEWOBJ_EX keywords are not a dict".into())),
                    };
                }
                let args = self.pop()?;
                obj.args = match &self.nodes[args] {
                    Node::Tuple(items) => items.clone(),
                    _ => return Err(self.malformed("call arguments are not a tuple".into())),
                };
                // Copies of a tuple the memo may hand out again and again:
                // each of its references counts anew.
                self.add_count(obj.args.len().saturating_add(obj.kwargs.len()))?;
                let class = self.pop()?;
                obj.class = self.class_name(class)?;
            }
        }
        self.push_node(Node::Object(Box::new(obj)))
    }

    fn build_op(&mut self) -> Result<(), PickleError> {
        let state = self.pop()?;
        let target = self.top()?;
        match &mut self.nodes[target] {
            Node::Object(obj) => {
                obj.state = Some(state);
                Ok(())
            }
            _ => Err(self.malformed("BUILD on a value that is not an object".into())),
        }
    }

    fn class_name(&self, id: Id) -> Result<String, PickleError> {
        match &self.nodes[id] {
            Node::Leaf(Value::Global(name)) => Ok(name.clone()),
            _ => Err(self.malformed("a call on something that is not a class".into())),
        }
    }

    /// Opcodes that push one scalar.
    fn scalar(&mut self, op: u8) -> Result<Value, PickleError> {
        Ok(match op {
            op::NONE => Value::None,
            op::NEWTRUE => Value::Bool(true),
            op::NEWFALSE => Value::Bool(false),
            op::BININT => Value::Int(i64::from(i32::from_le_bytes(self.array()?))),
            op::BININT1 => Value::Int(i64::from(self.take(1)?[0])),
            op::BININT2 => Value::Int(i64::from(u16::from_le_bytes(self.array()?))),
            op::LONG1 => {
                let n = usize::from(self.take(1)?[0]);
                int_from_le(self.take(n)?)
            }
            op::LONG4 => {
                let n = i32::from_le_bytes(self.array()?);
                let n = usize::try_from(n).map_err(|_| self.malformed("negative length".into()))?;
                if n > 1024 {
                    return Err(self.malformed(format!("integer of {n} bytes is too large")));
                }
                int_from_le(self.take(n)?)
            }
            op::BINFLOAT => Value::Float(f64::from_be_bytes(self.array()?)),
            op::INT | op::LONG | op::FLOAT => self.text_number(op)?,
            op::SHORT_BINUNICODE => self.sized_str(1)?,
            op::BINUNICODE => self.sized_str(4)?,
            op::BINUNICODE8 => self.sized_str(8)?,
            op::SHORT_BINBYTES => Value::Bytes(self.sized(1)?.to_vec()),
            op::BINBYTES => Value::Bytes(self.sized(4)?.to_vec()),
            op::BINBYTES8 | op::BYTEARRAY8 => Value::Bytes(self.sized(8)?.to_vec()),
            op::SHORT_BINSTRING => legacy_string(self.sized(1)?),
            op::BINSTRING => legacy_string(self.sized(4)?),
            _ => return Err(self.unknown(op)),
        })
    }

    fn unknown(&self, op: u8) -> PickleError {
        match unsupported_name(op) {
            Some(name) => PickleError::Unsupported { name, at: self.at },
            None => PickleError::UnknownOpcode { op, at: self.at },
        }
    }

    /// INT, LONG and FLOAT, written as text lines (protocol 0, still used by 2).
    fn text_number(&mut self, op: u8) -> Result<Value, PickleError> {
        let line = self.line_str()?;
        let parsed = match op {
            op::INT if line == "00" => Some(Value::Bool(false)),
            op::INT if line == "01" => Some(Value::Bool(true)),
            op::INT | op::LONG => {
                let digits = line.strip_suffix('L').unwrap_or(&line);
                digits.parse::<i128>().ok().map(|i| match i64::try_from(i) {
                    Ok(small) => Value::Int(small),
                    Err(_) => Value::BigInt(i),
                })
            }
            _ => line.parse::<f64>().ok().map(Value::Float),
        };
        parsed.ok_or_else(|| self.malformed(format!("bad number {line:?}")))
    }

    fn sized_str(&mut self, width: usize) -> Result<Value, PickleError> {
        let bytes = self.sized(width)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(Value::Str(s.to_owned())),
            Err(_) => Err(self.malformed("string is not valid UTF-8".into())),
        }
    }

    /// A length (little-endian, `width` bytes) and that many bytes.
    fn sized(&mut self, width: usize) -> Result<&'a [u8], PickleError> {
        let mut len = [0u8; 8];
        len[..width].copy_from_slice(self.take(width)?);
        let n = u64::from_le_bytes(len);
        let n = usize::try_from(n).map_err(|_| PickleError::Truncated {
            at: self.data.len(),
        })?;
        self.take(n)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.data.len())
            .ok_or(PickleError::Truncated {
                at: self.data.len(),
            })?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], PickleError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32_le(&mut self) -> Result<u32, PickleError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A newline-terminated ASCII line (without the newline).
    fn line_str(&mut self) -> Result<String, PickleError> {
        let rest = &self.data[self.pos..];
        let len = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(PickleError::Truncated {
                at: self.data.len(),
            })?;
        let line = self.take(len + 1)?;
        match std::str::from_utf8(&line[..len]) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(self.malformed("text line is not valid UTF-8".into())),
        }
    }

    fn text_uint(&mut self) -> Result<u64, PickleError> {
        let line = self.line_str()?;
        line.parse()
            .map_err(|_| self.malformed(format!("bad memo key {line:?}")))
    }

    fn malformed(&self, what: String) -> PickleError {
        PickleError::Malformed { at: self.at, what }
    }

    fn add_count(&mut self, n: usize) -> Result<(), PickleError> {
        self.count = self.count.saturating_add(n);
        if self.count > self.limits.max_elements {
            return Err(PickleError::TooManyElements(self.limits.max_elements));
        }
        Ok(())
    }

    fn push_node(&mut self, node: Node) -> Result<(), PickleError> {
        self.add_count(1)?;
        self.nodes.push(node);
        self.stack.push(self.nodes.len() - 1);
        Ok(())
    }

    fn push_leaf(&mut self, value: Value) -> Result<(), PickleError> {
        self.push_node(Node::Leaf(value))
    }

    fn top(&self) -> Result<Id, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match self.stack.last() {
            Some(&id) if self.stack.len() > floor => Ok(id),
            _ => Err(self.malformed("stack underflow".into())),
        }
    }

    fn pop(&mut self) -> Result<Id, PickleError> {
        let id = self.top()?;
        self.stack.pop();
        Ok(id)
    }

    fn pop_str(&mut self) -> Result<String, PickleError> {
        let id = self.pop()?;
        match &self.nodes[id] {
            Node::Leaf(Value::Str(s)) => Ok(s.clone()),
            _ => Err(self.malformed("STACK_GLOBAL expects two strings".into())),
        }
    }

    /// Everything pushed since the last MARK, and the mark itself.
    fn pop_mark(&mut self) -> Result<Vec<Id>, PickleError> {
        let height = self
            .marks
            .pop()
            .ok_or_else(|| self.malformed("no MARK to pop to".into()))?;
        if height > self.stack.len() {
            return Err(self.malformed("MARK above the stack".into()));
        }
        Ok(self.stack.split_off(height))
    }

    fn pairs(&self, items: &[Id]) -> Result<Vec<(Id, Id)>, PickleError> {
        if items.len() % 2 != 0 {
            return Err(self.malformed("odd number of items for key-value pairs".into()));
        }
        Ok(items.chunks_exact(2).map(|kv| (kv[0], kv[1])).collect())
    }

    /// Copies node `id` out as a tree, under the depth, element and
    /// tree caps; the values of [`Limits::skip_keys`] are left out.
    fn build(&self, id: Id, depth: usize, budget: &mut Budget) -> Result<Value, PickleError> {
        if depth > self.limits.max_depth {
            return Err(PickleError::TooDeep(self.limits.max_depth));
        }
        budget.values = budget
            .values
            .checked_sub(1)
            .ok_or(PickleError::TooManyElements(self.limits.max_elements))?;
        // Charged before it is copied: a leaf's text is what a bomb repeats.
        budget.tree.take(match &self.nodes[id] {
            Node::Leaf(v) => footprint(v),
            Node::Object(obj) => object_footprint(&obj.class),
            _ => slot_and(0),
        })?;
        let many = |ids: &[Id], budget: &mut Budget| -> Result<Vec<Value>, PickleError> {
            ids.iter()
                .map(|&i| self.build(i, depth + 1, budget))
                .collect()
        };
        let pairs = |ids: &[(Id, Id)], budget: &mut Budget| {
            let mut out = Vec::with_capacity(ids.len());
            for &(k, v) in ids {
                let key = self.build(k, depth + 1, budget)?;
                let skipped = key
                    .as_str()
                    .is_some_and(|k| self.limits.skip_keys.contains(&k));
                let value = if skipped {
                    Value::None
                } else {
                    self.build(v, depth + 1, budget)?
                };
                out.push((key, value));
            }
            Ok::<_, PickleError>(out)
        };
        Ok(match &self.nodes[id] {
            Node::Leaf(v) => v.clone(),
            Node::List(ids) => Value::List(many(ids, budget)?),
            Node::Tuple(ids) => Value::Tuple(many(ids, budget)?),
            Node::Set(ids) => Value::Set(many(ids, budget)?),
            Node::Dict(ids) => Value::Dict(pairs(ids, budget)?),
            Node::Object(obj) => Value::Object(Box::new(Object {
                class: obj.class.clone(),
                args: many(&obj.args, budget)?,
                kwargs: pairs(&obj.kwargs, budget)?,
                state: match obj.state {
                    Some(s) => Some(self.build(s, depth + 1, budget)?),
                    None => None,
                },
                items: many(&obj.items, budget)?,
                entries: pairs(&obj.entries, budget)?,
            })),
        })
    }
}

#[cfg(test)]
#[path = "pickle_tests.rs"]
mod tests;
