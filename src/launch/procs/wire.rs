//! The hub's wire: frames (a kind, two words, a payload) over the Unix
//! socket, and the all-gather's records packed in one frame.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    /// rank -> hub: I am rank `a`.
    Hello = 1,
    /// rank -> hub: my record for all-gather number `a`.
    Gather = 2,
    /// rank -> hub: deliver to rank `a` under tag `b`.
    Send = 3,
    /// hub -> rank: every record of all-gather `a`.
    Gathered = 4,
    /// hub -> rank: all-gather `a` cannot complete: rank `b` is gone.
    Failed = 5,
    /// hub -> rank: a message from rank `a` under tag `b`.
    Message = 6,
    /// hub -> rank: rank `a`'s process died; the payload says how.
    Lost = 7,
}

impl Kind {
    pub(super) fn from(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Gather,
            3 => Kind::Send,
            4 => Kind::Gathered,
            5 => Kind::Failed,
            6 => Kind::Message,
            7 => Kind::Lost,
            _ => return None,
        })
    }
}

pub(super) struct Frame {
    pub(super) kind: Kind,
    pub(super) a: u32,
    pub(super) b: u32,
    pub(super) payload: Vec<u8>,
}

pub(super) fn write_frame(
    w: &mut impl Write,
    kind: Kind,
    a: u32,
    b: u32,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(13 + payload.len());
    buf.extend_from_slice(&((9 + payload.len()) as u32).to_le_bytes());
    buf.push(kind as u8);
    buf.extend_from_slice(&a.to_le_bytes());
    buf.extend_from_slice(&b.to_le_bytes());
    buf.extend_from_slice(payload);
    w.write_all(&buf)
}

pub(super) fn read_frame(r: &mut impl Read) -> std::io::Result<Frame> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if !(9..=MAX_FRAME).contains(&len) {
        return Err(std::io::Error::other(format!("bad frame of {len} bytes")));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    let kind = Kind::from(buf[0])
        .ok_or_else(|| std::io::Error::other(format!("bad frame kind {}", buf[0])))?;
    let word = |i: usize| u32::from_le_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
    Ok(Frame {
        kind,
        a: word(1),
        b: word(5),
        payload: buf[9..].to_vec(),
    })
}

pub(super) fn encode_records(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        out.extend_from_slice(&(r.len() as u32).to_le_bytes());
        out.extend_from_slice(r);
    }
    out
}

pub(super) fn decode_records(mut b: &[u8], n: usize) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
        out.push(b.get(4..4 + len)?.to_vec());
        b = &b[4 + len..];
    }
    b.is_empty().then_some(out)
}
