//! Opcode bytes of the pickle format and the decoding of pickled scalars
//! that need more than a byte copy (two's-complement integers of any width,
//! protocol 0-2 byte strings), for the reader in `pickle`.

use super::value::Value;

/// Protocol 0-2 `str` bytes: text when they are UTF-8.
pub(super) fn legacy_string(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => Value::Str(s.to_owned()),
        Err(_) => Value::Bytes(bytes.to_vec()),
    }
}

/// A little-endian two's-complement integer (LONG1, LONG4).
pub(super) fn int_from_le(bytes: &[u8]) -> Value {
    let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
    if bytes.len() <= 16 {
        let mut buf = [if negative { 0xff } else { 0 }; 16];
        buf[..bytes.len()].copy_from_slice(bytes);
        let i = i128::from_le_bytes(buf);
        return match i64::try_from(i) {
            Ok(small) => Value::Int(small),
            Err(_) => Value::BigInt(i),
        };
    }
    Value::HugeInt(huge_decimal(bytes, negative))
}

/// Decimal text of a two's-complement integer wider than 128 bits.
fn huge_decimal(le: &[u8], negative: bool) -> String {
    let mut magnitude: Vec<u8> = le.to_vec();
    if negative {
        let mut carry = true;
        for b in &mut magnitude {
            let (sum, overflow) = (!*b).overflowing_add(u8::from(carry));
            *b = sum;
            carry = carry && overflow;
        }
    }
    let mut digits: Vec<u8> = magnitude
        .into_iter()
        .rev()
        .skip_while(|&b| b == 0)
        .collect();
    let mut chunks: Vec<u64> = Vec::new();
    while !digits.is_empty() {
        let mut rem: u64 = 0;
        let mut quotient = Vec::with_capacity(digits.len());
        for &d in &digits {
            let cur = rem * 256 + u64::from(d);
            let q = cur / 1_000_000_000;
            rem = cur % 1_000_000_000;
            if !(quotient.is_empty() && q == 0) {
                quotient.push(u8::try_from(q).unwrap_or(u8::MAX));
            }
        }
        chunks.push(rem);
        digits = quotient;
    }
    let mut text = String::from(if negative { "-" } else { "" });
    for (i, chunk) in chunks.iter().rev().enumerate() {
        if i == 0 {
            text.push_str(&chunk.to_string());
        } else {
            text.push_str(&format!("{chunk:09}"));
        }
    }
    if chunks.is_empty() {
        text.push('0');
    }
    text
}

/// The name of an opcode the data-only reader refuses: persistent ids and
/// extension registry entries would need outside objects, out-of-band
/// buffers need the caller's, and protocol 0's quoted strings are not worth
/// an escape parser. None for bytes that are no opcode at all.
pub(super) fn unsupported_name(code: u8) -> Option<&'static str> {
    Some(match code {
        op::PERSID => "PERSID",
        op::BINPERSID => "BINPERSID",
        op::EXT1 => "EXT1",
        op::EXT2 => "EXT2",
        op::EXT4 => "EXT4",
        op::NEXT_BUFFER => "NEXT_BUFFER",
        op::READONLY_BUFFER => "READONLY_BUFFER",
        op::STRING => "STRING",
        op::UNICODE => "UNICODE",
        _ => return None,
    })
}

/// Opcode bytes, named as in CPython's `pickletools`.
pub(super) mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const FLOAT: u8 = b'F';
    pub const INT: u8 = b'I';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const LONG: u8 = b'L';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const PERSID: u8 = b'P';
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const STRING: u8 = b'S';
    pub const BINSTRING: u8 = b'T';
    pub const SHORT_BINSTRING: u8 = b'U';
    pub const UNICODE: u8 = b'V';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const BUILD: u8 = b'b';
    pub const GLOBAL: u8 = b'c';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const GET: u8 = b'g';
    pub const BINGET: u8 = b'h';
    pub const INST: u8 = b'i';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const OBJ: u8 = b'o';
    pub const PUT: u8 = b'p';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const PROTO: u8 = 0x80;
    pub const NEWOBJ: u8 = 0x81;
    pub const EXT1: u8 = 0x82;
    pub const EXT2: u8 = 0x83;
    pub const EXT4: u8 = 0x84;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const NEWOBJ_EX: u8 = 0x92;
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
    pub const BYTEARRAY8: u8 = 0x96;
    pub const NEXT_BUFFER: u8 = 0x97;
    pub const READONLY_BUFFER: u8 = 0x98;
}
