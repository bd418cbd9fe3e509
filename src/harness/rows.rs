//! Rank reports into rows: gathered per case as every rank's report comes
//! in, timed (the ranks' times combined, per-iteration statistics), checked
//! (wrong and NaN/Inf elements, where they came from), a group's rows, and
//! the links each case measured.

use super::plan::{Case, Plan, Setup};
use super::rank::{Note, Report};
use super::{stats, HarnessError, Outcome};
use crate::engine::types::Engine;
use crate::report::{Row, Sink};
use std::collections::HashMap;

/// Links measured over the timed operations of the cases of one size.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkTable {
    pub bytes: u64,
    pub samples: Vec<crate::engine::observe::LinkSample>,
}

impl LinkTable {
    fn add(&mut self, samples: &[crate::engine::observe::LinkSample]) {
        crate::engine::observe::LinkSample::merge_all(&mut self.samples, samples);
    }

    /// Keeps the links of one case of `bytes`: a larger size starts the
    /// table over, the same size adds to it, a smaller one is dropped.
    fn keep(&mut self, bytes: u64, reports: &[Report]) {
        if bytes > self.bytes {
            *self = LinkTable {
                bytes,
                samples: Vec::new(),
            };
        }
        if bytes == self.bytes {
            for r in reports {
                self.add(&r.links);
            }
            self.samples.sort_by_key(|s| (s.from, s.to));
        }
    }
}

/// Where the NaN/Inf values of a row's outputs came from, as the input
/// scans before its checked operations saw it: "; NaN/Inf in rank 1's input
/// (first at element 128) before the operation", or "; every rank's input
/// was finite: the operation produced it". Empty without scans.
fn nan_source(reports: &[Report]) -> String {
    let scans: Vec<(usize, &crate::check::Verdict)> = reports
        .iter()
        .filter_map(|r| Some((r.rank, r.input.as_ref()?)))
        .collect();
    if scans.is_empty() {
        return String::new();
    }
    let bad: Vec<String> = scans
        .iter()
        .filter(|(_, v)| v.nan > 0)
        .map(|(rank, v)| match &v.first {
            Some(b) => format!("rank {rank}'s input (first at element {})", b.index),
            None => format!("rank {rank}'s input"),
        })
        .collect();
    match bad.len() {
        0 => "; every rank's input was finite: the operation produced it".to_string(),
        _ => format!("; NaN/Inf in {} before the operation", bad.join(", ")),
    }
}

/// Gathers rank reports into rows, in order, as each case completes.
pub(super) fn collect(
    plan: &Plan,
    setup: &Setup,
    cases: &[Case],
    next: &mut dyn FnMut() -> Option<Note>,
    sink: &mut dyn Sink,
    outcome: &mut Outcome,
) -> Result<(), HarnessError> {
    let mut pending: HashMap<(usize, crate::engine::types::Placement), Vec<Report>> =
        HashMap::new();
    let mut fired = vec![false; plan.injects.len()];
    // Each case is told to the sink before it is measured (its header
    // first), the next once every placement of the one before made rows.
    let announce = |k: usize, sink: &mut dyn Sink| -> Result<(), HarnessError> {
        if let (Some(case), Some(&pl)) = (cases.get(k), plan.placements.first()) {
            let mut proto = make_rows(plan, setup, case, pl, &[])
                .pop()
                .ok_or_else(|| HarnessError::Empty("a case without rows".into()))?;
            (proto.wrong, proto.nan) = if plan.check_iters > 0 {
                (0, 0)
            } else {
                (-1, -1)
            };
            sink.case(&proto)?;
        }
        Ok(())
    };
    // The first case's section opens once the ranks are past the
    // bootstrap (a layout refused there prints no header before its error).
    let mut started = false;
    let mut placements_done: HashMap<usize, usize> = HashMap::new();
    while let Some(note) = next() {
        if !started {
            announce(0, sink)?;
            started = true;
        }
        let Note::Done(report) = note else {
            continue;
        };
        for &i in &report.fired {
            if let Some(f) = fired.get_mut(i) {
                *f = true;
            }
        }
        let key = (report.case, report.placement);
        let entry = pending.entry(key).or_default();
        entry.push(*report);
        if entry.len() < plan.ranks {
            continue;
        }
        let Some(mut reports) = pending.remove(&key) else {
            continue;
        };
        reports.sort_by_key(|r| r.rank);
        let bytes = cases[key.0].bytes;
        if reports.iter().any(|r| !r.links.is_empty()) {
            let case = &cases[key.0];
            let table = if plan.links_from.is_none_or(|c| c == case.coll) {
                outcome.links.get_or_insert_with(LinkTable::default)
            } else {
                let at = outcome
                    .case_links
                    .iter()
                    .position(|(c, a, _)| (*c, *a) == (case.coll, case.algo));
                let at = at.unwrap_or_else(|| {
                    let fresh = (case.coll, case.algo, LinkTable::default());
                    outcome.case_links.push(fresh);
                    outcome.case_links.len() - 1
                });
                &mut outcome.case_links[at].2
            };
            table.keep(bytes, &reports);
        }
        for row in make_rows(plan, setup, &cases[key.0], key.1, &reports) {
            outcome.rows += 1;
            // A group's members are in its row: counted as the table
            // shows them, once a group.
            outcome.bad_rows += usize::from(row.is_bad() && row.group_member.is_none());
            sink.row(&row)?;
        }
        let done = placements_done.entry(key.0).or_default();
        *done += 1;
        if *done == plan.placements.len() {
            announce(key.0 + 1, sink)?;
        }
    }
    outcome.unfired = plan
        .injects
        .iter()
        .zip(&fired)
        .filter(|(_, &f)| !f)
        .map(|(i, _)| *i)
        .collect();
    Ok(())
}

/// The rank that entered a timed collective the longest after the first
/// rank did (None with one rank, or when no rank was late).
fn last_arrival(reports: &[Report]) -> Option<crate::report::Arrival> {
    let iters = reports.iter().map(|r| r.arrive_ns.len()).min()?;
    let mut worst: Option<(usize, u64)> = None;
    for i in 0..iters {
        let first = reports.iter().map(|r| r.arrive_ns[i]).min()?;
        for r in reports {
            let late = r.arrive_ns[i] - first;
            if late > 0 && worst.is_none_or(|(_, w)| late > w) {
                worst = Some((r.rank, late));
            }
        }
    }
    worst.map(|(rank, late)| crate::report::Arrival {
        rank,
        late_us: late as f64 / 1e3,
    })
}

/// A case's rows: its own, or a group's: one per operation (the group's
/// time, the operation's size and checks, `group_member` its place in the
/// group), then the group's (`collective: "group"`, its members listed,
/// sizes and bus bytes summed, every operation's wrong values).
fn make_rows(
    plan: &Plan,
    setup: &Setup,
    case: &Case,
    placement: crate::engine::types::Placement,
    reports: &[Report],
) -> Vec<Row> {
    if case.group == 0 {
        return vec![make_row(plan, setup, case, placement, reports, &|r| {
            r.verdict.as_ref()
        })];
    }
    let members = plan.members(case);
    let mut rows: Vec<Row> = members
        .iter()
        .enumerate()
        .map(|(k, m)| {
            let mut row = make_row(plan, setup, m, placement, reports, &|r| {
                r.verdict.as_ref().and(r.members.get(k))
            });
            row.group_member = Some(k);
            row.predicted_us = None;
            row.auto_pick = None;
            row
        })
        .collect();
    let g = make_row(plan, setup, case, placement, reports, &|r| {
        r.verdict.as_ref()
    });
    let g = group_row(plan, case, &members, &rows, g);
    rows.push(g);
    rows
}

/// The group's own row from `g` (its time and checks as one case) and its
/// operations' `rows`: sizes and bus bytes summed over `members`, its
/// algorithm (one, or "mixed"), every operation's wrong values.
fn group_row(plan: &Plan, case: &Case, members: &[Case], rows: &[Row], mut g: Row) -> Row {
    let time_s = g.time_us * 1e-6;
    let per_s = |b: f64| if time_s > 0.0 { b / time_s / 1e9 } else { 0.0 };
    let bytes: u64 = members.iter().map(|m| m.bytes).sum();
    let bus: f64 = members
        .iter()
        .map(|m| m.bytes as f64 * m.coll.busbw_factor(plan.ranks))
        .sum();
    let mut algos: Vec<&str> = Vec::new();
    for m in members {
        if !algos.contains(&m.algo.name()) {
            algos.push(m.algo.name());
        }
    }
    let checked = rows.iter().all(|r| r.wrong >= 0);
    g.collective = "group".into();
    // Each operation's row names its algorithm; the group's, one or "mixed".
    if case.engine == Engine::Builtin {
        g.algo = match algos.as_slice() {
            [one] => one.to_string(),
            _ => "mixed".into(),
        };
    }
    g.op = match members.iter().any(|m| m.coll.reduces()) {
        true => case.op.name().into(),
        false => "none".into(),
    };
    g.root = match members.iter().any(|m| m.coll.rooted()) {
        true => case.root.map_or(-1, |r| r as i64),
        false => -1,
    };
    g.split = members
        .iter()
        .find_map(|m| m.counts.v)
        .map(|v| v.split.to_string());
    g.bytes = bytes;
    g.count = members
        .iter()
        .map(|m| m.counts.reported_count(m.coll))
        .sum();
    g.algbw_gbps = per_s(bytes as f64);
    g.busbw_gbps = per_s(bus);
    g.wrong = if checked {
        rows.iter().map(|r| r.wrong).sum()
    } else {
        -1
    };
    g.nan = if checked {
        rows.iter().map(|r| r.nan).sum()
    } else {
        -1
    };
    g.first_error = rows.iter().enumerate().find_map(|(k, r)| {
        let e = r.first_error.as_ref()?;
        Some(format!("operation {k} ({}): {e}", r.collective))
    });
    g.members = members.iter().map(|m| m.coll.name().to_string()).collect();
    g.predicted_us = None;
    g.auto_pick = None;
    g
}

/// Time: the ranks' mean iterations combined as `plan.rank_time` says; stats over the per-iteration
/// max across ranks. `verdict` picks a report's verdict for this row.
fn make_row(
    plan: &Plan,
    setup: &Setup,
    case: &Case,
    placement: crate::engine::types::Placement,
    reports: &[Report],
    verdict: &dyn Fn(&Report) -> Option<&crate::check::Verdict>,
) -> Row {
    let iters = plan.iters.max(1) as f64;
    let per_rank_us: Vec<f64> = reports
        .iter()
        .map(|r| r.total_ns as f64 / iters / 1e3)
        .collect();
    let time_us = plan.rank_time.combine(&per_rank_us);
    let samples = slowest_per_iteration(reports, plan.iters);
    let algbw = if time_us > 0.0 {
        case.bytes as f64 / (time_us * 1e-6) / 1e9
    } else {
        0.0
    };
    let checked = reports.iter().all(|r| verdict(r).is_some());
    // Where every rank holds the same output, one bad element reaching
    // every rank is one bad element: the most any rank saw, not the sum.
    let replicated = case.coll.output_replicated();
    let sum = |f: fn(&crate::check::Verdict) -> u64| -> i64 {
        if !checked {
            return -1;
        }
        let each = reports.iter().filter_map(verdict).map(f);
        // Counts from other processes: a sum past 63 bits stays a count,
        // never wraps to -1 ("unchecked") or to a small one.
        let n = if replicated {
            each.max().unwrap_or(0)
        } else {
            each.fold(0u64, u64::saturating_add)
        };
        i64::try_from(n).unwrap_or(i64::MAX)
    };
    let first_error = first_error(reports, verdict);
    let builtin = case.engine == Engine::Builtin;
    Row {
        // A prediction past what results hold (11 days: a table of a slow
        // link's bandwidth at a large size) is no time: left out, so the
        // results stay readable.
        predicted_us: predicted_us(plan, case).filter(|_| builtin),
        auto_pick: plan
            .model_pick(case.coll, case.bytes)
            .map(|p| p.algo.name().to_string()),
        last_arrival: last_arrival(reports),
        collective: case.coll.name().into(),
        engine: engine_name(case.engine, setup),
        algo: match case.engine {
            Engine::Builtin => case.algo.name().into(),
            other => other.name().into(),
        },
        dtype: case.dtype.name().into(),
        op: if case.coll.reduces() {
            case.op.name().into()
        } else {
            "none".into()
        },
        scalar: (case.coll.reduces() && case.op == crate::engine::ReduceOp::PreMulSum)
            .then(|| crate::engine::elem::to_f64(case.dtype, case.scalar)),
        split: case.counts.v.map(|v| v.split.to_string()),
        members: Vec::new(),
        group_member: None,
        root: case.root.map_or(-1, |r| r as i64),
        bytes: case.bytes,
        count: case.counts.reported_count(case.coll),
        placement: placement.name().into(),
        time_us,
        algbw_gbps: algbw,
        busbw_gbps: algbw * case.coll.busbw_factor(plan.ranks),
        wrong: sum(|v| v.wrong),
        nan: sum(|v| v.nan),
        stats: stats::summarize(&samples),
        per_rank_us,
        first_error,
    }
}

/// Each iteration's time (us) on its slowest rank.
fn slowest_per_iteration(reports: &[Report], iters: usize) -> Vec<f64> {
    (0..iters)
        .map(|i| {
            reports
                .iter()
                .filter_map(|r| r.iter_ns.get(i))
                .copied()
                .max()
                .unwrap_or(0) as f64
                / 1e3
        })
        .collect()
}

/// The tuning table's prediction for the case (us). A prediction past
/// what results hold (11 days: a table of a slow link's bandwidth at a
/// large size) is no time: left out, so the results stay readable.
fn predicted_us(plan: &Plan, case: &Case) -> Option<f64> {
    plan.tuning
        .as_ref()
        .and_then(|t| {
            t.predict(
                case.coll,
                case.algo,
                plan.ranks,
                case.bytes,
                plan.model_protocol(),
            )
        })
        .filter(|us| us.is_finite() && *us <= crate::report::model::MAX_MEASURE)
}

/// The engine's name in results: on the emulated device NCCL's rows come
/// from a host stand-in.
fn engine_name(engine: Engine, setup: &Setup) -> String {
    match (engine, setup.gpu) {
        (Engine::Nccl, Some(crate::engine::exec::cuda::launch::Kind::Emu)) => "nccl-standin".into(),
        (e, _) => e.name().into(),
    }
}

/// The first bad element any rank found, and where a NaN came from.
fn first_error(
    reports: &[Report],
    verdict: &dyn Fn(&Report) -> Option<&crate::check::Verdict>,
) -> Option<String> {
    reports
        .iter()
        .filter_map(|r| verdict(r)?.first.as_ref())
        .next()
        .map(|b| {
            let mut text = format!(
                "rank {} element {}: expected {}, got {}",
                b.rank, b.index, b.expected, b.got
            );
            if reports
                .iter()
                .any(|r| verdict(r).is_some_and(|v| v.nan > 0))
            {
                text.push_str(&nan_source(reports));
            }
            text
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{BadElem, Verdict};

    fn report(rank: usize, input_nan: Option<(u64, usize)>) -> Report {
        let input = input_nan.map(|(nan, index)| Verdict {
            checked: 256,
            wrong: nan,
            nan,
            first: (nan > 0).then(|| BadElem {
                rank,
                index,
                expected: "1.0 (0x3f800000)".into(),
                got: "NaN (0x7fc00000)".into(),
            }),
        });
        Report {
            case: 0,
            placement: crate::engine::Placement::OutOfPlace,
            rank,
            iter_ns: vec![],
            total_ns: 0,
            verdict: None,
            arrive_ns: vec![],
            fired: vec![],
            input,
            links: vec![],
            members: vec![],
        }
    }

    #[test]
    fn the_nan_source_names_the_ranks_whose_input_held_one() {
        let reports = [
            report(0, Some((0, 0))),
            report(1, Some((2, 7))),
            report(2, Some((1, 3))),
        ];
        assert_eq!(
            nan_source(&reports),
            "; NaN/Inf in rank 1's input (first at element 7), rank 2's input (first at element 3) before the operation"
        );
    }

    #[test]
    fn a_nan_no_input_held_was_produced_by_the_operation() {
        let reports = [report(0, Some((0, 0))), report(1, Some((0, 0)))];
        assert_eq!(
            nan_source(&reports),
            "; every rank's input was finite: the operation produced it"
        );
        // Integer types are not scanned: nothing to say.
        assert_eq!(nan_source(&[report(0, None)]), "");
    }
}
