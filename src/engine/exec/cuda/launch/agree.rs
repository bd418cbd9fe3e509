//! What the ranks of a world must choose alike, each from its own program:
//! the protocol (`--protocol auto`). A connection's two ends must read its
//! slots the same way, and a rank's largest message is not its peers'
//! (an uneven all-to-all-v): each rank's own choice differed, and a rank
//! writing low-latency lines to one that waited for simple slots hung.

use crate::engine::exec::cuda::abi::Proto;
use crate::engine::exec::world::{ExecError, HostWorld};
use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How much a protocol carries in a slot: each protocol carries whatever
/// those before it do, so the world takes the most any rank needs.
pub(super) fn capacity(p: Proto) -> u64 {
    match p {
        Proto::LowLatency => 0,
        Proto::LowLatency128 => 1,
        Proto::Simple => 2,
    }
}

/// The protocol of [`capacity`] `c`.
pub(super) fn of_capacity(c: u64) -> Proto {
    match c {
        0 => Proto::LowLatency,
        1 => Proto::LowLatency128,
        _ => Proto::Simple,
    }
}

/// The ranks of this process meeting, once per loaded operation (a round),
/// to take the most of their values.
pub(super) struct Rounds {
    ranks: usize,
    /// Round -> (ranks arrived, the most of their values, ranks that took it).
    state: Mutex<HashMap<u64, (usize, u64, usize)>>,
    arrived: Condvar,
}

impl Rounds {
    pub(super) fn new(ranks: usize) -> Rounds {
        Rounds {
            ranks,
            state: Mutex::new(HashMap::new()),
            arrived: Condvar::new(),
        }
    }

    /// The most of every rank's `value` in `round`; each of the ranks calls
    /// it once a round, in the same order of rounds. Left when the run
    /// stops (`host` aborted), and after `timeout` (a rank that never came).
    pub(super) fn most(
        &self,
        round: u64,
        value: u64,
        rank: usize,
        host: &HostWorld,
        timeout: Duration,
    ) -> Result<u64, ExecError> {
        let poisoned = || ExecError::Setup("the ranks' agreement was poisoned".into());
        let mut g = self.state.lock().map_err(|_| poisoned())?;
        let e = g.entry(round).or_insert((0, 0, 0));
        e.0 += 1;
        e.1 = e.1.max(value);
        if e.0 == self.ranks {
            self.arrived.notify_all();
        }
        let start = Instant::now();
        loop {
            let (arrived, most, _) = *g.get(&round).ok_or_else(poisoned)?;
            if arrived == self.ranks {
                let e = g.get_mut(&round).ok_or_else(poisoned)?;
                e.2 += 1;
                if e.2 == self.ranks {
                    g.remove(&round);
                }
                return Ok(most);
            }
            if host.aborted() {
                return Err(ExecError::Aborted);
            }
            if start.elapsed() >= timeout {
                return Err(ExecError::SetupTimeout {
                    rank,
                    what: format!(
                        "the other ranks' protocol ({arrived} of {} ranks came): is every rank still running?",
                        self.ranks
                    ),
                    waited: start.elapsed(),
                });
            }
            g = self
                .arrived
                .wait_timeout(g, Duration::from_millis(10))
                .map_err(|_| poisoned())?
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn protocols_order_by_what_they_carry() {
        for p in [Proto::LowLatency, Proto::LowLatency128, Proto::Simple] {
            assert_eq!(of_capacity(capacity(p)), p);
        }
        assert!(capacity(Proto::LowLatency) < capacity(Proto::LowLatency128));
        assert!(capacity(Proto::LowLatency128) < capacity(Proto::Simple));
    }

    /// Three ranks, rounds after rounds: each takes the most of the
    /// round's values, whatever order they come in; a rank that never
    /// comes is a timeout naming how many came; a stopped run leaves.
    #[test]
    fn every_rank_takes_the_most_of_its_round() {
        let rounds = Arc::new(Rounds::new(3));
        let host = HostWorld::new(3, Default::default());
        let wait = Duration::from_secs(30);
        let handles: Vec<_> = (0..3u64)
            .map(|r| {
                let (rounds, host) = (Arc::clone(&rounds), Arc::clone(&host));
                std::thread::spawn(move || {
                    (0..50u64)
                        .map(|k| {
                            let mine = (k * 7 + r * 5) % 11;
                            rounds.most(k, mine, r as usize, &host, wait).unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let seen: Vec<Vec<u64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for k in 0..50u64 {
            let want = (0..3).map(|r| (k * 7 + r * 5) % 11).max().unwrap();
            for s in &seen {
                assert_eq!(s[k as usize], want, "round {k}");
            }
        }
        assert!(
            rounds.state.lock().unwrap().is_empty(),
            "rounds left behind"
        );
        let e = rounds
            .most(99, 1, 0, &host, Duration::from_millis(50))
            .unwrap_err();
        assert!(e.is_timeout(), "{e:?}");
        assert!(e.to_string().contains("(1 of 3 ranks came)"), "{e}");
        host.abort();
        assert_eq!(
            rounds.most(100, 1, 0, &host, Duration::from_secs(60)),
            Err(ExecError::Aborted)
        );
    }
}
