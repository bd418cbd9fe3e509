//! Do the ranks of a group agree on what each collective is? At the first
//! sequence number (in the window every rank still holds) where they do not,
//! the operation, the sizes or the data types differ: `op-mismatch`,
//! `size-mismatch`, `dtype-mismatch`. Only the first such seq is reported,
//! since everything after a disagreement is usually its consequence.
//!
//! Blame goes to the minority: the ranks whose value differs from the one
//! most ranks have. When no value has a strict majority (two ranks, or an
//! even split) every rank at that seq is named.

use std::collections::BTreeMap;

use super::candidate::{priority, Candidate};
use super::diagnosis::FindingKind;
use super::group::{ranks_text, GroupView};
use super::model::Record;

/// The earliest disagreement in the group, if any.
pub fn mismatches(view: &GroupView) -> Vec<Candidate> {
    for seq in view.seqs() {
        let at = view.at(seq);
        if at.len() < 2 {
            continue;
        }
        if let Some(split) = Split::of(&at, |r| Some(r.signature())) {
            return vec![split.finding(view, seq, FindingKind::OpMismatch, "ran")];
        }
        let mut found = Vec::new();
        if let Some(split) = Split::of(&at, size_key) {
            found.push(split.finding(view, seq, FindingKind::SizeMismatch, "had sizes"));
        }
        if let Some(split) = Split::of(&at, dtype_key) {
            found.push(split.finding(view, seq, FindingKind::DtypeMismatch, "had dtypes"));
        }
        if !found.is_empty() {
            return found;
        }
    }
    Vec::new()
}

/// Which sides of an operation must match across ranks: (inputs, outputs).
/// All-to-all may split unevenly; gather's output and scatter's input exist
/// on the root only.
fn sides(op: &str, for_sizes: bool) -> (bool, bool) {
    let op = op.to_ascii_lowercase().replace('-', "_");
    if op.contains("all_to_all") || op.contains("alltoall") {
        (!for_sizes, !for_sizes)
    } else if op.starts_with("gather") {
        (true, false)
    } else if op.starts_with("scatter") {
        (false, true)
    } else {
        (true, true)
    }
}

fn size_key(r: &Record) -> Option<String> {
    let (input, output) = sides(&r.op, true);
    let shapes = |s: &Vec<Vec<i64>>| (!s.is_empty()).then(|| format!("{s:?}"));
    describe(
        input.then(|| shapes(&r.input_sizes)),
        output.then(|| shapes(&r.output_sizes)),
    )
}

fn dtype_key(r: &Record) -> Option<String> {
    let (input, output) = sides(&r.op, false);
    let names = |d: &Vec<String>| (!d.is_empty()).then(|| format!("[{}]", d.join(", ")));
    describe(
        input.then(|| names(&r.input_dtypes)),
        output.then(|| names(&r.output_dtypes)),
    )
}

/// `in X out Y` for the sides compared (`None`: not compared; `Some(None)`: empty).
fn describe(input: Option<Option<String>>, output: Option<Option<String>>) -> Option<String> {
    match (input, output) {
        (None, None) => None,
        (input, output) => {
            let side = |name: &str, v: Option<Option<String>>| match v {
                Some(Some(text)) => format!("{name} {text}"),
                Some(None) => format!("{name} []"),
                None => String::new(),
            };
            let text = format!("{} {}", side("in", input), side("out", output));
            Some(text.trim().to_owned())
        }
    }
}

/// The ranks at one seq, grouped by a value they should share.
struct Split {
    /// Each distinct value and its ranks, most common first.
    values: Vec<(String, Vec<usize>)>,
    /// The ranks to blame.
    blamed: Vec<usize>,
}

impl Split {
    /// None when every rank (that has the value) agrees.
    fn of(at: &BTreeMap<usize, &Record>, key: impl Fn(&Record) -> Option<String>) -> Option<Split> {
        let mut by_value: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (rank, record) in at {
            if let Some(value) = key(record) {
                by_value.entry(value).or_default().push(*rank);
            }
        }
        if by_value.len() < 2 {
            return None;
        }
        let mut values: Vec<(String, Vec<usize>)> = by_value.into_iter().collect();
        values.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.1.cmp(&b.1)));
        let majority = values[0].1.len() > values[1].1.len();
        let skip = usize::from(majority);
        let mut blamed: Vec<usize> = values[skip..].iter().flat_map(|(_, r)| r.clone()).collect();
        blamed.sort_unstable();
        Some(Split { values, blamed })
    }

    fn finding(&self, view: &GroupView, seq: u64, kind: FindingKind, verb: &str) -> Candidate {
        let parts: Vec<String> = self
            .values
            .iter()
            .map(|(value, ranks)| format!("{} {verb} {value}", ranks_text(ranks)))
            .collect();
        let mut detail = format!("at seq {seq}: {}", parts.join("; "));
        if self.blamed.len() == self.values.iter().map(|(_, r)| r.len()).sum::<usize>() {
            detail.push_str(" (no majority, so every rank is named)");
        }
        let priority = match kind {
            FindingKind::OpMismatch => priority::OP_MISMATCH,
            FindingKind::SizeMismatch => priority::SIZE_MISMATCH,
            _ => priority::DTYPE_MISMATCH,
        };
        Candidate::new(
            priority,
            kind,
            Some(view.name.clone()),
            Some(seq),
            self.blamed.clone(),
            detail,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::model::State;

    fn rec(op: &str, size: i64, dtype: &str) -> Record {
        let mut r = Record::new("0", 1, op, State::Started);
        r.input_sizes = vec![vec![size]];
        r.input_dtypes = vec![dtype.into()];
        r
    }

    #[test]
    fn minority_is_blamed_and_ties_name_everyone() {
        let recs = [
            rec("all_reduce", 8, "f32"),
            rec("all_reduce", 8, "f32"),
            rec("all_reduce", 4, "f32"),
        ];
        let at: BTreeMap<usize, &Record> = recs.iter().enumerate().collect();
        assert!(Split::of(&at, |r| Some(r.signature())).is_none());
        assert_eq!(Split::of(&at, size_key).unwrap().blamed, vec![2]);
        let two: BTreeMap<usize, &Record> = recs[1..].iter().enumerate().collect();
        assert_eq!(Split::of(&two, size_key).unwrap().blamed, vec![0, 1]);
    }

    #[test]
    fn uneven_collectives_are_not_compared_by_size() {
        let a = rec("all_to_all", 8, "f32");
        let b = rec("all_to_all", 4, "f32");
        let at: BTreeMap<usize, &Record> = [(0, &a), (1, &b)].into_iter().collect();
        assert!(Split::of(&at, size_key).is_none());
        assert!(Split::of(&at, dtype_key).is_none());
        assert_eq!(sides("gather", true), (true, false));
        assert_eq!(sides("scatter", false), (false, true));
    }
}
