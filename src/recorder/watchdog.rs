//! The watchdog: one thread per process that looks at every rank's
//! operation in flight and fires when one has run longer than the timeout;
//! it also turns signals into actions: SIGUSR1 asks for dumps (and the run
//! goes on), SIGINT/SIGTERM (and SIGHUP, unless ignored) stop the run
//! after dumping.
//!
//! A stop signal is sticky: once SIGINT, SIGTERM or SIGHUP arrived (or a sweep's
//! stdout closed, which stops it the same way), [`signalled`]
//! says so for the rest of the process, so whoever decides how the run
//! ended (the harness) lets the signal win over whatever the interrupted
//! ranks reported (an aborted wait, a slow wind-down taken for a hang).

use super::model::PeerLost;
use super::{mono_ns, RankRecorder};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

static USR1: AtomicBool = AtomicBool::new(false);
/// How many stop signals arrived (a second one while the run waits for
/// its processes' dumps means: stop waiting).
static STOPS: AtomicUsize = AtomicUsize::new(0);
/// The first stop signal received (SIGINT, SIGTERM, SIGHUP; SIGPIPE for a
/// closed stdout; 0: none); never reset.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work here: atomic operations.
    if sig == libc::SIGUSR1 {
        USR1.store(true, Ordering::SeqCst);
    } else {
        let _ = STOP_SIGNAL.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
        STOPS.fetch_add(1, Ordering::SeqCst);
    }
}

/// Whether SIGUSR1 came since the last call (a process without a watchdog,
/// the `--procs` parent, passes it on).
pub fn take_snapshot_request() -> bool {
    USR1.swap(false, Ordering::SeqCst)
}

/// Routes SIGUSR1, SIGINT, SIGTERM and SIGHUP to the watchdog (idempotent). Call it
/// as early as a command that runs a sweep can, so that a signal is never
/// met by the default action (death without results). SIGPIPE is ignored:
/// a write to a closed pipe or socket fails with EPIPE, which the writer
/// handles (a closed stdout: [`stop_for_closed_stdout`]).
pub fn install_signal_handlers() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for sig in [libc::SIGUSR1, libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installing a handler that only stores atomics.
        unsafe { libc::signal(sig, handler) };
    }
    // SIGHUP (the terminal or the ssh session went away) stops the run as
    // SIGTERM does, its results written, unless it is ignored (`nohup`):
    // then the run goes on, as asked.
    // SAFETY: a zeroed sigaction is valid; a null new action only reads
    // the current one.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    let read = unsafe { libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) };
    if read == 0 && old.sa_sigaction != libc::SIG_IGN {
        // SAFETY: installing a handler that only stores atomics.
        unsafe { libc::signal(libc::SIGHUP, handler) };
    }
    // SAFETY: setting the disposition of one signal; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Stops the run as a stop signal does (finished rows kept, dumps written,
/// exit 130): the reader of its stdout went away (`| head`), which would
/// have killed it with SIGPIPE before its results were written.
pub fn stop_for_closed_stdout() {
    let _ = STOP_SIGNAL.compare_exchange(0, libc::SIGPIPE, Ordering::SeqCst, Ordering::SeqCst);
}

/// Whether the run stopped because its stdout was closed (`| head`): a
/// reader that went away, nothing to diagnose.
pub fn stopped_for_closed_stdout() -> bool {
    STOP_SIGNAL.load(Ordering::SeqCst) == libc::SIGPIPE
}

/// The stop signal (SIGINT, SIGTERM, SIGHUP) that arrived first, to pass on to rank
/// processes (a closed stdout is this process's own: None).
pub fn stop_signal_number() -> Option<i32> {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        sig @ (libc::SIGINT | libc::SIGTERM | libc::SIGHUP) => Some(sig),
        0 | libc::SIGPIPE => None,
        _ => Some(libc::SIGTERM),
    }
}

/// How many stop signals (SIGINT, SIGTERM, SIGHUP) arrived so far: one
/// more than before says the user wants out of a wait now.
pub fn stop_signals() -> usize {
    STOPS.load(Ordering::SeqCst)
}

/// Whether a stop signal (SIGINT, SIGTERM, SIGHUP, or a closed stdout)
/// arrived since the process started.
pub fn signalled() -> bool {
    stop_signal().is_some()
}

/// The first stop signal that arrived, by name.
pub fn stop_signal() -> Option<&'static str> {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        libc::SIGHUP => Some("SIGHUP"),
        libc::SIGPIPE => Some("SIGPIPE (stdout was closed)"),
        _ => Some("a signal"),
    }
}

/// What a process writes into the run's abort trigger when a signal (not
/// a hang) stopped it, so that the run's other processes stop as
/// interrupted too.
pub const TRIGGER_SIGNAL: &str = "signal";

/// Why the watchdog acted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fired {
    /// Rank `rank`'s operation `seq` has run for `waited`; `op`: its
    /// (group, collective), where the recorder still holds it.
    Timeout {
        rank: usize,
        seq: u64,
        waited: Duration,
        op: Option<(&'static str, &'static str)>,
    },
    /// Every rank of this process has been stopped outside any collective
    /// (none waits on a peer, so none can time out) for `waited`, past
    /// [`stall_limit`]; `seq`: the first collective one of them never
    /// entered.
    Stalled { seq: u64, waited: Duration },
    /// SIGINT or SIGTERM (here, or in another process of the run).
    Stop,
    /// SIGUSR1: dump and go on.
    Request,
    /// Another process of the run detected a hang.
    Remote,
    /// A rank's process died (its launcher says so): the ranks waiting on
    /// it would only time out.
    Lost(PeerLost),
    /// After a timeout (`signal`: after a stop signal) the run did not
    /// wind down within the grace period.
    Stuck { signal: bool },
}

/// Asks the launcher whether a rank's process of the run died.
pub type LostProbe = Box<dyn Fn() -> Option<PeerLost> + Send>;

/// What the watchdog hears from the run's other processes.
#[derive(Default)]
pub struct Remote {
    /// A file whose appearance (another process of the run detected a
    /// hang) fires [`Fired::Remote`], or [`Fired::Stop`] when it says
    /// [`TRIGGER_SIGNAL`].
    pub trigger: Option<PathBuf>,
    /// Fires [`Fired::Lost`] when it names a rank.
    pub lost: Option<LostProbe>,
}

/// A running watchdog; stops when dropped or with [`Watchdog::stop`].
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    fired: Arc<Mutex<Option<Fired>>>,
    handle: Option<JoinHandle<()>>,
}

/// How long every rank of a process may be stopped outside collectives
/// before the watchdog calls it a hang: twice the timeout, so that where a
/// peer waits on a stopped rank (here or in another process of the run) the
/// peer's timeout names the hang first.
pub fn stall_limit(timeout: Duration) -> Duration {
    timeout
        .saturating_mul(2)
        .max(timeout.saturating_add(Duration::from_secs(1)))
}

/// How long the run gets to wind down after a timeout before the watchdog
/// acts alone.
pub const GRACE: Duration = Duration::from_secs(10);

impl Watchdog {
    /// Watches `recs`, and what `remote` says of the run's other
    /// processes; `act` runs on the watchdog thread for every event.
    pub fn spawn(
        recs: Vec<Arc<RankRecorder>>,
        timeout: Duration,
        remote: Remote,
        act: Box<dyn Fn(&Fired) + Send>,
    ) -> std::io::Result<Watchdog> {
        let stop = Arc::new(AtomicBool::new(false));
        let fired = Arc::new(Mutex::new(None));
        let (s, f) = (Arc::clone(&stop), Arc::clone(&fired));
        // Short ticks: a stop signal must reach the ranks at once (SIGTERM
        // ends the run within a second); a tick costs a few atomic loads.
        let tick = (timeout / 20).clamp(Duration::from_millis(5), Duration::from_millis(20));
        let handle = std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || watch(&recs, timeout, tick, &remote, &s, &f, act.as_ref()))?;
        Ok(Watchdog {
            stop,
            fired,
            handle: Some(handle),
        })
    }

    /// The first event that stopped the run (timeout or signal), if any.
    pub fn fired(&self) -> Option<Fired> {
        self.fired.lock().map(|g| g.clone()).unwrap_or(None)
    }

    pub fn stop(mut self) -> Option<Fired> {
        self.halt();
        self.fired()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.halt();
    }
}

/// [`Fired::Stalled`] when every rank is stopped outside collectives, the
/// one stopped the shortest for longer than `limit`.
fn stalled(recs: &[Arc<RankRecorder>], now: u64, limit: Duration) -> Option<Fired> {
    let mut first: Option<(u64, u64)> = None;
    for r in recs {
        let (seq, ns) = r.parked(now)?;
        let (s, n) = first.get_or_insert((seq, ns));
        (*s, *n) = ((*s).min(seq), (*n).min(ns));
    }
    let (seq, ns) = first?;
    let waited = Duration::from_nanos(ns);
    (waited > limit).then_some(Fired::Stalled { seq, waited })
}

fn watch(
    recs: &[Arc<RankRecorder>],
    timeout: Duration,
    tick: Duration,
    remote: &Remote,
    stop: &AtomicBool,
    fired: &Mutex<Option<Fired>>,
    act: &dyn Fn(&Fired),
) {
    let record = |e: Fired| {
        if let Ok(mut g) = fired.lock() {
            g.get_or_insert(e);
        }
    };
    let triggered = |t: &Path| match std::fs::read_to_string(t) {
        Ok(why) if why.trim() == TRIGGER_SIGNAL => Some(Fired::Stop),
        Ok(_) => Some(Fired::Remote),
        Err(_) => None,
    };
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(tick);
        if USR1.swap(false, Ordering::SeqCst) {
            act(&Fired::Request);
        }
        // A peer's death before the trigger: the first process to stop on
        // it writes the trigger, and the others, told of the death as it
        // was, must not take it for a hang found elsewhere.
        let event = if signalled() {
            Some(Fired::Stop)
        } else if let Some(l) = remote.lost.as_ref().and_then(|probe| probe()) {
            Some(Fired::Lost(l))
        } else if let Some(e) = remote.trigger.as_deref().and_then(triggered) {
            Some(e)
        } else {
            let now = mono_ns();
            recs.iter()
                .find_map(|r| {
                    let (seq, ns) = r.in_flight(now)?;
                    let waited = Duration::from_nanos(ns);
                    (waited > timeout).then(|| Fired::Timeout {
                        rank: r.rank,
                        seq,
                        waited,
                        op: r.in_flight_op(seq).map(|o| (o.group, o.collective)),
                    })
                })
                .or_else(|| stalled(recs, now, stall_limit(timeout)))
        };
        let Some(event) = event else { continue };
        record(event.clone());
        act(&event);
        // The run should now wind down; if it does not, act alone. A stop
        // signal during a hang's wind-down still stops the run as a signal.
        let mut signal = event == Fired::Stop;
        let deadline = mono_ns() + GRACE.as_nanos() as u64;
        while !stop.load(Ordering::SeqCst) {
            if !signal && signalled() {
                signal = true;
                act(&Fired::Stop);
            }
            if USR1.swap(false, Ordering::SeqCst) {
                act(&Fired::Request);
            }
            if mono_ns() > deadline {
                act(&Fired::Stuck { signal });
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{model::IterKind, OpInfo};
    use super::*;

    /// Waits up to 20 s for the watchdog to fire; whether it did.
    fn wait_fired(dog: &Watchdog) -> bool {
        let t = std::time::Instant::now();
        while dog.fired().is_none() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        dog.fired().is_some()
    }

    #[test]
    fn fires_on_an_operation_older_than_the_timeout() {
        let rec = Arc::new(RankRecorder::new(3, 4));
        let op = OpInfo {
            group: "0",
            collective: "all-reduce",
            ..OpInfo::default()
        };
        rec.enter(&op, IterKind::Timed);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = Arc::clone(&seen);
        let dog = Watchdog::spawn(
            vec![rec],
            Duration::from_millis(50),
            Remote::default(),
            Box::new(move |f: &Fired| s2.lock().unwrap().push(f.clone())),
        )
        .unwrap();
        // Fires within a tick of 50 ms passing; a loaded machine may keep
        // the watchdog thread waiting for a CPU, so wait for it, not a time.
        assert!(wait_fired(&dog), "no timeout fired in 20 s");
        let fired = dog.stop();
        assert!(
            matches!(
                fired,
                Some(Fired::Timeout {
                    rank: 3,
                    seq: 1,
                    ..
                })
            ),
            "{fired:?}"
        );
        assert!(matches!(seen.lock().unwrap()[0], Fired::Timeout { .. }));
    }

    #[test]
    fn a_trigger_file_fires() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join(".abort");
        let dog = Watchdog::spawn(
            vec![],
            Duration::from_secs(60),
            Remote {
                trigger: Some(t.clone()),
                lost: None,
            },
            Box::new(|_| {}),
        )
        .unwrap();
        std::fs::write(&t, b"").unwrap();
        assert!(wait_fired(&dog), "the trigger file fired nothing in 20 s");
        assert_eq!(dog.stop(), Some(Fired::Remote));
    }

    /// A launcher's word that a rank's process died fires at once (the
    /// timeout of an hour never would), and `act` hears which rank.
    #[test]
    fn a_lost_rank_fires() {
        let told = Arc::new(Mutex::new(None::<PeerLost>));
        let t2 = Arc::clone(&told);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = Arc::clone(&seen);
        let dog = Watchdog::spawn(
            vec![],
            Duration::from_secs(3600),
            Remote {
                trigger: None,
                lost: Some(Box::new(move || t2.lock().unwrap().clone())),
            },
            Box::new(move |f| s2.lock().unwrap().push(f.clone())),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(dog.fired(), None, "nobody died yet");
        let lost = PeerLost {
            rank: 2,
            how: "killed by signal 9 (SIGKILL)".into(),
        };
        *told.lock().unwrap() = Some(lost.clone());
        assert!(wait_fired(&dog), "the lost rank fired nothing in 20 s");
        assert_eq!(dog.stop(), Some(Fired::Lost(lost.clone())));
        assert_eq!(seen.lock().unwrap()[0], Fired::Lost(lost));
    }

    #[test]
    fn stays_quiet_while_operations_complete() {
        let rec = Arc::new(RankRecorder::new(0, 4));
        // Operations of 5 ms against a timeout of 2 s: quiet even when a
        // loaded machine stretches a 5 ms sleep a hundredfold.
        let dog = Watchdog::spawn(
            vec![Arc::clone(&rec)],
            Duration::from_secs(2),
            Remote::default(),
            Box::new(|_| {}),
        )
        .unwrap();
        let op = OpInfo {
            group: "0",
            ..OpInfo::default()
        };
        for _ in 0..20 {
            let s = rec.enter(&op, IterKind::Timed);
            std::thread::sleep(Duration::from_millis(5));
            rec.complete("0", s);
        }
        assert_eq!(dog.stop(), None);
    }

    #[test]
    fn fires_when_every_rank_is_stopped_outside_collectives_past_the_stall_limit() {
        let recs: Vec<_> = (0..3).map(|r| Arc::new(RankRecorder::new(r, 4))).collect();
        recs[0].park(7);
        recs[1].park(5);
        let now = mono_ns();
        let limit = Duration::from_millis(30);
        // One rank still runs: whatever the others do, nothing stalled.
        assert_eq!(stalled(&recs, now + 1_000_000_000, limit), None);
        recs[2].park(6);
        let later = mono_ns();
        assert_eq!(stalled(&recs, later, Duration::from_secs(60)), None);
        let fired = stalled(&recs, later + 1_000_000_000, limit);
        assert!(
            matches!(fired, Some(Fired::Stalled { seq: 5, waited }) if waited >= Duration::from_millis(900)),
            "{fired:?}"
        );
        recs[1].unpark();
        assert_eq!(stalled(&recs, later + 1_000_000_000, limit), None);
        assert_eq!(stalled(&[], later, limit), None, "no rank, no stall");
        assert_eq!(stall_limit(Duration::from_secs(3)), Duration::from_secs(6));
        assert_eq!(
            stall_limit(Duration::from_millis(200)),
            Duration::from_millis(1200)
        );
    }
}
