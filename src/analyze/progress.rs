//! Where the ranks of a group got to, and who holds the others up:
//!
//! - `not-joined`: some members entered a collective S and have not
//!   completed it, while others never entered it (their newest is older).
//!   Those others are the culprits. S is the first collective a laggard
//!   never entered when a member that entered it is still in it (ranks that
//!   queue ahead enter many more; a rank whose part needs no laggard, such
//!   as a reduce's leaf, completes it), else the group's newest. Members
//!   that hold S only queued (scheduled) behind an operation they started
//!   and have not completed are not in it: then it is `stuck`'s case.
//! - `stuck`: every member entered S, some did not complete it, and the dumps
//!   show it is a hang, not a snapshot of work in flight: another member
//!   completed S, or a channel is blocked on a peer, or a member's dump was
//!   written because the recorder's watchdog timed out. With channel progress the culprits are the ranks
//!   waited on that wait on no one (or, when the waits form a cycle, the
//!   ranks that got less than half as far as the rest; none when all got
//!   about as far: a slow collective, not a stopped rank); without it, the
//!   ranks that did not complete
//!   S while others did.
//! - `late`: a member entered S far later than its peers. Entry time is the
//!   start time in collbench dumps and the enqueue time (`time_created_ns`)
//!   in PyTorch's. A rank is late when it entered more than
//!   max(1 s, 10 × the group's median entry spread) after the median of the
//!   ranks at S: the spread of a healthy job is its noise, and ten times the
//!   noise (but never under a second) is not noise. A seq's spread leaves
//!   its latest rank out (with three or more), so a rank late at every seq
//!   does not make its lateness the noise.

use std::collections::{BTreeMap, BTreeSet};

use super::candidate::{priority, Candidate};
use super::diagnosis::FindingKind;
use super::group::{ranks_text, GroupView, Track};
use super::model::{state_name, Format, Record, State};

/// Late means later than this, at least.
const LATE_FLOOR_NS: u64 = 1_000_000_000;
/// ... and more than this many times the usual spread.
const LATE_FACTOR: u64 = 10;
/// Fewer comparable seqs than this: no usual spread to speak of.
const MIN_SAMPLES: usize = 3;

pub fn not_joined(view: &GroupView) -> Option<Candidate> {
    // Where the laggards stopped: the first collective one of them never
    // entered. Executors that queue ahead (CUDA streams, PyTorch's NCCL)
    // let the others enter many more; the oldest missing one is the point.
    let high = view.high;
    let first_missing = view
        .tracks
        .values()
        .filter(|t| t.last < high)
        .map(|t| t.last + 1)
        .min()
        .unwrap_or(high);
    // There, unless no member waits in it (then the group's newest). A
    // member may have completed it while others wait: the root of a
    // broadcast, a leaf of a reduce or gather, a send-recv's sender, whose
    // part needs no laggard.
    let at_first = view.at(first_missing);
    let seq = if at_first.values().any(|r| r.state != State::Completed) {
        first_missing
    } else {
        high
    };
    let at = view.at(seq);
    let waiting: Vec<usize> = at
        .iter()
        .filter(|(_, r)| r.state != State::Completed)
        .map(|(rank, _)| *rank)
        .collect();
    // Members that only queued S behind an operation they are still
    // running do not wait in it: they hang earlier (`stuck` finds where).
    if waiting.iter().all(|&rank| queued_behind(view, rank, seq)) {
        return None;
    }
    let behind: Vec<usize> = view
        .tracks
        .values()
        .filter(|t| t.last < seq)
        .map(|t| t.rank())
        .collect();
    if seq == 0 || waiting.is_empty() || behind.is_empty() {
        return None;
    }
    let newest: Vec<String> = behind.iter().map(|&rank| newest(view, rank)).collect();
    let seq_text = format!("seq {seq} ({})", op_of(&at));
    Some(not_joined_at(
        view, seq, &seq_text, &waiting, behind, &newest, "",
    ))
}

/// The `not-joined` of `behind` at `seq` (`seq_text` says it), which
/// `waiting` entered and have not completed; `newest`: where each of
/// `behind` got to; `after` ends the detail.
fn not_joined_at(
    view: &GroupView,
    seq: u64,
    seq_text: &str,
    waiting: &[usize],
    behind: Vec<usize>,
    newest: &[String],
    after: &str,
) -> Candidate {
    let detail = format!(
        "{} entered {seq_text} and {} not completed it; {} never entered it (newest: {}){after}",
        ranks_text(waiting),
        if waiting.len() == 1 { "has" } else { "have" },
        ranks_text(&behind),
        newest.join("; ")
    );
    Candidate::new(
        priority::NOT_JOINED,
        FindingKind::NotJoined,
        Some(view.name.clone()),
        Some(seq),
        behind,
        detail,
    )
}

/// Where a group stands when no dump holds a record of it (every member's
/// ring dropped them, or kept none), by the dumps' status alone: members
/// that entered the newest seq and did not complete it wait in it; those
/// whose newest is older never entered it (`not-joined`, the culprits).
/// When every member entered it and a dump was written on a timeout, the
/// group is `stuck` there, no rank known to hold the others up.
pub fn by_status_alone(view: &GroupView) -> Option<Candidate> {
    // collbench's dumps only: PyTorch's `pg_status` is keyed by each
    // process's own count of the groups it made, not by the group's name.
    let collbench = |t: &Track| t.blind() && t.dump.format == Format::Collbench;
    if view.tracks.is_empty() || !view.tracks.values().all(collbench) {
        return None;
    }
    let high = view.tracks.values().map(|t| t.last).max()?;
    let rank_list = |keep: &dyn Fn(&Track) -> bool| -> Vec<usize> {
        view.tracks
            .values()
            .filter(|t| keep(t))
            .map(Track::rank)
            .collect()
    };
    let waiting = rank_list(&|t| t.last == high && t.last_completed < Some(high));
    let behind = rank_list(&|t| t.last < high);
    if high == 0 || waiting.is_empty() {
        return None;
    }
    let alone = "by the dumps' status alone: none holds a record of the group, which a ring buffer drops when full (--fr-entries sets its size)";
    if behind.is_empty() {
        if !timed_out(view) {
            return None;
        }
        let detail = format!(
            "all {} ranks with a dump entered seq {high}; {} did not complete it ({alone}). Which rank holds the others up is not known.",
            view.tracks.len(),
            ranks_text(&waiting)
        );
        return Some(Candidate::new(
            priority::STUCK_UNBLAMED,
            FindingKind::Stuck,
            Some(view.name.clone()),
            Some(high),
            Vec::new(),
            detail,
        ));
    }
    let newest: Vec<String> = behind
        .iter()
        .map(|&rank| status_place(rank, &view.tracks[&rank]))
        .collect();
    let (seq_text, after) = (format!("seq {high}"), format!(" ({alone})"));
    Some(not_joined_at(
        view, high, &seq_text, &waiting, behind, &newest, &after,
    ))
}

/// `rank R at seq N, completed` (or `entered`): where a member known by
/// its dump's status got to.
fn status_place(rank: usize, t: &Track) -> String {
    let state = if t.last_completed == Some(t.last) {
        "completed"
    } else {
        "entered"
    };
    format!("rank {rank} at seq {}, {state}", t.last)
}

/// Where member `rank` of the group got to: its newest record, or, where
/// its ring dropped the group's records, what its dump's status kept.
fn newest(view: &GroupView, rank: usize) -> String {
    let t = &view.tracks[&rank];
    if let Some(r) = t.by_seq.values().next_back() {
        return format!(
            "rank {rank} at seq {}, {}, {}",
            r.seq,
            r.op,
            state_name(r.state)
        );
    }
    if t.last == 0 {
        return format!("rank {rank} entered nothing in this group");
    }
    format!(
        "{} (by its dump's status: the dump holds no record of the group, which its ring buffer drops when full; {} sets its size)",
        status_place(rank, t),
        ring_size_knob(t)
    )
}

/// What sets the size of the ring buffer `t`'s dump came from.
fn ring_size_knob(t: &Track) -> &'static str {
    match t.dump.format {
        Format::Collbench => "--fr-entries",
        _ => "TORCH_FR_BUFFER_SIZE",
    }
}

/// Whether `rank` holds `seq` only queued (scheduled, not started) behind an
/// older operation of the group it started and has not completed.
fn queued_behind(view: &GroupView, rank: usize, seq: u64) -> bool {
    let Some(track) = view.tracks.get(&rank) else {
        return false;
    };
    track
        .by_seq
        .get(&seq)
        .is_some_and(|r| r.state == State::Scheduled)
        && track
            .by_seq
            .range(..seq)
            .any(|(_, r)| r.state == State::Started)
}

/// Whether a member's dump was written because the watchdog timed out.
fn timed_out(view: &GroupView) -> bool {
    view.tracks
        .values()
        .any(|t| t.dump.reason.as_deref() == Some("timeout"))
}

/// Where the ranks of `found` (a `not-joined` in group G at seq S)
/// stopped first: in another group H where nothing is pending, they got
/// less far than the others, who completed H's next seq before they
/// entered S (a rooted collective's other ranks can go on without them: a
/// gather's leaves send into the connections), then waited in S, which the
/// ranks never reached: H's next seq is where they stopped. Ranks still
/// in some collective are held up there, not stopped: never named here.
pub fn stopped_earlier(views: &[GroupView], found: &Candidate) -> Option<Candidate> {
    let f = &found.finding;
    let (g, s) = (f.pg.as_deref()?, f.seq?);
    if f.kind != FindingKind::NotJoined || f.ranks.is_empty() {
        return None;
    }
    let gview = views.iter().find(|v| v.name == g)?;
    let pending_somewhere = |c: usize| {
        views.iter().any(|v| {
            v.tracks.get(&c).is_some_and(|t| {
                t.by_seq.values().any(|r| r.state != State::Completed)
                    || (t.blind() && t.last_completed.unwrap_or(0) < t.last)
            })
        })
    };
    if f.ranks.iter().any(|&c| pending_somewhere(c)) {
        return None;
    }
    for h in views.iter().filter(|v| v.name != g && timed_out(v)) {
        let idle = h
            .tracks
            .values()
            .flat_map(|t| t.by_seq.values())
            .all(|r| r.state == State::Completed);
        let lagging = |c: &usize| {
            h.tracks
                .get(c)
                .is_some_and(|t| !t.blind() && t.last < h.high)
        };
        if !idle || !f.ranks.iter().all(lagging) {
            continue;
        }
        let last = f.ranks.iter().map(|c| h.tracks[c].last).min()?;
        let seq = last + 1;
        let ahead: Vec<usize> = h
            .tracks
            .values()
            .filter(|t| t.last >= seq)
            .map(Track::rank)
            .collect();
        // The order of the two: each rank ahead that holds both completed
        // H's seq before it entered S (at least one tells).
        let (done_h, entered_g) = (h.at(seq), gview.at(s));
        let order: Vec<bool> = ahead
            .iter()
            .filter_map(|a| {
                let done = done_h.get(a)?.t_completed_ns?;
                let r = entered_g.get(a)?;
                Some(done <= r.t_scheduled_ns.or(r.t_started_ns)?)
            })
            .collect();
        if order.is_empty() || order.contains(&false) {
            continue;
        }
        let one = f.ranks.len() == 1;
        let detail = format!(
            "{} completed seq {last} and never entered seq {seq} ({}), which {} completed without {}: their part needed nothing from {} (a rooted collective's other ranks send into the connections and go on); then they waited in group {g} at seq {s}, where {} never came",
            ranks_text(&f.ranks),
            op_of(&done_h),
            ranks_text(&ahead),
            if one { "it" } else { "them" },
            if one { "it" } else { "them" },
            if one { "it" } else { "they" },
        );
        return Some(Candidate::new(
            priority::NOT_JOINED_EARLIER,
            FindingKind::NotJoined,
            Some(h.name.clone()),
            Some(seq),
            f.ranks.clone(),
            detail,
        ));
    }
    None
}

/// `not-joined` when a dump was written on a timeout yet nothing is
/// pending: every member stopped outside collectives (in the program, the
/// host or I/O, or an injected hang), and no wait of theirs could time out.
/// The collective after the oldest member's newest is the one never
/// entered; the members that got least far are the culprits.
pub fn idle_at_timeout(view: &GroupView) -> Option<Candidate> {
    // A member known by its status alone is pending where it entered more
    // than it completed (one that entered nothing is not).
    let pending = view
        .tracks
        .values()
        .flat_map(|t| t.by_seq.values())
        .any(|r| r.state != State::Completed)
        || view
            .tracks
            .values()
            .any(|t| t.blind() && t.last_completed.unwrap_or(0) < t.last);
    if !timed_out(view) || pending || view.tracks.is_empty() {
        return None;
    }
    let least = view.tracks.values().map(|t| t.last).min()?;
    let behind: Vec<usize> = view
        .tracks
        .values()
        .filter(|t| t.last == least)
        .map(|t| t.rank())
        .collect();
    let (all, seq) = (behind.len() == view.tracks.len(), least.saturating_add(1));
    let done = if least == 0 {
        "entered none of its collectives".to_string()
    } else {
        format!("completed seq {least}")
    };
    let detail = format!(
        "the dumps were written on a timeout, yet no rank is in a collective: {} {done}{} and never entered seq {seq}: stopped outside communication (the program, the host, I/O, or an injected hang)",
        ranks_text(&behind),
        if all { "" } else { ", the others more" },
    );
    Some(Candidate::new(
        priority::IDLE_AT_TIMEOUT,
        FindingKind::NotJoined,
        Some(view.name.clone()),
        Some(seq),
        behind,
        detail,
    ))
}

/// The first collective every member entered and some are hung in.
pub fn stuck(view: &GroupView, missing: &BTreeSet<usize>) -> Option<Candidate> {
    // Members known only by their status: entered a seq as far as it says.
    let blind: Vec<&Track> = view.tracks.values().filter(|t| t.blind()).collect();
    // Seqs pending below the window too: members whose ring dropped one
    // but completed a later one completed it.
    let mut seqs = view.pending_below();
    seqs.extend(view.seqs());
    for seq in seqs {
        let at = view.at(seq);
        let blind_in: Vec<usize> = blind
            .iter()
            .filter(|t| t.last >= seq)
            .map(|t| t.rank())
            .collect();
        // Members whose ring dropped it but that entered a later one
        // entered it; those that completed a later one completed it.
        let past: Vec<&Track> = view
            .tracks
            .values()
            .filter(|t| !t.blind() && !t.by_seq.contains_key(&seq) && t.last > seq)
            .collect();
        if at.len() + blind_in.len() + past.len() < view.tracks.len() {
            continue; // not everyone entered it: that is not-joined's case
        }
        let not_done: Vec<usize> = at
            .iter()
            .filter(|(rank, r)| r.state != State::Completed && !view.tracks[*rank].moved_past(seq))
            .map(|(rank, _)| *rank)
            .collect();
        // (A status's completions are not evidence: gloo's dumps count a
        // collective completed that timed out.)
        let some_done = at.values().any(|r| r.state == State::Completed)
            || past.iter().any(|t| t.moved_past(seq));
        let waits = not_done.iter().any(|r| at[r].waits().next().is_some());
        if not_done.is_empty() || !(some_done || waits || timed_out(view)) {
            continue;
        }
        // Members whose dumps hold nothing of the group (their ring
        // buffer dropped it): not known to have entered, nor to wait.
        // Those whose status says they entered it and never completed it
        // are in it, waiting on no one known.
        let untracked: Vec<usize> = view
            .members
            .iter()
            .copied()
            .filter(|m| !view.tracks.contains_key(m) && !missing.contains(m))
            .collect();
        let unknown: BTreeSet<usize> = untracked
            .iter()
            .copied()
            .chain(
                blind
                    .iter()
                    .filter(|t| t.last >= seq && t.last_completed < Some(seq))
                    .map(|t| t.rank()),
            )
            .collect();
        let (blamed, why) = blame_stuck(&at, &not_done, some_done, missing, &unknown);
        let by_status = if blind_in.is_empty() {
            String::new()
        } else {
            let whose = if blind_in.len() == 1 {
                "its dump's"
            } else {
                "their dumps'"
            };
            format!(", {} by {whose} status alone", ranks_text(&blind_in))
        };
        let detail = format!(
            "all {} ranks {} entered seq {seq} ({}{by_status}); {} did not complete it{}. {why}",
            at.len() + blind_in.len(),
            if untracked.is_empty() {
                "with a dump"
            } else {
                "whose dumps hold the group's records"
            },
            op_of(&at),
            ranks_text(&not_done),
            wait_list(&at, &not_done)
        );
        let prio = if blamed.is_empty() {
            priority::STUCK_UNBLAMED
        } else {
            priority::STUCK_BLAMED
        };
        return Some(Candidate::new(
            prio,
            FindingKind::Stuck,
            Some(view.name.clone()),
            Some(seq),
            blamed,
            detail,
        ));
    }
    None
}

/// Who the hang at one seq points to, and why, in words. `missing`:
/// members without a dump; `unknown`: members whose dump holds nothing of
/// the group.
fn blame_stuck(
    at: &BTreeMap<usize, &Record>,
    not_done: &[usize],
    some_done: bool,
    missing: &BTreeSet<usize>,
    unknown: &BTreeSet<usize>,
) -> (Vec<usize>, String) {
    let waiters: BTreeSet<usize> = not_done
        .iter()
        .copied()
        .filter(|r| at[r].waits().next().is_some())
        .collect();
    if waiters.is_empty() {
        if some_done {
            let why = "Others completed it, so these ranks are where it hangs.";
            return (not_done.to_vec(), why.into());
        }
        return (
            Vec::new(),
            "The dumps do not show which rank holds the others up.".into(),
        );
    }
    let waited: BTreeSet<usize> = waiters
        .iter()
        .flat_map(|r| {
            at[r]
                .waits()
                .filter_map(|(_, w)| usize::try_from(w.peer).ok())
        })
        .collect();
    let sinks: Vec<usize> = waited
        .iter()
        .copied()
        .filter(|p| !waiters.contains(p))
        .filter(|p| {
            missing.contains(p)
                || unknown.contains(p)
                || at.get(p).is_some_and(|r| r.state != State::Completed)
        })
        .collect();
    if !sinks.is_empty() {
        return blame_sinks(at, sinks, unknown);
    }
    // Waits that lead only to ranks that completed it are no cycle: a
    // step that receives from several peers may show one that already
    // delivered. A member that called it, never started it and waits on
    // no one is then what the others wait for.
    let stale = waited.iter().any(|p| !waiters.contains(p));
    let unstarted: Vec<usize> = not_done
        .iter()
        .copied()
        .filter(|r| !waiters.contains(r) && at[r].state == State::Scheduled)
        .collect();
    if stale && !unstarted.is_empty() {
        let why = format!(
            "{} called it and never started it, waiting on no one; the others' waits lead to ranks that completed it.",
            ranks_text(&unstarted)
        );
        return (unstarted, why);
    }
    blame_cycle(at, &waiters)
}

/// The ranks waited on that wait on no one (`sinks`), and why in words:
/// which of them called the collective and never started it, and which
/// are known only as dumps without the group's records.
fn blame_sinks(
    at: &BTreeMap<usize, &Record>,
    sinks: Vec<usize>,
    unknown: &BTreeSet<usize>,
) -> (Vec<usize>, String) {
    let unstarted: Vec<usize> = sinks
        .iter()
        .copied()
        .filter(|p| at.get(p).is_some_and(|r| r.state == State::Scheduled))
        .collect();
    let mut why = if unstarted.is_empty() {
        format!("Waited on, and waiting on no one: {}.", ranks_text(&sinks))
    } else {
        format!(
            "Waited on, and waiting on no one: {}; {} called it and never started it.",
            ranks_text(&sinks),
            ranks_text(&unstarted)
        )
    };
    let dropped: Vec<usize> = sinks
        .iter()
        .copied()
        .filter(|p| unknown.contains(p))
        .collect();
    if !dropped.is_empty() {
        why.push_str(&format!(
            " The dump of {} holds no record of this group (its ring buffer dropped them): where it stopped is not known.",
            ranks_text(&dropped)
        ));
    }
    (sinks, why)
}

/// Waits that form a cycle (every rank waited on waits too): the ranks
/// that got less than half as far as the next-least, or none when all got
/// about as far.
fn blame_cycle(at: &BTreeMap<usize, &Record>, waiters: &BTreeSet<usize>) -> (Vec<usize>, String) {
    let least = waiters.iter().map(|r| at[r].progress()).min().unwrap_or(0);
    let most = waiters.iter().map(|r| at[r].progress()).max().unwrap_or(0);
    let slowest: Vec<usize> = waiters
        .iter()
        .copied()
        .filter(|r| at[r].progress() == least)
        .collect();
    // The next-least rank's progress: a rank is held to be the one that
    // stopped only when it got less than half as far. Ranks of a pipeline
    // (a ring's steps) that were all moving, slowly, are a few steps apart
    // wherever the timeout catches them: blaming the one a step behind
    // named a healthy rank when another was slow.
    let next = waiters
        .iter()
        .map(|r| at[r].progress())
        .filter(|&p| p > least)
        .min();
    match next {
        Some(next) if least.saturating_mul(2) < next => {
            let why = format!(
                "The waits form a cycle; {} got least far ({least} step(s) done, the others {next} or more).",
                ranks_text(&slowest)
            );
            (slowest, why)
        }
        _ => {
            let why = if least == most {
                format!(
                    "The waits form a cycle and every rank got equally far ({least} step(s) done)"
                )
            } else {
                format!("The waits form a cycle and the ranks got about as far ({least} to {most} step(s) done)")
            };
            (
                Vec::new(),
                format!(
                    "{why}: no one rank stopped; the collective was moving slowly when the timeout struck (a slow rank or link, or a --timeout too short for the size), or its algorithm deadlocked."
                ),
            )
        }
    }
}

/// `: rank 0 waits to recv from rank 1 (channel 0, step 3 of 8), ...`
fn wait_list(at: &BTreeMap<usize, &Record>, ranks: &[usize]) -> String {
    let parts: Vec<String> = ranks
        .iter()
        .filter_map(|rank| {
            let (ch, w) = at[rank].waits().next()?;
            Some(format!(
                "rank {rank} waits to {} {} rank {} (channel {}, step {} of {})",
                w.what,
                if w.what == "send" { "to" } else { "from" },
                w.peer,
                ch.channel,
                ch.last_step_done.saturating_add(1),
                ch.steps_total
            ))
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(": {}", parts.join(", "))
    }
}

/// Pending longer than this, at least, in a dump written while the run was
/// moving, is a stall rather than work in flight.
const STALL_FLOOR_NS: u64 = 2_000_000_000;

/// The longest time an operation not completed had been pending when its
/// rank was dumped, if that is a stall: more than max(2 s, 10 × the longest
/// completed operation of the group on any member). Only each rank's oldest
/// operation not completed counts: the ones after it are queued behind it
/// (a device stream, PyTorch's work queue), and how long ago they were
/// enqueued says nothing. None when no dump says when it was taken.
pub fn stalled(view: &GroupView) -> Option<u64> {
    let longest_done = view
        .tracks
        .values()
        .flat_map(|t| t.by_seq.values())
        .filter_map(|r| {
            let start = r.t_started_ns.or(r.t_scheduled_ns)?;
            r.t_completed_ns?.checked_sub(start)
        })
        .max()
        .unwrap_or(0);
    let threshold = STALL_FLOOR_NS.max(longest_done.saturating_mul(LATE_FACTOR));
    view.tracks
        .values()
        .filter_map(|t| {
            let at = t.dump.origin.dumped_at_ns?;
            let oldest = t.by_seq.values().find(|r| r.state != State::Completed)?;
            at.checked_sub(oldest.t_started_ns.or(oldest.t_scheduled_ns)?)
        })
        .max()
        .filter(|&age| age > threshold)
}

/// The last seq at which some member entered far later than the others.
pub fn late(view: &GroupView) -> Option<Candidate> {
    let samples: Vec<(u64, BTreeMap<usize, u64>)> = view
        .seqs()
        .into_iter()
        .filter_map(|seq| entry_times(view, &view.at(seq)).map(|t| (seq, t)))
        .collect();
    let mut spreads: Vec<u64> = samples.iter().map(|(_, t)| spread(t)).collect();
    spreads.sort_unstable();
    let usual = if spreads.len() >= MIN_SAMPLES {
        spreads[(spreads.len() - 1) / 2]
    } else {
        0
    };
    let threshold = LATE_FLOOR_NS.max(usual.saturating_mul(LATE_FACTOR));
    let late: Vec<(u64, Vec<(usize, u64)>)> = samples
        .iter()
        .map(|(seq, times)| (*seq, late_ranks(times, threshold)))
        .filter(|(_, late)| !late.is_empty())
        .collect();
    let first = late.first()?.0;
    let (seq, ranks) = late.last()?;
    let parts: Vec<String> = ranks
        .iter()
        .map(|(r, by)| format!("rank {r} entered {} after the median rank", duration(*by)))
        .collect();
    let detail = format!(
        "at seq {seq} ({}): {}; late means over {} (max of 1 s and 10 x the usual spread of {}); \
         {} of {} seqs compared had a late rank, the first at seq {first}",
        op_of(&view.at(*seq)),
        parts.join(", "),
        duration(threshold),
        duration(usual),
        late.len(),
        samples.len()
    );
    let blamed = ranks.iter().map(|(r, _)| *r).collect();
    Some(Candidate::new(
        priority::LATE,
        FindingKind::Late,
        Some(view.name.clone()),
        Some(*seq),
        blamed,
        detail,
    ))
}

/// The ranks that entered more than `threshold` after the (lower) median
/// rank, and by how much.
fn late_ranks(times: &BTreeMap<usize, u64>, threshold: u64) -> Vec<(usize, u64)> {
    let mut sorted: Vec<u64> = times.values().copied().collect();
    sorted.sort_unstable();
    let Some(&median) = sorted.get(sorted.len().saturating_sub(1) / 2) else {
        return Vec::new();
    };
    times
        .iter()
        .map(|(r, t)| (*r, t.saturating_sub(median)))
        .filter(|(_, by)| *by > threshold)
        .collect()
}

/// When each rank entered: in collbench dumps the start times where every
/// rank at this seq has one, else (and in PyTorch's) the times they called it.
fn entry_times(view: &GroupView, at: &BTreeMap<usize, &Record>) -> Option<BTreeMap<usize, u64>> {
    if at.len() < 2 {
        return None;
    }
    let collbench = at
        .keys()
        .all(|rank| view.tracks[rank].dump.format == Format::Collbench);
    let started: Option<BTreeMap<usize, u64>> = at
        .iter()
        .map(|(rank, r)| r.t_started_ns.map(|t| (*rank, t)))
        .collect();
    match started {
        Some(times) if collbench => Some(times),
        _ => at
            .iter()
            .map(|(rank, r)| r.t_scheduled_ns.map(|t| (*rank, t)))
            .collect(),
    }
}

/// The spread of the ranks' entry times at one seq, the latest rank left
/// out where there are three or more: a rank late at every seq would
/// otherwise make its own lateness the usual spread, and hide.
fn spread(times: &BTreeMap<usize, u64>) -> u64 {
    let mut sorted: Vec<u64> = times.values().copied().collect();
    sorted.sort_unstable();
    let last = if sorted.len() >= 3 {
        sorted.len() - 2
    } else {
        sorted.len().saturating_sub(1)
    };
    match (sorted.first(), sorted.get(last)) {
        (Some(lo), Some(hi)) => hi - lo,
        _ => 0,
    }
}

/// Nanoseconds in the unit that reads best.
pub fn duration(ns: u64) -> String {
    let ns_f = ns as f64;
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns_f / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns_f / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} us", ns_f / 1e3)
    } else {
        format!("{ns} ns")
    }
}

fn op_of(at: &BTreeMap<usize, &Record>) -> String {
    at.values()
        .next()
        .map_or_else(|| "?".into(), |r| r.op.clone())
}
