//! The flight recorder: every rank keeps a ring buffer of its operations
//! (sequence number, collective, sizes, state and timestamps) and, for the
//! operation in flight, each channel's last completed step and the peer it
//! waits on (fed by the executor through [`Observer`]). Dumps are written by
//! [`dump`]; the [`watchdog`] notices operations that take too long.

pub mod dump;
pub mod model;
pub mod watchdog;

use crate::engine::observe::{Observer, WaitKind};
use model::{ChannelProgress, Entry, GroupStatus, IterKind, State, Wait};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// Default ring-buffer capacity (`--fr-entries`).
pub const DEFAULT_ENTRIES: usize = 2000;
const MAX_CHANNELS: usize = 128;

/// The world's collectives are group "0", as in PyTorch.
pub const WORLD_GROUP: &str = "0";

/// Nanoseconds since the Unix epoch.
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Nanoseconds of CLOCK_MONOTONIC.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What an operation is, as recorded (static names: recording allocates nothing).
#[derive(Clone, Copy, Debug, Default)]
pub struct OpInfo {
    pub group: &'static str,
    pub collective: &'static str,
    pub algo: &'static str,
    pub dtype: &'static str,
    pub count: u64,
    pub bytes: u64,
    pub root: Option<i64>,
}

/// A record as kept in the ring: monotonic timestamps, turned into wall
/// clock when dumped.
#[derive(Clone, Copy, Debug)]
struct Rec {
    op: OpInfo,
    seq: u64,
    state: State,
    iteration: IterKind,
    t_scheduled: u64,
    t_started: u64,
    t_completed: u64,
}

impl Rec {
    fn entry(&self, wall_minus_mono: i128) -> Entry {
        let wall = |t: u64| (t != 0).then(|| (t as i128 + wall_minus_mono).max(0) as u64);
        Entry {
            pg: self.op.group.to_string(),
            seq: self.seq,
            collective: self.op.collective.to_string(),
            algo: self.op.algo.to_string(),
            dtype: self.op.dtype.to_string(),
            count: self.op.count,
            bytes: self.op.bytes,
            root: self.op.root,
            state: self.state,
            iteration: self.iteration,
            t_scheduled_ns: wall(self.t_scheduled).unwrap_or(0),
            t_started_ns: wall(self.t_started),
            t_completed_ns: wall(self.t_completed),
            channels: Vec::new(),
        }
    }
}

/// A group's newest sequence numbers (0: none).
#[derive(Default)]
struct Progress {
    group: &'static str,
    entered: u64,
    started: u64,
    completed: u64,
}

struct Ring {
    entries: VecDeque<Rec>,
    /// Each group's progress (`entered + 1` is its next sequence number).
    status: Vec<Progress>,
}

#[derive(Default)]
struct Chan {
    steps: AtomicU64,
    last_done: AtomicI64,
    peer: AtomicI64,
    kind: AtomicU8,
}

/// One rank's recorder.
pub struct RankRecorder {
    pub rank: usize,
    capacity: usize,
    ring: Mutex<Ring>,
    chans: Vec<Chan>,
    used_chans: AtomicU64,
    /// CLOCK_MONOTONIC ns when the operation in flight started (0: none).
    inflight_since: AtomicU64,
    inflight_seq: AtomicU64,
    /// CLOCK_MONOTONIC ns since when the rank has been stopped outside any
    /// collective, before `parked_seq` (0: it is not; an injected hang).
    parked_since: AtomicU64,
    parked_seq: AtomicU64,
}

impl RankRecorder {
    pub fn new(rank: usize, capacity: usize) -> RankRecorder {
        RankRecorder {
            rank,
            capacity: capacity.max(1),
            ring: Mutex::new(Ring {
                entries: VecDeque::new(),
                status: Vec::new(),
            }),
            chans: (0..MAX_CHANNELS).map(|_| Chan::default()).collect(),
            used_chans: AtomicU64::new(0),
            inflight_since: AtomicU64::new(0),
            inflight_seq: AtomicU64::new(0),
            parked_since: AtomicU64::new(0),
            parked_seq: AtomicU64::new(0),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        // A poisoned ring still holds valid records: keep using it.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sequence number the next operation of `group` will get.
    pub fn next_seq(&self, group: &str) -> u64 {
        let ring = self.lock();
        ring.status
            .iter()
            .find(|p| p.group == group)
            .map_or(1, |p| p.entered + 1)
    }

    /// Records a scheduled operation; returns its sequence number.
    pub fn schedule(&self, op: &OpInfo, iteration: IterKind) -> u64 {
        self.push(op, iteration, State::Scheduled, mono_ns())
    }

    /// Appends a record in `state` at time `now`; returns its sequence number.
    fn push(&self, op: &OpInfo, iteration: IterKind, state: State, now: u64) -> u64 {
        let mut ring = self.lock();
        let at = match ring.status.iter().position(|p| p.group == op.group) {
            Some(at) => at,
            None => {
                ring.status.push(Progress {
                    group: op.group,
                    ..Progress::default()
                });
                ring.status.len() - 1
            }
        };
        let progress = &mut ring.status[at];
        progress.entered += 1;
        let seq = progress.entered;
        if state == State::Started {
            progress.started = seq;
        }
        if ring.entries.len() == self.capacity {
            ring.entries.pop_front();
        }
        let started = if state == State::Started { now } else { 0 };
        ring.entries.push_back(Rec {
            op: *op,
            seq,
            state,
            iteration,
            t_scheduled: now,
            t_started: started,
            t_completed: 0,
        });
        seq
    }

    fn update(
        &self,
        group: &str,
        seq: u64,
        progress: impl FnOnce(&mut Progress),
        f: impl FnOnce(&mut Rec),
    ) {
        let mut ring = self.lock();
        if let Some(p) = ring.status.iter_mut().find(|p| p.group == group) {
            progress(p);
        }
        if let Some(e) = ring
            .entries
            .iter_mut()
            .rev()
            .find(|e| e.seq == seq && e.op.group == group)
        {
            f(e);
        }
    }

    /// The operation `seq` of `group` has started.
    pub fn start(&self, group: &str, seq: u64) {
        let now = mono_ns();
        let progress = |p: &mut Progress| p.started = p.started.max(seq);
        self.update(group, seq, progress, |e| {
            e.state = State::Started;
            e.t_started = now;
        });
        self.inflight_seq.store(seq, Ordering::Relaxed);
        self.inflight_since.store(now, Ordering::Release);
    }

    /// Schedules and starts at once; returns the sequence number.
    pub fn enter(&self, op: &OpInfo, iteration: IterKind) -> u64 {
        // One lock and one clock read: this runs around every operation.
        let now = mono_ns();
        let seq = self.push(op, iteration, State::Started, now);
        self.inflight_seq.store(seq, Ordering::Relaxed);
        self.inflight_since.store(now, Ordering::Release);
        seq
    }

    /// The operation in flight (if any) is allowed `ns` more before the
    /// watchdog counts it waiting: the first of a CUDA graph's operations,
    /// whose completions are seen only when the whole graph ends, is in
    /// flight while those behind it run.
    pub fn defer(&self, ns: u64) {
        let _ = self
            .inflight_since
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |since| {
                (since != 0).then_some(since.saturating_add(ns))
            });
    }

    /// The operation `seq` of `group` has completed.
    pub fn complete(&self, group: &str, seq: u64) {
        self.inflight_since.store(0, Ordering::Release);
        let now = mono_ns();
        let progress = |p: &mut Progress| p.completed = p.completed.max(seq);
        self.update(group, seq, progress, |e| {
            e.state = State::Completed;
            e.t_completed = now;
        });
    }

    /// How long the operation in flight has run, with its sequence number.
    pub fn in_flight(&self, now_mono: u64) -> Option<(u64, u64)> {
        let since = self.inflight_since.load(Ordering::Acquire);
        (since != 0).then(|| {
            (
                self.inflight_seq.load(Ordering::Relaxed),
                now_mono.saturating_sub(since),
            )
        })
    }

    /// The operation `seq` in flight: the newest started one of that
    /// number, of any group (None when the ring no longer holds it).
    pub fn in_flight_op(&self, seq: u64) -> Option<OpInfo> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.entries
            .iter()
            .filter(|e| e.seq == seq && e.state == State::Started)
            .max_by_key(|e| e.t_started)
            .map(|e| e.op)
    }

    /// The rank stops outside any collective, before entering `next_seq`
    /// (an injected hang): no wait of its own can time out, so the watchdog
    /// looks at how long it has been stopped.
    pub fn park(&self, next_seq: u64) {
        self.parked_seq.store(next_seq, Ordering::Relaxed);
        self.parked_since.store(mono_ns(), Ordering::Release);
    }

    /// The rank goes on.
    pub fn unpark(&self) {
        self.parked_since.store(0, Ordering::Release);
    }

    /// How long the rank has been stopped outside any collective, with the
    /// sequence number it has not entered.
    pub fn parked(&self, now_mono: u64) -> Option<(u64, u64)> {
        let since = self.parked_since.load(Ordering::Acquire);
        (since != 0).then(|| {
            (
                self.parked_seq.load(Ordering::Relaxed),
                now_mono.saturating_sub(since),
            )
        })
    }

    /// Each group's progress, in the order the groups were first entered.
    pub fn status(&self) -> Vec<GroupStatus> {
        self.lock()
            .status
            .iter()
            .map(|p| GroupStatus {
                group: p.group.into(),
                entered: p.entered,
                started: p.started,
                completed: p.completed,
            })
            .collect()
    }

    /// The ring's entries, oldest first, with channel progress on every
    /// started but not completed one.
    pub fn snapshot(&self) -> Vec<Entry> {
        let progress = self.channel_progress();
        let offset = wall_ns() as i128 - mono_ns() as i128;
        let ring = self.lock();
        ring.entries
            .iter()
            .map(|r| {
                let mut e = r.entry(offset);
                if e.state == State::Started {
                    e.channels = progress.clone();
                }
                e
            })
            .collect()
    }

    fn channel_progress(&self) -> Vec<ChannelProgress> {
        let used = self.used_chans.load(Ordering::Acquire) as usize;
        self.chans[..used.min(MAX_CHANNELS)]
            .iter()
            .enumerate()
            .map(|(c, ch)| {
                let peer = ch.peer.load(Ordering::Relaxed);
                let kind = ch.kind.load(Ordering::Relaxed);
                // Read while the rank may move on to its next operation:
                // a step of that one never reads as past this one's steps.
                let steps_total = ch.steps.load(Ordering::Acquire);
                let last = ch.last_done.load(Ordering::Acquire);
                let top = i64::try_from(steps_total).unwrap_or(i64::MAX) - 1;
                ChannelProgress {
                    channel: c as u32,
                    steps_total,
                    last_step_done: last.clamp(-1, top.max(-1)),
                    waiting_on: (peer >= 0).then(|| Wait {
                        peer,
                        what: ["recv", "send", "drain"]
                            .get(kind as usize)
                            .unwrap_or(&"recv")
                            .to_string(),
                    }),
                }
            })
            .collect()
    }
}

impl Observer for RankRecorder {
    fn begin(&self, steps: &[usize]) {
        let n = steps.len().min(MAX_CHANNELS);
        for (ch, &s) in self.chans.iter().zip(steps) {
            // No step done before the count changes (a snapshot in
            // between reads -1 of either operation).
            ch.last_done.store(-1, Ordering::Release);
            ch.steps.store(s as u64, Ordering::Release);
            ch.peer.store(-1, Ordering::Relaxed);
        }
        self.used_chans.store(n as u64, Ordering::Release);
    }

    fn step_done(&self, channel: usize, step: usize) {
        if let Some(ch) = self.chans.get(channel) {
            ch.last_done.store(step as i64, Ordering::Relaxed);
            if ch.peer.load(Ordering::Relaxed) >= 0 {
                ch.peer.store(-1, Ordering::Relaxed);
            }
        }
    }

    fn waiting(&self, channel: usize, peer: usize, kind: WaitKind) {
        if let Some(ch) = self.chans.get(channel) {
            let k = match kind {
                WaitKind::Recv => 0,
                WaitKind::Send => 1,
                WaitKind::Drain => 2,
            };
            ch.kind.store(k, Ordering::Relaxed);
            ch.peer.store(peer as i64, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op() -> OpInfo {
        OpInfo {
            group: WORLD_GROUP,
            collective: "all-reduce",
            ..OpInfo::default()
        }
    }

    /// The watchdog names the operation in flight: of the group it runs in
    /// (a barrier's number is its own group's), gone once it completed.
    #[test]
    fn the_operation_in_flight_is_named_with_its_group() {
        let r = RankRecorder::new(0, 8);
        for _ in 0..3 {
            let s = r.enter(&op(), IterKind::Timed);
            r.complete(WORLD_GROUP, s);
        }
        let barrier = OpInfo {
            group: "barrier",
            collective: "barrier",
            ..OpInfo::default()
        };
        // Barrier 1, while the world's operation 1 is long completed.
        let b = r.enter(&barrier, IterKind::Check);
        assert_eq!(b, 1);
        let (seq, _) = r.in_flight(mono_ns()).unwrap();
        let named = r.in_flight_op(seq).map(|o| (o.group, o.collective));
        assert_eq!(named, Some(("barrier", "barrier")));
        r.complete("barrier", b);
        assert!(r.in_flight_op(b).is_none());
        let s = r.enter(&op(), IterKind::Timed);
        let named = r.in_flight_op(s).map(|o| (o.group, o.collective));
        assert_eq!(named, Some((WORLD_GROUP, "all-reduce")));
    }

    #[test]
    fn ring_keeps_the_newest_entries_with_sequence_numbers() {
        let r = RankRecorder::new(0, 3);
        for _ in 0..5 {
            let s = r.enter(&op(), IterKind::Timed);
            r.complete(WORLD_GROUP, s);
        }
        let e = r.snapshot();
        assert_eq!(e.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3, 4, 5]);
        assert!(e
            .iter()
            .all(|e| e.state == State::Completed && e.t_completed_ns.is_some()));
        assert_eq!(r.next_seq(WORLD_GROUP), 6);
        assert_eq!(r.next_seq("barrier"), 1);
    }

    /// Each group's progress outlives the ring's entries of it.
    #[test]
    fn group_status_survives_the_ring_dropping_its_entries() {
        let r = RankRecorder::new(0, 1);
        for _ in 0..4 {
            let s = r.enter(&op(), IterKind::Timed);
            r.complete(WORLD_GROUP, s);
        }
        let s = r.schedule(&op(), IterKind::Timed);
        r.start(WORLD_GROUP, s);
        let mut barrier = op();
        barrier.group = "barrier";
        let b = r.enter(&barrier, IterKind::Barrier);
        r.complete("barrier", b);
        let e = r.snapshot();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].pg, "barrier");
        let status = r.status();
        let world = status.iter().find(|g| g.group == WORLD_GROUP).unwrap();
        assert_eq!((world.entered, world.started, world.completed), (5, 5, 4));
        let bar = status.iter().find(|g| g.group == "barrier").unwrap();
        assert_eq!((bar.entered, bar.started, bar.completed), (1, 1, 1));
    }

    #[test]
    fn in_flight_entries_carry_channel_progress() {
        let r = RankRecorder::new(1, 10);
        let s = r.schedule(&op(), IterKind::Check);
        r.start(WORLD_GROUP, s);
        Observer::begin(&r, &[4, 2]);
        r.step_done(0, 0);
        r.step_done(0, 1);
        r.waiting(0, 3, WaitKind::Recv);
        let e = r.snapshot();
        assert_eq!(e[0].state, State::Started);
        assert_eq!(e[0].channels.len(), 2);
        assert_eq!(e[0].channels[0].last_step_done, 1);
        assert_eq!(
            e[0].channels[0].waiting_on,
            Some(Wait {
                peer: 3,
                what: "recv".into()
            })
        );
        assert_eq!(e[0].channels[1].waiting_on, None);
        assert!(r.in_flight(mono_ns()).is_some());
        r.complete(WORLD_GROUP, s);
        assert!(r.in_flight(mono_ns()).is_none());
    }
}
