//! Unit tests of the pickle reader, on hand-assembled pickles.

use super::*;

fn read(bytes: &[u8]) -> Result<Value, PickleError> {
    parse(bytes, &Limits::default())
}

fn s(text: &str) -> Value {
    Value::Str(text.into())
}

/// SHORT_BINUNICODE of `text`.
fn short_str(text: &str) -> Vec<u8> {
    let mut out = vec![op::SHORT_BINUNICODE, u8::try_from(text.len()).unwrap()];
    out.extend_from_slice(text.as_bytes());
    out
}

/// Protocol 4 header with a FRAME, then `body`, then STOP.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = vec![op::PROTO, 4, op::FRAME];
    out.extend_from_slice(&u64::try_from(body.len() + 1).unwrap().to_le_bytes());
    out.extend_from_slice(body);
    out.push(op::STOP);
    out
}

/// `{"a": 5, "b": [None, True, False], "c": ("x", -1)}` as protocol 4 writes it.
fn sample() -> Vec<u8> {
    let mut body = vec![op::EMPTY_DICT, op::MEMOIZE, op::MARK];
    body.extend(short_str("a"));
    body.extend([op::MEMOIZE, op::BININT1, 5]);
    body.extend(short_str("b"));
    body.extend([op::MEMOIZE, op::EMPTY_LIST, op::MEMOIZE, op::MARK]);
    body.extend([op::NONE, op::NEWTRUE, op::NEWFALSE, op::APPENDS]);
    body.extend(short_str("c"));
    body.extend(short_str("x"));
    body.extend([op::BININT, 0xff, 0xff, 0xff, 0xff, op::TUPLE2, op::SETITEMS]);
    framed(&body)
}

#[test]
fn reads_dicts_lists_tuples_and_scalars() {
    let v = read(&sample()).unwrap();
    assert_eq!(v.get("a"), Some(&Value::Int(5)));
    assert_eq!(
        v.get("b"),
        Some(&Value::List(vec![
            Value::None,
            Value::Bool(true),
            Value::Bool(false)
        ]))
    );
    assert_eq!(
        v.get("c"),
        Some(&Value::Tuple(vec![s("x"), Value::Int(-1)]))
    );
}

#[test]
fn memo_shares_containers_filled_after_memoizing() {
    // (  ]  MEMOIZE  K 1  a  h 0  t  .   -> ([1], [1])
    let bytes = [
        op::MARK,
        op::EMPTY_LIST,
        op::MEMOIZE,
        op::BININT1,
        1,
        op::APPEND,
        op::BINGET,
        0,
        op::TUPLE,
        op::STOP,
    ];
    let list = Value::List(vec![Value::Int(1)]);
    assert_eq!(
        read(&bytes).unwrap(),
        Value::Tuple(vec![list.clone(), list])
    );
}

#[test]
fn long1_gives_i64_i128_and_decimal_text() {
    let long1 = |bytes: &[u8]| {
        let mut out = vec![op::PROTO, 2, op::LONG1, u8::try_from(bytes.len()).unwrap()];
        out.extend_from_slice(bytes);
        out.push(op::STOP);
        read(&out).unwrap()
    };
    let ts: i64 = 1_795_290_437_726_323_355;
    assert_eq!(long1(&ts.to_le_bytes()), Value::Int(ts));
    assert_eq!(long1(&[]), Value::Int(0));
    assert_eq!(long1(&[0xff]), Value::Int(-1));
    let big = i128::from(u64::MAX) + 7;
    assert_eq!(long1(&big.to_le_bytes()[..9]), Value::BigInt(big));
    let mut two_200 = vec![0u8; 25];
    two_200.push(1);
    let text = "1606938044258990275541962092341162602522202993782792835301376";
    assert_eq!(long1(&two_200), Value::HugeInt(text.into()));
    *two_200.last_mut().unwrap() = 0xff;
    assert_eq!(long1(&two_200), Value::HugeInt(format!("-{text}")));
}

#[test]
fn global_and_reduce_are_recorded_not_called() {
    // Protocol 2: cposix\nsystem\n  X "echo pwned"  TUPLE1  REDUCE  STOP
    let mut bytes = vec![op::PROTO, 2, op::GLOBAL];
    bytes.extend_from_slice(b"posix\nsystem\n");
    bytes.push(op::BINUNICODE);
    bytes.extend_from_slice(&10u32.to_le_bytes());
    bytes.extend_from_slice(b"echo pwned");
    bytes.extend([op::TUPLE1, op::REDUCE, op::STOP]);
    let Value::Object(obj) = read(&bytes).unwrap() else {
        panic!("expected an object")
    };
    assert_eq!(obj.class, "posix.system");
    assert_eq!(obj.args, vec![s("echo pwned")]);
}

#[test]
fn stack_global_newobj_and_build() {
    let mut body = short_str("collections");
    body.extend(short_str("OrderedDict"));
    body.extend([
        op::STACK_GLOBAL,
        op::EMPTY_TUPLE,
        op::NEWOBJ,
        op::EMPTY_DICT,
    ]);
    body.extend(short_str("k"));
    body.extend([op::NONE, op::SETITEM, op::BUILD]);
    body.extend(short_str("x"));
    body.extend([op::BININT1, 2, op::SETITEM]);
    let Value::Object(obj) = read(&framed(&body)).unwrap() else {
        panic!("expected an object")
    };
    assert_eq!(obj.class, "collections.OrderedDict");
    assert_eq!(obj.state, Some(Value::Dict(vec![(s("k"), Value::None)])));
    assert_eq!(obj.entries, vec![(s("x"), Value::Int(2))]);
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample();
    for len in 0..bytes.len() {
        assert!(
            read(&bytes[..len]).is_err(),
            "prefix of {len} bytes was accepted"
        );
    }
    assert_eq!(read(&bytes[..5]), Err(PickleError::Truncated { at: 5 }));
}

#[test]
fn garbage_never_panics() {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..2000 {
        let mut bytes = vec![op::PROTO, 4];
        for _ in 0..(round % 64) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            bytes.push(u8::try_from(state & 0xff).unwrap());
        }
        let _ = read(&bytes);
    }
}

#[test]
fn unknown_and_unsupported_opcodes_are_named() {
    assert_eq!(
        read(&[op::PROTO, 4, 0xff]),
        Err(PickleError::UnknownOpcode { op: 0xff, at: 2 })
    );
    let err = read(&[op::PROTO, 2, op::BINPERSID]).unwrap_err();
    assert!(err.to_string().contains("BINPERSID"), "{err}");
    assert_eq!(read(&[op::PROTO, 6]), Err(PickleError::Protocol(6)));
}

#[test]
fn depth_element_and_size_caps() {
    let limits = Limits {
        max_file_bytes: 1 << 20,
        max_depth: 10,
        max_elements: 1000,
        ..Limits::default()
    };
    let mut nested = vec![op::EMPTY_LIST; 20];
    nested.extend(vec![op::APPEND; 19]);
    nested.push(op::STOP);
    assert_eq!(parse(&nested, &limits), Err(PickleError::TooDeep(10)));

    let mut wide = vec![op::EMPTY_LIST, op::MARK];
    wide.extend(vec![op::NONE; 2000]);
    wide.extend([op::APPENDS, op::STOP]);
    assert_eq!(
        parse(&wide, &limits),
        Err(PickleError::TooManyElements(1000))
    );

    let small = Limits {
        max_file_bytes: 4,
        ..limits
    };
    assert_eq!(
        parse(&sample(), &small),
        Err(PickleError::TooLarge {
            size: u64::try_from(sample().len()).unwrap(),
            cap: 4
        })
    );
}

#[test]
fn self_reference_and_blowup_are_stopped() {
    // ]  MEMOIZE  h 0  a  .   -> a list that contains itself
    let cycle = [
        op::EMPTY_LIST,
        op::MEMOIZE,
        op::BINGET,
        0,
        op::APPEND,
        op::STOP,
    ];
    assert!(matches!(read(&cycle), Err(PickleError::TooDeep(_))));

    // L(k+1) = (L(k), L(k)): 2^40 values once expanded.
    let mut blowup = vec![op::EMPTY_TUPLE, op::MEMOIZE];
    for k in 0..40u8 {
        blowup.extend([op::BINGET, k, op::BINGET, k, op::TUPLE2, op::MEMOIZE]);
    }
    blowup.push(op::STOP);
    let limits = Limits {
        max_elements: 10_000,
        ..Limits::default()
    };
    assert_eq!(
        parse(&blowup, &limits),
        Err(PickleError::TooManyElements(10_000))
    );
}

/// A call's argument tuple is copied into each object made of it: one
/// tuple of many references (DUP), handed to a call again and again from
/// the memo, counts its references at every call (it had cost 8 bytes of
/// memory a reference, a thousand times over, before any cap).
#[test]
fn arguments_the_memo_repeats_count_at_every_call() {
    let mut p = vec![op::PROTO, 4, op::GLOBAL];
    p.extend(b"os\nsystem\n");
    p.extend([op::MEMOIZE, op::MARK, op::NONE]);
    p.extend([op::DUP].repeat(4_000));
    p.extend([op::TUPLE, op::MEMOIZE]);
    for _ in 0..100 {
        p.extend([op::BINGET, 0, op::BINGET, 1, op::REDUCE, op::POP]);
    }
    p.extend([op::NONE, op::STOP]);
    let limits = Limits {
        max_elements: 10_000,
        ..Limits::default()
    };
    assert_eq!(
        parse(&p, &limits),
        Err(PickleError::TooManyElements(10_000))
    );
    // One call of it fits.
    let at = p.len() - 2 - 6 * 99;
    let mut one = p[..at].to_vec();
    one.extend([op::NONE, op::STOP]);
    assert_eq!(parse(&one, &limits), Ok(Value::None));
    // References alone count, one each, whether DUP or memo GET pushed them.
    let pushes = |push: &[u8]| {
        let mut p = vec![op::PROTO, 4, op::NONE, op::MEMOIZE, op::MARK, op::NONE];
        p.extend(push.repeat(10_001));
        p.extend([op::POP_MARK, op::STOP]);
        parse(&p, &limits)
    };
    for push in [&[op::DUP][..], &[op::BINGET, 0]] {
        assert_eq!(pushes(push), Err(PickleError::TooManyElements(10_000)));
        assert_eq!(pushes(&[]), Ok(Value::None));
    }
}

#[test]
fn protocol_0_text_opcodes() {
    // (dp0\nS... is STRING (unsupported); use INT, LONG, FLOAT, LIST, DICT, GET/PUT.
    let bytes = b"(I01\nI42\nL12345678901234567890L\nF1.5\nlp0\ng0\n(dp1\n.";
    let v = read(bytes).unwrap();
    let items = vec![
        Value::Bool(true),
        Value::Int(42),
        Value::BigInt(12_345_678_901_234_567_890),
        Value::Float(1.5),
    ];
    // The outer MARK is never closed: the top of the stack is the empty dict.
    assert_eq!(v, Value::Dict(vec![]));
    let list = b"(I01\nI42\nL12345678901234567890L\nF1.5\nl.";
    assert_eq!(read(list).unwrap(), Value::List(items));
}

/// `{"entries": L8}`, L(k+1) a list of 8 references to L(k), L0 `leaf`
/// (memoized): 8^8 (16.7 million) copies of the leaf in 200 bytes and it.
fn bomb(leaf: &[u8]) -> Vec<u8> {
    let mut p = vec![
        op::PROTO,
        4,
        op::EMPTY_DICT,
        op::MEMOIZE,
        op::SHORT_BINUNICODE,
        7,
    ];
    p.extend(b"entries");
    p.push(op::MEMOIZE);
    p.extend(leaf);
    p.extend([op::MEMOIZE, op::POP]);
    for level in 0..8u8 {
        p.extend([op::EMPTY_LIST, op::MEMOIZE, op::MARK]);
        p.extend([op::BINGET, level + 2].repeat(8));
        p.push(op::APPENDS);
        if level < 7 {
            p.push(op::POP);
        }
    }
    p.extend([op::SETITEM, op::STOP]);
    p
}

#[test]
fn a_memo_bomb_of_long_strings_stops_at_the_tree_budget() {
    let mut leaf = vec![op::BINUNICODE];
    leaf.extend(4096u32.to_le_bytes());
    leaf.extend([b'x'; 4096]);
    let data = bomb(&leaf);
    // Far fewer than the 16 million values allowed, but each copy owns
    // 4 KiB: 64 MiB and 128 bytes a byte of pickle are spent long before.
    let err = parse(&data, &Limits::default()).unwrap_err();
    let PickleError::OverBudget(over) = err else {
        panic!("{err}");
    };
    assert_eq!(over.granted, (64 << 20) + 128 * data.len() as u64);
    assert!(
        err.to_string()
            .contains("a pickle memo repeating values past what any flight-recorder dump holds"),
        "{err}"
    );
    // Small values repeated stop there too, before the element cap (16
    // million values of 32 bytes: 512 MiB).
    let err = parse(&bomb(&[op::BININT1, 1]), &Limits::default()).unwrap_err();
    assert!(matches!(err, PickleError::OverBudget(_)), "{err}");
    let roomy = Limits {
        tree_floor_bytes: 1 << 40,
        ..Limits::default()
    };
    let err = parse(&bomb(&[op::BININT1, 1]), &roomy).unwrap_err();
    assert_eq!(err, PickleError::TooManyElements(16_000_000));
}

#[test]
fn skipped_keys_are_not_copied_out() {
    // The bomb's lists under `frames` are left, whatever they hold.
    let mut leaf = vec![op::BINUNICODE];
    leaf.extend(4096u32.to_le_bytes());
    leaf.extend([b'x'; 4096]);
    let mut data = bomb(&leaf);
    let at = data.iter().position(|&b| b == b'e').unwrap();
    data[at - 1] = 6;
    data.splice(at..at + 7, *b"frames");
    let v = parse(&data, &Limits::default()).unwrap();
    assert_eq!(v.get("frames"), Some(&Value::None));
    let keep = Limits {
        skip_keys: &[],
        ..Limits::default()
    };
    assert!(matches!(
        parse(&data, &keep),
        Err(PickleError::OverBudget(_))
    ));
}
