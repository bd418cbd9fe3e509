//! One process group seen across ranks: for each member that has a dump, its
//! collectives by sequence number, and the window of sequence numbers every
//! member's ring buffer can still hold (older ones may have been overwritten
//! on some ranks and not others, so they are not compared).

use std::collections::{BTreeMap, BTreeSet};

use super::model::{RankDump, Record, State};

/// One member's collectives in the group.
pub struct Track<'a> {
    pub dump: &'a RankDump,
    /// Collectives only (point-to-point records are not matched by seq).
    pub by_seq: BTreeMap<u64, &'a Record>,
    /// Highest seq entered, 0 when none. A member without records of the
    /// group has it from its dump's status (see [`Track::blind`]).
    pub last: u64,
    /// Highest seq completed, if any.
    pub last_completed: Option<u64>,
}

impl Track<'_> {
    pub fn rank(&self) -> usize {
        self.dump.rank
    }

    /// Whether the dump holds no record of the group: only its status says
    /// how far the rank got.
    pub fn blind(&self) -> bool {
        self.by_seq.is_empty()
    }

    /// True when the rank completed a collective after `seq`: its record of
    /// `seq` may just not have been updated yet, so it is not stuck there.
    pub fn moved_past(&self, seq: u64) -> bool {
        self.last_completed.is_some_and(|c| c > seq)
    }
}

pub struct GroupView<'a> {
    pub name: String,
    /// Every known member, dumped or not.
    pub members: Vec<usize>,
    /// Members with a dump whose history in this group is known, by rank.
    pub tracks: BTreeMap<usize, Track<'a>>,
    /// First seq every track can still hold.
    pub low: u64,
    /// Highest seq any member's records show entered.
    pub high: u64,
}

/// Each rank's collective records (point-to-point ones left out) by group
/// name, sorted once for all the groups of a run: a run of thousands of
/// groups reads each record once, not once a group.
pub struct ByGroup<'a>(BTreeMap<usize, BTreeMap<&'a str, Vec<&'a Record>>>);

impl<'a> ByGroup<'a> {
    pub fn new(dumps: &BTreeMap<usize, &'a RankDump>) -> Self {
        let mut by_rank = BTreeMap::new();
        for (&rank, dump) in dumps {
            let mut groups: BTreeMap<&'a str, Vec<&'a Record>> = BTreeMap::new();
            for record in dump.records.iter().filter(|r| !r.is_p2p()) {
                groups.entry(record.pg.as_str()).or_default().push(record);
            }
            by_rank.insert(rank, groups);
        }
        ByGroup(by_rank)
    }

    /// `rank`'s collective records in group `name`, in the dump's order.
    fn of(&self, rank: usize, name: &str) -> &[&'a Record] {
        self.0
            .get(&rank)
            .and_then(|g| g.get(name))
            .map_or(&[], Vec::as_slice)
    }
}

impl<'a> GroupView<'a> {
    /// `members` are global ranks; `dumps` are all dumps, by rank, and
    /// `records` theirs by group.
    pub fn new(
        name: &str,
        members: Vec<usize>,
        dumps: &BTreeMap<usize, &'a RankDump>,
        records: &ByGroup<'a>,
    ) -> Self {
        let mut tracks = BTreeMap::new();
        for rank in &members {
            let Some(dump) = dumps.get(rank) else {
                continue;
            };
            let mut by_seq = BTreeMap::new();
            for &record in records.of(*rank, name) {
                by_seq.insert(record.seq, record);
            }
            let (last, last_completed) = match dump.status.get(name) {
                // No record of the group (its buffer dropped them, or
                // keeps none): how far it got is known only where the dump
                // keeps it apart.
                Some(s) if by_seq.is_empty() => (s.entered, s.completed),
                None if by_seq.is_empty() && dump.wrapped => continue, // unknown
                _ => {
                    let last = by_seq.keys().next_back().copied().unwrap_or(0);
                    let last_completed = by_seq
                        .iter()
                        .rev()
                        .find(|(_, r)| r.state == State::Completed)
                        .map(|(&s, _)| s);
                    (last, last_completed)
                }
            };
            tracks.insert(
                *rank,
                Track {
                    dump,
                    by_seq,
                    last,
                    last_completed,
                },
            );
        }
        let low = tracks
            .values()
            .filter_map(|t| t.by_seq.keys().next().copied())
            .max()
            .unwrap_or(1);
        // The newest seq a record shows: a member known only by its
        // status may be further on, in collectives no record shows.
        let high = tracks
            .values()
            .filter(|t| !t.by_seq.is_empty())
            .map(|t| t.last)
            .max()
            .unwrap_or(0);
        GroupView {
            name: name.to_owned(),
            members,
            tracks,
            low,
            high,
        }
    }

    /// Seqs in the comparable window that at least one member entered, ascending.
    pub fn seqs(&self) -> BTreeSet<u64> {
        self.tracks
            .values()
            .flat_map(|t| t.by_seq.range(self.low..).map(|(s, _)| *s))
            .collect()
    }

    /// Seqs below the comparable window that a member has pending (entered,
    /// not completed), ascending: where it may hang, though another
    /// member's ring no longer holds that seq.
    pub fn pending_below(&self) -> BTreeSet<u64> {
        self.tracks
            .values()
            .flat_map(|t| t.by_seq.range(..self.low))
            .filter(|(_, r)| r.state != State::Completed)
            .map(|(s, _)| *s)
            .collect()
    }

    /// The records of `seq`, by rank, of the members that entered it.
    pub fn at(&self, seq: u64) -> BTreeMap<usize, &'a Record> {
        self.tracks
            .iter()
            .filter_map(|(rank, t)| t.by_seq.get(&seq).map(|r| (*rank, *r)))
            .collect()
    }
}

pub use crate::units::ranks_text;
