//! Ranks without a dump: where the ranks with one are seen blocked on
//! them (one finding a place), and the rest, with how each rank whose
//! process died ended.

use std::collections::{BTreeMap, BTreeSet};

use super::candidate::{priority, Candidate};
use super::diagnosis::FindingKind;
use super::group::{ranks_text, GroupView};
use super::model::{RankDump, State};

/// Where ranks with a dump are seen blocked on a missing rank.
struct Blocked {
    pg: String,
    seq: u64,
    op: String,
    /// The ranks blocked there.
    waiting: BTreeSet<usize>,
    /// True when a channel waits on the missing rank itself; false when the
    /// group it belongs to has a collective not completed.
    direct: bool,
}

/// How each rank whose process died ended, as the dumps of the ranks that
/// lived report their launcher's word (`--procs`).
fn deaths(dumps: &BTreeMap<usize, &RankDump>) -> BTreeMap<usize, String> {
    let mut died = BTreeMap::new();
    for l in dumps.values().filter_map(|d| d.origin.lost.as_ref()) {
        // A dump's own text, kept to a line.
        let mut how: String = l.how.chars().take(160).collect();
        if how.len() < l.how.len() {
            how.push('…');
        }
        died.entry(l.rank).or_insert(how);
    }
    died
}

/// "no readable dump of rank 2", and how the process of each that died
/// ended, where a launcher said.
fn no_dump_of(missing: &[usize], died: &BTreeMap<usize, String>) -> String {
    let mut text = format!("no readable dump of {}", ranks_text(missing));
    let hows: Vec<String> = missing
        .iter()
        .filter_map(|r| died.get(r).map(|how| (r, how)))
        .map(|(r, how)| {
            if missing.len() == 1 {
                format!("its process died, {how}")
            } else {
                format!("rank {r}'s process died, {how}")
            }
        })
        .collect();
    if !hows.is_empty() {
        text.push_str(&format!(" ({}, as the launcher saw)", hows.join("; ")));
    }
    text
}

impl Blocked {
    /// What the finding says about the `missing` ranks blocked here.
    fn detail(&self, missing: &[usize], died: &BTreeMap<usize, String>) -> String {
        let waiting: Vec<usize> = self.waiting.iter().copied().collect();
        let them = if missing.len() == 1 { "it" } else { "them" };
        let (missing, waiting) = (no_dump_of(missing, died), ranks_text(&waiting));
        let (pg, seq, op) = (&self.pg, self.seq, &self.op);
        if self.direct {
            let verb = if self.waiting.len() == 1 {
                "waits"
            } else {
                "wait"
            };
            format!("{missing}, while {waiting} {verb} on {them} in seq {seq} ({op}) of group {pg}")
        } else {
            let verb = if self.waiting.len() == 1 {
                "has"
            } else {
                "have"
            };
            format!(
                "{missing}, a member of group {pg}, where {waiting} {verb} not completed seq {seq} ({op})"
            )
        }
    }
}

/// A finding for the missing ranks others are seen blocked on, one per
/// place, and one for the rest.
pub(super) fn missing_dumps(
    missing: &BTreeSet<usize>,
    views: &[GroupView],
    dumps: &BTreeMap<usize, &RankDump>,
    world: usize,
) -> Vec<Candidate> {
    let blocked = blocked_on(missing, views, dumps);
    let died = deaths(dumps);
    let mut by_place: BTreeMap<(String, u64), Vec<usize>> = BTreeMap::new();
    for (rank, b) in &blocked {
        by_place
            .entry((b.pg.clone(), b.seq))
            .or_default()
            .push(*rank);
    }
    let mut out = Vec::new();
    for ((pg, seq), ranks) in by_place {
        let Some(b) = ranks.first().and_then(|r| blocked.get(r)) else {
            continue;
        };
        let detail = b.detail(&ranks, &died);
        out.push(Candidate::new(
            priority::MISSING_WAITED,
            FindingKind::MissingDump,
            Some(pg),
            Some(seq),
            ranks,
            detail,
        ));
    }
    let rest: Vec<usize> = missing
        .iter()
        .copied()
        .filter(|m| !blocked.contains_key(m))
        .collect();
    if !rest.is_empty() {
        let detail = format!(
            "{} (world of {world}); no rank with a dump is seen waiting for it",
            no_dump_of(&rest, &died)
        );
        out.push(Candidate::new(
            priority::MISSING,
            FindingKind::MissingDump,
            None,
            None,
            rest,
            detail,
        ));
    }
    out
}

/// Missing ranks some channel waits on, then missing members of groups whose
/// newest collective is not completed on the ranks that have dumps.
fn blocked_on(
    missing: &BTreeSet<usize>,
    views: &[GroupView],
    dumps: &BTreeMap<usize, &RankDump>,
) -> BTreeMap<usize, Blocked> {
    let mut blocked: BTreeMap<usize, Blocked> = BTreeMap::new();
    for dump in dumps.values() {
        for record in dump.records.iter().filter(|r| r.state != State::Completed) {
            for (_, wait) in record.waits() {
                let Some(peer) = usize::try_from(wait.peer)
                    .ok()
                    .filter(|p| missing.contains(p))
                else {
                    continue;
                };
                let place = blocked.entry(peer).or_insert_with(|| Blocked {
                    pg: record.pg.clone(),
                    seq: record.seq,
                    op: record.op.clone(),
                    waiting: BTreeSet::new(),
                    direct: true,
                });
                place.waiting.insert(dump.rank);
            }
        }
    }
    for view in views {
        let at = view.at(view.high);
        let waiting: BTreeSet<usize> = at
            .iter()
            .filter(|(_, r)| r.state != State::Completed)
            .map(|(rank, _)| *rank)
            .collect();
        if waiting.is_empty() {
            continue;
        }
        for m in view.members.iter().filter(|m| missing.contains(m)) {
            blocked.entry(*m).or_insert_with(|| Blocked {
                pg: view.name.clone(),
                seq: view.high,
                op: at.values().next().map(|r| r.op.clone()).unwrap_or_default(),
                waiting: waiting.clone(),
                direct: false,
            });
        }
    }
    blocked
}
