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

use std::collections::{BTreeMap, BTreeSet};

use super::candidate::{priority, Candidate};
use super::diagnosis::FindingKind;
use super::model::{RankDump, Record, State};

/// Which side of a point-to-point operation a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// The elements an operation moves (the product of its first shape).
fn elements(r: &Record) -> Option<i64> {
    let shape = r.input_sizes.first().or(r.output_sizes.first())?;
    Some(shape.iter().product())
}

/// Findings of the point-to-point operations ranks wait in.
pub fn pending(dumps: &BTreeMap<usize, &RankDump>, missing: &BTreeSet<usize>) -> Vec<Candidate> {
    let global = |dump: &RankDump, pg: &str, r: usize| -> usize {
        dump.groups
            .get(pg)
            .and_then(|m| m.get(r).copied())
            .unwrap_or(r)
    };
    let waiting: Vec<Waiting<'_>> = dumps
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
        .collect();
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
        let p2p_seq = w.record.p2p_seq.unwrap_or(0);
        let other = waiting.iter().find(|o| {
            o.rank == w.peer
                && o.peer == w.rank
                && o.side == w.side.other()
                && o.record.pg == w.record.pg
        });
        let what = format!(
            "rank {} waits in a {} {} rank {} (group {}, point-to-point seq {p2p_seq}, state {})",
            w.rank,
            w.side.name(),
            if w.side == Side::Send { "to" } else { "from" },
            w.peer,
            w.record.pg,
            super::model::state_name(w.record.state)
        );
        // Operations between two ranks in a group pair up in order: the
        // peer posted fewer of the other side than this rank of its own,
        // so the one this rank waits in has no partner (counted only where
        // neither ring buffer dropped records).
        let count = |rank: usize, side: Side, peer: usize| {
            dumps.get(&rank).map_or(0, |d| {
                d.records
                    .iter()
                    .filter(|r| r.is_p2p() && r.pg == w.record.pg)
                    .filter(|r| {
                        parse(&r.op)
                            .is_some_and(|(s, _, p)| s == side && global(d, &r.pg, p) == peer)
                    })
                    .count()
            })
        };
        let wrapped = [w.rank, w.peer]
            .iter()
            .any(|r| dumps.get(r).is_some_and(|d| d.wrapped));
        let unmatched =
            !wrapped && count(w.peer, w.side.other(), w.rank) < count(w.rank, w.side, w.peer);
        match other {
            None if unmatched => {
                told.insert(pair);
                out.push(Candidate::new(
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
                ));
            }
            None => {}
            Some(o) => {
                let (a, b) = (elements(w.record), elements(o.record));
                if let (Some(a), Some(b), true) = (a, b, a != b) {
                    told.insert(pair);
                    let mut ranks = vec![w.rank, w.peer];
                    ranks.sort_unstable();
                    out.push(Candidate::new(
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
                    ));
                }
            }
        }
    }
    out
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
