//! Point-to-point operations (PyTorch's `nccl:send 0->1`, `nccl:recv
//! 1<-0`), which no collective seq matches across ranks: a send or recv a
//! rank waits in (called, not completed) is matched against its peer's.
//!
//! - `not-joined`: the peer has a dump, waits in no operation of the other
//!   side with this rank in the same group, and posted fewer of them than
//!   this rank did of its own (operations between two ranks pair up in
//!   order): the peer never posted it, and is the culprit.
//! - `size-mismatch`: both sides wait, and their sizes differ; both are
//!   named.
//!
//! The ranks in the names are the group's; the group's members (where the
//! dumps give them) map them to global ranks.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::candidate::{priority, Candidate};
use super::diagnosis::FindingKind;
use super::model::{RankDump, Record, State};

/// Which side of a point-to-point operation a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Side {
    Send,
    Recv,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Send => "send",
            Side::Recv => "recv",
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Send => Side::Recv,
            Side::Recv => Side::Send,
        }
    }
}

/// `send A->B` or `recv A<-B` (the backend prefix already gone): the side,
/// this rank and the peer, as the group numbers them.
fn parse(op: &str) -> Option<(Side, usize, usize)> {
    let (side, rest) = op.split_once(' ')?;
    let (side, sep) = match side {
        "send" => (Side::Send, "->"),
        "recv" => (Side::Recv, "<-"),
        _ => return None,
    };
    let (me, peer) = rest.trim().split_once(sep)?;
    Some((side, me.trim().parse().ok()?, peer.trim().parse().ok()?))
}

/// One uncompleted point-to-point operation of one rank, global ranks.
struct Waiting<'a> {
    rank: usize,
    peer: usize,
    side: Side,
    record: &'a Record,
}

/// The elements an operation moves (the product of its first shape); None
/// where the dump's shape has none to compare (past 128 bits: no tensor).
fn elements(r: &Record) -> Option<i128> {
    let shape = r.input_sizes.first().or(r.output_sizes.first())?;
    shape
        .iter()
        .try_fold(1i128, |n, &d| n.checked_mul(i128::from(d)))
}

/// The rank global to the run of rank `r` of `dump`'s group `pg`.
fn global(dump: &RankDump, pg: &str, r: usize) -> usize {
    dump.groups
        .get(pg)
        .and_then(|m| m.get(r).copied())
        .unwrap_or(r)
}

/// Every point-to-point operation of `dumps` that did not complete.
fn waiting_ops<'a>(dumps: &BTreeMap<usize, &'a RankDump>) -> Vec<Waiting<'a>> {
    dumps
        .values()
        .flat_map(|d| {
            d.records
                .iter()
                .filter(|r| r.is_p2p() && r.state != State::Completed)
                .filter_map(move |r| {
                    let (side, _, peer) = parse(&r.op)?;
                    Some(Waiting {
                        rank: d.rank,
                        peer: global(d, &r.pg, peer),
                        side,
                        record: r,
                    })
                })
        })
        .collect()
}

/// (rank, peer, side, group) of a point-to-point operation.
type Way<'a> = (usize, usize, Side, &'a str);

/// How many operations of each way each rank posted (every one its dump
/// holds), counted once for all the waits asked of it.
fn posted<'a>(dumps: &BTreeMap<usize, &'a RankDump>) -> HashMap<Way<'a>, usize> {
    let mut n = HashMap::new();
    for (&rank, d) in dumps {
        for r in d.records.iter().filter(|r| r.is_p2p()) {
            if let Some((side, _, p)) = parse(&r.op) {
                *n.entry((rank, global(d, &r.pg, p), side, r.pg.as_str()))
                    .or_insert(0) += 1;
            }
        }
    }
    n
}

/// Findings of the point-to-point operations ranks wait in.
pub fn pending(dumps: &BTreeMap<usize, &RankDump>, missing: &BTreeSet<usize>) -> Vec<Candidate> {
    let waiting = waiting_ops(dumps);
    // The first waiting operation of each way, and the counts of each:
    // looked up, not searched for, however many operations wait.
    let mut first: HashMap<Way<'_>, &Waiting<'_>> = HashMap::new();
    for w in &waiting {
        first
            .entry((w.rank, w.peer, w.side, w.record.pg.as_str()))
            .or_insert(w);
    }
    let posted = posted(dumps);
    let count = |way: Way<'_>| posted.get(&way).copied().unwrap_or(0);
    let mut out = Vec::new();
    let mut told: BTreeSet<(usize, usize, String)> = BTreeSet::new();
    for w in &waiting {
        if w.peer == w.rank || missing.contains(&w.peer) || !dumps.contains_key(&w.peer) {
            continue;
        }
        // One finding a pair and group.
        let pair = (w.rank.min(w.peer), w.rank.max(w.peer), w.record.pg.clone());
        if told.contains(&pair) {
            continue;
        }
        let pg = w.record.pg.as_str();
        let other = first.get(&(w.peer, w.rank, w.side.other(), pg)).copied();
        // Operations between two ranks in a group pair up in order: the
        // peer posted fewer of the other side than this rank of its own,
        // so the one this rank waits in has no partner (counted only where
        // neither ring buffer dropped records).
        let wrapped = [w.rank, w.peer]
            .iter()
            .any(|r| dumps.get(r).is_some_and(|d| d.wrapped));
        let unmatched = !wrapped
            && count((w.peer, w.rank, w.side.other(), pg)) < count((w.rank, w.peer, w.side, pg));
        if let Some(c) = judge(w, other, unmatched) {
            told.insert(pair);
            out.push(c);
        }
    }
    out
}

/// The finding of `w`, a rank waiting in a point-to-point operation, if
/// any: the peer never posted the other side (`unmatched`), or it waits
/// in the other side (`other`) with another size.
fn judge(w: &Waiting, other: Option<&Waiting>, unmatched: bool) -> Option<Candidate> {
    let what = format!(
        "rank {} waits in a {} {} rank {} (group {}, point-to-point seq {}, state {})",
        w.rank,
        w.side.name(),
        if w.side == Side::Send { "to" } else { "from" },
        w.peer,
        w.record.pg,
        w.record.p2p_seq.unwrap_or(0),
        super::model::state_name(w.record.state)
    );
    match other {
        None if unmatched => Some(Candidate::new(
            priority::NOT_JOINED,
            FindingKind::NotJoined,
            Some(w.record.pg.clone()),
            None,
            vec![w.peer],
            format!(
                "{what}; rank {} has no {} {} rank {} waiting: it never posted the other side.",
                w.peer,
                w.side.other().name(),
                if w.side == Side::Send { "from" } else { "to" },
                w.rank
            ),
        )),
        None => None,
        Some(o) => {
            let (a, b) = (elements(w.record)?, elements(o.record)?);
            if a == b {
                return None;
            }
            let mut ranks = vec![w.rank, w.peer];
            ranks.sort_unstable();
            Some(Candidate::new(
                priority::SIZE_MISMATCH,
                FindingKind::SizeMismatch,
                Some(w.record.pg.clone()),
                None,
                ranks,
                format!(
                    "{what} of {a} element(s); rank {} waits in the {} of {b} element(s): the sizes differ.",
                    w.peer,
                    o.side.name()
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_side_rank_and_peer() {
        assert_eq!(parse("send 0->1"), Some((Side::Send, 0, 1)));
        assert_eq!(parse("recv 1<-0"), Some((Side::Recv, 1, 0)));
        assert_eq!(parse("send 0<-1"), None);
        assert_eq!(parse("all_reduce"), None);
        assert_eq!(parse("recv x<-0"), None);
    }
}
