//! Waiting for a rank's launched operations: polling its stream while
//! feeding the recorder the kernels' progress, stopping the kernels when
//! the world aborts, the error their status record stands for, and each
//! operation's time.

use super::*;

/// Reports every pending operation before index `until` not reported yet
/// (a graph counts as its operations).
pub(super) fn report_through(
    pending: &[Pending],
    next: &mut usize,
    reported: &mut usize,
    until: usize,
    done: &mut dyn FnMut(usize),
) {
    while *next < until.min(pending.len()) {
        let n = match pending[*next] {
            Pending::Graph(_, _, n) => n,
            _ => 1,
        };
        for _ in 0..n {
            done(*reported);
            *reported += 1;
        }
        *next += 1;
    }
}

impl CudaRank {
    /// Polls the stream until done: feeds the recorder the kernels'
    /// progress, and stops the kernels when the world aborts.
    pub(super) fn drain(
        &self,
        tick: &mut dyn FnMut(&Self) -> Result<(), ExecError>,
    ) -> Result<(), ExecError> {
        let start = Instant::now();
        let mut last_look = Instant::now();
        let mut seen = [u64::MAX; MAX_CHANNELS];
        let nch = self
            .loaded
            .as_ref()
            .map_or(0, |l| l.step_counts.len())
            .min(MAX_CHANNELS);
        // NCCL's kernels do not read our status record: past the timeout,
        // or when the run stops, its communicators are aborted instead.
        let nccl = match (
            self.loaded.as_ref().and_then(|l| l.lib.first().copied()),
            &self.world.library,
        ) {
            (Some(lib), Some(super::super::library::Library::Nccl(comms))) => Some((lib, comms)),
            _ => None,
        };
        let mut failed: Option<(ExecError, Instant)> = None;
        loop {
            if self.dev.done(self.stream).map_err(dev_err)? {
                return failed.map_or(Ok(()), |(e, _)| Err(e));
            }
            tick(self)?;
            // A rank of another GPU of this process gave up: only the
            // host carries that to this GPU's kernels.
            if self.world.host.aborted() || self.world.status.gave_up() {
                self.world.status.stop();
            }
            if let (Some((lib, comms)), None) = (nccl, &failed) {
                let waited = start.elapsed();
                if self.world.host.aborted() || waited >= self.world.opts.timeout {
                    comms.abort();
                    let e = if self.world.host.aborted() {
                        ExecError::Aborted
                    } else {
                        ExecError::CollectiveTimeout {
                            rank: self.rank,
                            collective: if self.loaded.as_ref().is_some_and(|l| l.lib.len() > 1) {
                                "group"
                            } else {
                                lib.coll().name()
                            },
                            call: "NCCL",
                            waited,
                        }
                    };
                    failed = Some((e, Instant::now()));
                }
            }
            if let Some((_, since)) = &failed {
                if since.elapsed() > Duration::from_secs(10) {
                    // The aborted operations did not drain: give up waiting.
                    return failed.map_or(Ok(()), |(e, _)| Err(e));
                }
            }
            if last_look.elapsed() >= Duration::from_millis(5) {
                last_look = Instant::now();
                self.observe(&mut seen[..nch]);
            }
            if start.elapsed() < Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    pub(super) fn observe(&self, seen: &mut [u64]) {
        let p = self.progress.host as *const CbProgress;
        for (ch, last) in seen.iter_mut().enumerate() {
            // SAFETY: `progress` holds MAX_CHANNELS records; kernels store
            // them with volatile system-scope stores.
            let rec = unsafe { std::ptr::read_volatile(p.add(ch)) };
            if rec.step != *last && rec.step > 0 {
                *last = rec.step;
                self.observer.step_done(ch, rec.step as usize - 1);
            }
            if rec.wait_on != 0 {
                let peer = ((rec.wait_on - 1) & 0xFFFF_FFFF) as usize;
                let kind = if rec.wait_on >> 32 != 0 {
                    WaitKind::Send
                } else {
                    WaitKind::Recv
                };
                self.observer.waiting(ch, peer, kind);
            }
        }
    }

    /// The error the kernels' status record stands for, if they stopped.
    pub(super) fn stopped(&self) -> Option<ExecError> {
        let mut s = self.world.status.read(self.di);
        if s.abort == 0 {
            return self.world.status.stopping().then_some(ExecError::Aborted);
        }
        // 1: the rank that gave up is still writing its record.
        let t = Instant::now();
        while s.abort == 1 && t.elapsed() < Duration::from_millis(200) {
            std::thread::yield_now();
            s = self.world.status.read(self.di);
        }
        if s.abort != 2 {
            return Some(ExecError::Aborted);
        }
        if s.rank != self.rank as u64 {
            return Some(ExecError::Aborted);
        }
        let (channel, step) = (s.channel as usize, s.step as usize);
        let prim = self
            .loaded
            .as_ref()
            .and_then(|l| l.prims.get(channel)?.get(step).copied())
            .unwrap_or("step");
        Some(ExecError::Timeout {
            rank: self.rank,
            channel,
            step,
            prim,
            what: if s.kind == 2 {
                "send to"
            } else {
                "receive from"
            },
            peer: s.peer as usize,
            waited: Duration::from_nanos(s.waited_ns),
        })
    }

    /// Waits for every launched operation, reporting each as it completes
    /// (`done`), and returns their times in nanoseconds.
    pub(super) fn wait_pending(
        &mut self,
        done: &mut dyn FnMut(usize),
    ) -> Result<Vec<u64>, ExecError> {
        let pending = std::mem::take(&mut self.pending);
        let (mut next, mut reported) = (0, 0);
        // Reports operations whose end event completed while no rank had
        // given up (event first, status second: then the operation ended
        // before any abort, so it really completed).
        let mut tick = |me: &Self| -> Result<(), ExecError> {
            let mut k = next;
            while let Some(p) = pending.get(k) {
                let end = match *p {
                    Pending::Timed(_, b) | Pending::Graph(_, b, _) | Pending::Untimed(b) => b,
                    Pending::Done(_) => {
                        // Completed when started.
                        k += 1;
                        report_through(&pending, &mut next, &mut reported, k, done);
                        continue;
                    }
                };
                if !me.dev.event_done(end).map_err(dev_err)? || me.world.status.stopping() {
                    break;
                }
                k += 1;
                report_through(&pending, &mut next, &mut reported, k, done);
            }
            Ok(())
        };
        let drained = self.drain(&mut tick);
        let wall = self.wall_start.take().map(|t| t.elapsed());
        drained?;
        if let Some(e) = self.stopped() {
            return Err(e);
        }
        // Everything completed: the next operations start from clean records.
        // SAFETY: the mapped progress holds MAX_CHANNELS records and no
        // kernel of this rank runs now.
        unsafe { std::ptr::write_bytes(self.progress.host, 0, self.progress.bytes) };
        tick(self)?;
        let mut out = Vec::with_capacity(pending.len());
        let untimed = pending
            .iter()
            .filter(|p| matches!(p, Pending::Untimed(_)))
            .count();
        for p in pending {
            match p {
                Pending::Timed(a, b) => {
                    let ms = self.dev.elapsed_ms(a, b).map_err(dev_err)?;
                    out.push((f64::from(ms) * 1e6) as u64);
                    self.events.extend([a, b]);
                }
                Pending::Graph(a, b, n) => {
                    let total = match (self.world.opts.timing, wall) {
                        (Timing::Wall, Some(w)) => w.as_nanos() as f64,
                        _ => f64::from(self.dev.elapsed_ms(a, b).map_err(dev_err)?) * 1e6,
                    };
                    out.extend(std::iter::repeat_n((total / n.max(1) as f64) as u64, n));
                    self.events.extend([a, b]);
                }
                Pending::Done(ns) => out.push(ns),
                Pending::Untimed(end) => {
                    let w = wall.map_or(0, |w| w.as_nanos() as u64);
                    out.push(w / untimed.max(1) as u64);
                    self.events.push(end);
                }
            }
        }
        while reported < out.len() {
            done(reported);
            reported += 1;
        }
        Ok(out)
    }
}
