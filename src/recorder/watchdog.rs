//! The watchdog: one thread per process that looks at every rank's
//! operation in flight and fires when one has run longer than the timeout;
//! it also turns signals into actions: SIGUSR1 asks for dumps (and the run
//! goes on), SIGINT/SIGTERM stop the run after dumping.

use super::{mono_ns, RankRecorder};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

static USR1: AtomicBool = AtomicBool::new(false);
static STOP_SIGNAL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work here: atomic stores.
    if sig == libc::SIGUSR1 {
        USR1.store(true, Ordering::SeqCst);
    } else {
        STOP_SIGNAL.store(true, Ordering::SeqCst);
    }
}

/// Routes SIGUSR1, SIGINT and SIGTERM to the watchdog (idempotent).
pub fn install_signal_handlers() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for sig in [libc::SIGUSR1, libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installing a handler that only stores atomics.
        unsafe { libc::signal(sig, handler) };
    }
}

/// Why the watchdog acted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fired {
    /// Rank `rank`'s operation `seq` has run for `waited`.
    Timeout {
        rank: usize,
        seq: u64,
        waited: Duration,
    },
    /// SIGINT or SIGTERM.
    Stop,
    /// SIGUSR1: dump and go on.
    Request,
    /// Another process of the run detected a hang.
    Remote,
    /// After a timeout the run did not wind down within the grace period.
    Stuck,
}

/// A running watchdog; stops when dropped or with [`Watchdog::stop`].
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    fired: Arc<Mutex<Option<Fired>>>,
    handle: Option<JoinHandle<()>>,
}

/// How long the run gets to wind down after a timeout before the watchdog
/// acts alone.
pub const GRACE: Duration = Duration::from_secs(10);

impl Watchdog {
    /// Watches `recs`; `act` runs on the watchdog thread for every event.
    /// Watches `recs`; `act` runs on the watchdog thread for every event.
    /// When `trigger` names a file, its appearance (another process of the
    /// run detected a hang) fires [`Fired::Remote`].
    pub fn spawn(
        recs: Vec<Arc<RankRecorder>>,
        timeout: Duration,
        trigger: Option<PathBuf>,
        act: Box<dyn Fn(&Fired) + Send>,
    ) -> std::io::Result<Watchdog> {
        let stop = Arc::new(AtomicBool::new(false));
        let fired = Arc::new(Mutex::new(None));
        let (s, f) = (Arc::clone(&stop), Arc::clone(&fired));
        let tick = (timeout / 20).clamp(Duration::from_millis(5), Duration::from_millis(200));
        let handle = std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || {
                watch(
                    &recs,
                    timeout,
                    tick,
                    trigger.as_deref(),
                    &s,
                    &f,
                    act.as_ref(),
                )
            })?;
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

fn watch(
    recs: &[Arc<RankRecorder>],
    timeout: Duration,
    tick: Duration,
    trigger: Option<&Path>,
    stop: &AtomicBool,
    fired: &Mutex<Option<Fired>>,
    act: &dyn Fn(&Fired),
) {
    let record = |e: Fired| {
        if let Ok(mut g) = fired.lock() {
            g.get_or_insert(e);
        }
    };
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(tick);
        if USR1.swap(false, Ordering::SeqCst) {
            act(&Fired::Request);
        }
        let event = if STOP_SIGNAL.swap(false, Ordering::SeqCst) {
            Some(Fired::Stop)
        } else if trigger.is_some_and(|t| t.exists()) {
            Some(Fired::Remote)
        } else {
            let now = mono_ns();
            recs.iter().find_map(|r| {
                let (seq, ns) = r.in_flight(now)?;
                let waited = Duration::from_nanos(ns);
                (waited > timeout).then_some(Fired::Timeout {
                    rank: r.rank,
                    seq,
                    waited,
                })
            })
        };
        let Some(event) = event else { continue };
        record(event.clone());
        act(&event);
        // The run should now wind down; if it does not, act alone.
        let deadline = mono_ns() + GRACE.as_nanos() as u64;
        while !stop.load(Ordering::SeqCst) {
            if mono_ns() > deadline {
                act(&Fired::Stuck);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{model::IterKind, OpInfo};
    use super::*;

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
            None,
            Box::new(move |f: &Fired| s2.lock().unwrap().push(f.clone())),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(400));
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
            Some(t.clone()),
            Box::new(|_| {}),
        )
        .unwrap();
        std::fs::write(&t, b"").unwrap();
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(dog.stop(), Some(Fired::Remote));
    }

    #[test]
    fn stays_quiet_while_operations_complete() {
        let rec = Arc::new(RankRecorder::new(0, 4));
        let dog = Watchdog::spawn(
            vec![Arc::clone(&rec)],
            Duration::from_millis(100),
            None,
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
}
