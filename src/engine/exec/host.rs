//! The host executor: each rank is a thread that walks its channels'
//! programs, running a step as soon as its inputs have arrived and its
//! outputs have room, so one thread serves all its channels and no rank
//! ever blocks inside a step. Waits spin briefly, then yield, so many ranks
//! share few cores; every wait honours the timeout and the world's abort.

use super::mem::HostBuf;
use super::world::{spin_limit, Wait};
pub use super::world::{ExecError, HostOptions, HostWorld, InProcess, Links, MAX_CHANNELS};
use crate::engine::algo::{Buf, Layout, Prim, Program, Slice, Step, MAX_PEERS};
use crate::engine::elem;
use crate::engine::observe::{LinkSample, Observer, WaitKind};
pub use crate::engine::transport::inproc::DirectMap;
use crate::engine::transport::inproc::Fifo;
use crate::engine::transport::links::stretch;
use crate::engine::types::{Dtype, ReduceOp};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A step with its connections resolved.
#[derive(Clone, Copy, Debug)]
struct XStep {
    step: Step,
    recv: [u16; MAX_PEERS],
    send: [u16; MAX_PEERS],
    /// Post a pointer to the step's value (dst, or src of a plain send).
    direct: bool,
    /// Premulsum: the source is this rank's input, multiplied by the scalar
    /// as it is read.
    pre: bool,
}

/// One rank's program, ready to run on its buffers.
pub struct Compiled {
    dtype: Dtype,
    op: ReduceOp,
    /// Premulsum's scalar, as bits of `dtype`.
    scalar: u64,
    nranks: usize,
    layout: Layout,
    channels: Vec<Vec<XStep>>,
    ins: Vec<Arc<Fifo>>,
    outs: Vec<Arc<Fifo>>,
    /// The peer rank of each of `outs`.
    out_peers: Vec<usize>,
    /// The peer rank of each of `ins`, and how many times slower a transfer
    /// from it is made (fault injection; 1: not slowed).
    in_peers: Vec<usize>,
    in_pace: Vec<f64>,
    step_counts: Vec<usize>,
    any_direct: bool,
    /// Bytes each physical buffer must hold for every slice to fit.
    need: [usize; 3],
}

impl Compiled {
    /// Resolves `program`'s connections in `world` for `rank`.
    pub fn new(
        world: &HostWorld,
        program: &Program,
        layout: Layout,
        dtype: Dtype,
        op: ReduceOp,
        scalar: u64,
    ) -> Result<Compiled, ExecError> {
        let rank = program.rank;
        let mut conns = Conns::default();
        let stable = Stability::new(program, &layout);
        let need = program
            .bounds(&layout, dtype)
            .map_err(|e| ExecError::Setup(e.to_string()))?;
        let mut channels = Vec::with_capacity(program.channels.len());
        for (c, ch) in program.channels.iter().enumerate() {
            let mut xs = Vec::with_capacity(ch.steps.len());
            for (i, step) in ch.steps.iter().enumerate() {
                let mut x = conns.x_step(world, rank, step, dtype.size(), op)?;
                // A premultiplied send posts the scaled copy, never the input.
                x.direct = !step.send.is_empty()
                    && !x.pre
                    && step.len * dtype.size() >= world.options().direct_min_bytes
                    && stable.holds(c, i, step);
                xs.push(x);
            }
            channels.push(xs);
        }
        let any_direct = channels.iter().flatten().any(|x| x.direct);
        if channels.len() > MAX_CHANNELS {
            return Err(ExecError::Setup(format!(
                "{} channels; at most {MAX_CHANNELS}",
                channels.len()
            )));
        }
        let (in_peers, out_peers) = conns.peers();
        let Conns { ins, outs, .. } = conns;
        let pace = &world.options().pace;
        let in_pace = in_peers.iter().map(|&p| pace.factor(p, rank)).collect();
        tracing::debug!(
            rank,
            channels = channels.len(),
            steps = channels.iter().map(Vec::len).sum::<usize>(),
            direct_steps = channels.iter().flatten().filter(|x| x.direct).count(),
            direct_min_bytes = world.options().direct_min_bytes,
            ins = ins.len(),
            outs = outs.len(),
            "host program loaded (direct: payload read from the sender's buffer)"
        );
        Ok(Compiled {
            dtype,
            op,
            scalar,
            nranks: program.nranks,
            layout,
            step_counts: channels.iter().map(Vec::len).collect(),
            channels,
            ins,
            outs,
            out_peers,
            in_peers,
            in_pace,
            any_direct,
            need,
        })
    }

    pub fn channels(&self) -> usize {
        self.channels.len()
    }
}

/// A program's connections as it resolves them: each (direction, peer,
/// channel) once, numbered in the order first named.
#[derive(Default)]
struct Conns {
    index: HashMap<(bool, usize, u32), u16>,
    ins: Vec<Arc<Fifo>>,
    outs: Vec<Arc<Fifo>>,
}

impl Conns {
    /// `step` of `rank` with its connections resolved in `world` (not yet
    /// judged direct). A message must fit a slot; a local copy may be any
    /// size.
    fn x_step(
        &mut self,
        world: &HostWorld,
        rank: usize,
        step: &Step,
        elem_bytes: usize,
        op: ReduceOp,
    ) -> Result<XStep, ExecError> {
        let bytes = step.len * elem_bytes;
        let message = !step.recv.is_empty() || !step.send.is_empty();
        if message && bytes > world.options().slot_bytes {
            return Err(ExecError::Setup(format!(
                "step of {bytes} bytes exceeds the {}-byte FIFO slot",
                world.options().slot_bytes
            )));
        }
        let mut x = XStep {
            step: *step,
            recv: [0; MAX_PEERS],
            send: [0; MAX_PEERS],
            direct: false,
            // The rank's input enters the reduction once, scaled,
            // wherever a step reads it (in place too: the layout
            // maps Send, which is never read after it is written).
            pre: op == ReduceOp::PreMulSum && step.src.is_some_and(|s| s.buf == Buf::Send),
        };
        for (k, p) in step.recv.iter().enumerate() {
            let from = p.rank as usize;
            x.recv[k] = self.lookup((false, from, p.chan), || world.fifo(from, rank, p.chan))?;
        }
        for (k, p) in step.send.iter().enumerate() {
            let to = p.rank as usize;
            x.send[k] = self.lookup((true, to, p.chan), || world.fifo(rank, to, p.chan))?;
        }
        Ok(x)
    }

    fn lookup(
        &mut self,
        key: (bool, usize, u32),
        make: impl FnOnce() -> Result<Arc<Fifo>, ExecError>,
    ) -> Result<u16, ExecError> {
        if let Some(&i) = self.index.get(&key) {
            return Ok(i);
        }
        let list = if key.0 { &mut self.outs } else { &mut self.ins };
        list.push(make()?);
        let i = (list.len() - 1) as u16;
        self.index.insert(key, i);
        Ok(i)
    }

    /// The peer rank of each incoming and each outgoing connection.
    fn peers(&self) -> (Vec<usize>, Vec<usize>) {
        let mut in_peers = vec![0; self.ins.len()];
        let mut out_peers = vec![0; self.outs.len()];
        for (&(is_out, peer, _), &i) in &self.index {
            if is_out {
                out_peers[i as usize] = peer;
            } else {
                in_peers[i as usize] = peer;
            }
        }
        (in_peers, out_peers)
    }
}

/// Which sent values stay unchanged until the receiver reads them: no step
/// of another channel, and no later step of the same channel, writes them.
struct Stability {
    /// (physical buffer, start, end, channel, step), sorted.
    writes: Vec<(usize, usize, usize, usize, usize)>,
    longest: usize,
    layout: Layout,
}

impl Stability {
    fn new(program: &Program, layout: &Layout) -> Stability {
        let mut writes = Vec::new();
        let mut longest = 0;
        for (c, ch) in program.channels.iter().enumerate() {
            for (i, s) in ch.steps.iter().enumerate() {
                if let Some(d) = s.dst {
                    let (b, o) = layout.resolve(d);
                    writes.push((b, o, o + s.len, c, i));
                    longest = longest.max(s.len);
                }
            }
        }
        writes.sort_unstable();
        Stability {
            writes,
            longest,
            layout: *layout,
        }
    }

    fn holds(&self, chan: usize, idx: usize, step: &Step) -> bool {
        let region: Slice = match (step.dst, step.prim) {
            (Some(d), _) => d,
            (None, Prim::Send) => match step.src {
                Some(s) => s,
                None => return false,
            },
            _ => return false,
        };
        let (b, start) = self.layout.resolve(region);
        let end = start + step.len;
        let from = self
            .writes
            .partition_point(|w| (w.0, w.1) < (b, start.saturating_sub(self.longest)));
        self.writes[from..]
            .iter()
            .take_while(|w| w.0 == b && w.1 < end)
            .filter(|w| w.2 > start)
            .all(|w| w.3 == chan && w.4 <= idx)
    }
}

/// Physical buffers of one rank: [send or only buffer, recv, scratch].
pub struct RankBufs<'a> {
    pub bufs: [&'a HostBuf; 3],
}

/// One rank's executor.
pub struct RankExec {
    world: Arc<HostWorld>,
    rank: usize,
    observer: Arc<dyn Observer>,
    spin_limit: u32,
    /// What the operations since the last [`RankExec::take_links`]
    /// measured of each incoming link (`--links`), by sender.
    links: Mutex<Vec<LinkSample>>,
}

impl RankExec {
    pub fn new(world: Arc<HostWorld>, rank: usize, observer: Arc<dyn Observer>) -> RankExec {
        let spin_limit = spin_limit(world.nranks());
        RankExec {
            world,
            rank,
            observer,
            spin_limit,
            links: Mutex::new(Vec::new()),
        }
    }

    /// What the operations since the last call measured of each incoming
    /// link (empty unless the world measures links).
    pub fn take_links(&self) -> Vec<LinkSample> {
        self.links
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Runs one operation to completion.
    pub fn run(&self, c: &Compiled, bufs: &RankBufs<'_>) -> Result<(), ExecError> {
        if let Some(i) = (0..3).find(|&i| bufs.bufs[i].len() < c.need[i]) {
            return Err(ExecError::Setup(format!(
                "buffer {i} holds {} bytes; the program needs {}",
                bufs.bufs[i].len(),
                c.need[i]
            )));
        }
        self.observer.begin(&c.step_counts);
        let bases = bufs.bufs.map(|b| b.as_ptr());
        let mut pcs = [0usize; MAX_CHANNELS];
        let nch = c.channels.len().min(MAX_CHANNELS);
        let mut wait = Wait::new(self.spin_limit);
        // What the recorder was last told this rank waits on.
        let mut said = None;
        let measure = self.world.options().link_timing;
        let mut meter = (measure || c.in_pace.iter().any(|&f| f > 1.0)).then(|| Meter::new(c, nch));
        loop {
            let mut moved = false;
            let mut done = true;
            for (ch, (steps, pc)) in c.channels.iter().zip(pcs.iter_mut()).enumerate().take(nch) {
                while let Some(x) = steps.get(*pc) {
                    if !ready(c, x) {
                        if let Some(m) = meter.as_mut() {
                            m.blocked(ch, c, x);
                        }
                        done = false;
                        break;
                    }
                    let began = meter.as_mut().map(|m| m.start(ch, x));
                    // SAFETY: the program's slices are inside the buffers the
                    // layout was made for, and `ready` checked the FIFOs.
                    unsafe { exec(c, x, &bases) };
                    if let (Some(m), Some(b)) = (meter.as_mut(), began) {
                        m.end(c, x, b);
                    }
                    self.observer.step_done(ch, *pc);
                    *pc += 1;
                    moved = true;
                }
            }
            if done {
                break;
            }
            if moved {
                wait.reset();
                said = None;
            } else {
                self.snooze(&mut wait, &mut said, c, &pcs)?;
            }
        }
        if c.any_direct {
            // Peers may still be reading our buffers.
            while !c.outs.iter().all(|f| f.drained()) {
                self.snooze(&mut wait, &mut said, c, &pcs)?;
            }
        }
        if let (true, Some(m)) = (measure, meter) {
            self.keep_links(c, &m);
        }
        Ok(())
    }

    /// Adds one operation's link measurements to those kept, by sender.
    fn keep_links(&self, c: &Compiled, m: &Meter) {
        let Ok(mut kept) = self.links.lock() else {
            return;
        };
        let mut op: Vec<LinkSample> = Vec::new();
        for (i, &from) in c.in_peers.iter().enumerate() {
            let l = LinkSample::of(&mut op, from, self.rank);
            l.bytes += m.bytes[i];
            l.wait_ns += m.wait_ns[i];
            l.transfer_ns += m.transfer_ns[i];
        }
        for l in &mut op {
            // The median step rate over every FIFO from this sender.
            let mut r: Vec<f32> = (0..c.ins.len())
                .filter(|&i| c.in_peers[i] == l.from)
                .flat_map(|i| m.step_gbps[i].iter().copied())
                .collect();
            if !r.is_empty() {
                r.sort_by(f32::total_cmp);
                l.op_gbps.push(f64::from(r[r.len() / 2]));
            }
        }
        LinkSample::merge_all(&mut kept, &op);
    }

    fn snooze(
        &self,
        wait: &mut Wait,
        said: &mut Option<(usize, usize, WaitKind)>,
        c: &Compiled,
        pcs: &[usize],
    ) -> Result<(), ExecError> {
        let mut tell = |now: Option<(usize, usize, WaitKind)>| {
            if let (Some((ch, peer, kind)), true) = (now, now != *said) {
                self.observer.waiting(ch, peer, kind);
                *said = now;
            }
        };
        if wait.spins == wait.limit {
            // Now blocked for longer than a spin: say on what.
            tell(blocked_on(c, pcs));
        }
        if !wait.snooze() {
            return Ok(());
        }
        // Still blocked: on another peer of the step, where the one before
        // delivered (a step that receives from several).
        tell(blocked_on(c, pcs));
        if self.world.aborted() {
            return Err(ExecError::Aborted);
        }
        let waited = wait.elapsed();
        if waited >= self.world.options().timeout {
            return Err(self.blocked(c, pcs, waited));
        }
        Ok(())
    }

    /// Describes the first blocked step.
    fn blocked(&self, c: &Compiled, pcs: &[usize], waited: Duration) -> ExecError {
        let (channel, peer, kind) = blocked_on(c, pcs).unwrap_or((0, self.rank, WaitKind::Drain));
        let step = pcs.get(channel).copied().unwrap_or(0);
        let prim = c
            .channels
            .get(channel)
            .and_then(|s| s.get(step))
            .map_or("drain", |x| x.step.prim.name());
        ExecError::Timeout {
            rank: self.rank,
            channel,
            step,
            prim,
            what: match kind {
                WaitKind::Recv => "receive from",
                WaitKind::Send => "send to",
                WaitKind::Drain => "be read by",
            },
            peer,
            waited,
        }
    }
}

/// One operation's measurements of its incoming links (`--links`), and
/// the slowing of the links a fault injection slows.
struct Meter {
    /// Per channel: since when its current step is blocked, and which of
    /// its receives (bits, by position in the step) had not arrived then.
    blocked: Vec<Option<(Instant, u8)>>,
    /// Per incoming FIFO.
    bytes: Vec<u64>,
    wait_ns: Vec<u64>,
    transfer_ns: Vec<u64>,
    /// Per incoming FIFO, GB/s of each step (bytes over its own time): their
    /// median is what a step moves when nothing preempts it.
    step_gbps: Vec<Vec<f32>>,
}

/// Steps per link and operation whose rates are kept for the median.
const STEP_SAMPLES: usize = 4096;

impl Meter {
    fn new(c: &Compiled, channels: usize) -> Meter {
        Meter {
            blocked: vec![None; channels],
            bytes: vec![0; c.ins.len()],
            wait_ns: vec![0; c.ins.len()],
            transfer_ns: vec![0; c.ins.len()],
            step_gbps: vec![Vec::new(); c.ins.len()],
        }
    }

    /// Channel `ch`'s step `x` is not ready: from now on, until it runs,
    /// it waits for the receives that have not arrived.
    fn blocked(&mut self, ch: usize, c: &Compiled, x: &XStep) {
        if self.blocked[ch].is_some() {
            return;
        }
        let mut missing = 0u8;
        for (k, &i) in x.recv[..x.step.recv.len()].iter().enumerate() {
            if c.ins[i as usize].peek().is_none() {
                missing |= 1 << k;
            }
        }
        self.blocked[ch] = Some((Instant::now(), missing));
    }

    /// Step `x` of channel `ch` starts: its wait, if any, ends.
    fn start(&mut self, ch: usize, x: &XStep) -> Instant {
        let now = Instant::now();
        if let Some((since, missing)) = self.blocked[ch].take() {
            let waited = now.duration_since(since).as_nanos() as u64;
            for (k, &i) in x.recv[..x.step.recv.len()].iter().enumerate() {
                if missing & (1 << k) != 0 {
                    self.wait_ns[i as usize] += waited;
                }
            }
        }
        now
    }

    /// Step `x`, begun at `began`, is done: stretched as long as its
    /// slowest slowed sender makes it, and counted against each sender.
    fn end(&mut self, c: &Compiled, x: &XStep, began: Instant) {
        let recv = &x.recv[..x.step.recv.len()];
        if recv.is_empty() {
            return;
        }
        let factor = recv
            .iter()
            .map(|&i| c.in_pace[i as usize])
            .fold(1.0, f64::max);
        stretch(began, factor);
        let took = began.elapsed().as_nanos() as u64;
        let bytes = (x.step.len * c.dtype.size()) as u64;
        for &i in recv {
            let i = i as usize;
            self.bytes[i] += bytes;
            self.transfer_ns[i] += took;
            if took > 0 && self.step_gbps[i].len() < STEP_SAMPLES {
                self.step_gbps[i].push(bytes as f32 / took as f32);
            }
        }
    }
}

/// The first blocked step: (channel, peer, what it waits for).
fn blocked_on(c: &Compiled, pcs: &[usize]) -> Option<(usize, usize, WaitKind)> {
    for (ch, steps) in c.channels.iter().enumerate() {
        let Some(x) = steps.get(pcs[ch]) else {
            continue;
        };
        let recv = x
            .step
            .recv
            .iter()
            .zip(x.recv)
            .find(|(_, i)| c.ins[*i as usize].peek().is_none());
        if let Some((p, _)) = recv {
            return Some((ch, p.rank as usize, WaitKind::Recv));
        }
        let send = x
            .step
            .send
            .iter()
            .zip(x.send)
            .find(|(_, i)| !c.outs[*i as usize].can_send());
        if let Some((p, _)) = send {
            return Some((ch, p.rank as usize, WaitKind::Send));
        }
    }
    c.outs
        .iter()
        .position(|f| !f.drained())
        .map(|i| (0, c.out_peers[i], WaitKind::Drain))
}

fn ready(c: &Compiled, x: &XStep) -> bool {
    let nr = x.step.recv.len();
    let ns = x.step.send.len();
    x.recv[..nr]
        .iter()
        .all(|&i| c.ins[i as usize].peek().is_some())
        && x.send[..ns].iter().all(|&i| c.outs[i as usize].can_send())
}

/// Address of a slice.
fn at(c: &Compiled, bases: &[*mut u8; 3], s: Slice) -> *mut u8 {
    let (b, off) = c.layout.resolve(s);
    let b = match s.buf {
        Buf::Scratch => 2,
        _ => b,
    };
    bases[b].wrapping_add(off * c.dtype.size())
}

/// Receives at least this large are copied with non-temporal stores.
const STREAM_MIN: usize = 64 << 10;

/// Copies `bytes` from `src` to `dst` with non-temporal stores where the
/// target has them (x86-64: SSE2), else a plain copy.
///
/// # Safety
/// Both ranges are valid for `bytes` and do not overlap.
unsafe fn stream_copy(dst: *mut u8, src: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let head = dst.align_offset(16).min(bytes);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let body = (bytes - head) / 64 * 64;
        let mut i = head;
        while i < head + body {
            for j in (0..64).step_by(16) {
                let v = _mm_loadu_si128(src.add(i + j) as *const __m128i);
                _mm_stream_si128(dst.add(i + j) as *mut __m128i, v);
            }
            i += 64;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), bytes - i);
        // Streamed stores are weakly ordered: make them visible before the
        // slot is released and the operation completes.
        _mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::ptr::copy_nonoverlapping(src, dst, bytes);
}

/// Runs one ready step.
///
/// # Safety
/// `ready(c, x)` holds, and the slices lie inside the buffers at `bases`.
unsafe fn exec(c: &Compiled, x: &XStep, bases: &[*mut u8; 3]) {
    let s = &x.step;
    let bytes = s.len * c.dtype.size();
    let mut inputs = [std::ptr::null::<u8>(); MAX_PEERS + 2];
    let mut k = 0;
    if let Some(src) = s.src {
        inputs[k] = at(c, bases, src);
        k += 1;
    }
    if s.prim == Prim::LocalReduce {
        if let Some(d) = s.dst {
            inputs[k] = at(c, bases, d);
            k += 1;
        }
    }
    for &i in &x.recv[..s.recv.len()] {
        if let Some(m) = c.ins[i as usize].peek() {
            inputs[k] = m.ptr;
            k += 1;
        }
    }
    let outs = &x.send[..s.send.len()];
    let plain_send = s.prim == Prim::Send && x.direct;
    let target = match s.dst {
        Some(d) => at(c, bases, d),
        None if plain_send => inputs[0] as *mut u8,
        None => c.outs[outs[0] as usize].send_buffer(bytes),
    };
    if !plain_send {
        if x.pre {
            elem::reduce_premul(c.dtype, c.scalar, target, &inputs[..k], s.len);
        } else if s.prim == Prim::Recv && bytes >= STREAM_MIN && !s.finish {
            // A final receive: nothing reads this output again in the
            // operation, so stream it past the caches (no read for ownership).
            stream_copy(target, inputs[0], bytes);
        } else if !(k == 1 && std::ptr::eq(inputs[0], target)) {
            elem::reduce(c.dtype, c.op, target, &inputs[..k], s.len);
        }
        if s.finish {
            elem::finish(c.dtype, c.op, c.nranks, target, s.len);
        }
    }
    for (j, &o) in outs.iter().enumerate() {
        let fifo = &c.outs[o as usize];
        if x.direct {
            fifo.post(bytes, Some(target));
        } else if j == 0 && s.dst.is_none() {
            fifo.post(bytes, None);
        } else {
            std::ptr::copy_nonoverlapping(target, fifo.send_buffer(bytes), bytes);
            fifo.post(bytes, None);
        }
    }
    for &i in &x.recv[..s.recv.len()] {
        c.ins[i as usize].release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::algo::{ChannelProgram, Slice, Step};
    use crate::engine::types::{Collective, Placement};

    fn program(steps: Vec<Step>) -> Program {
        Program {
            rank: 0,
            nranks: 1,
            channels: vec![ChannelProgram { steps }],
            scratch: 0,
        }
    }

    #[test]
    fn a_slice_outside_its_buffer_is_refused_before_running() {
        let world = HostWorld::new(1, HostOptions::default());
        let counts = Collective::AllReduce.counts(64, 4, 1);
        let layout = Layout::new(Collective::AllReduce, counts, Placement::OutOfPlace, 0);
        let ok = program(vec![Step::copy(Slice::send(0), Slice::recv(0), 16)]);
        assert!(Compiled::new(&world, &ok, layout, Dtype::F32, ReduceOp::Sum, 0).is_ok());
        let bad = program(vec![Step::copy(Slice::send(8), Slice::recv(0), 16)]);
        let err = Compiled::new(&world, &bad, layout, Dtype::F32, ReduceOp::Sum, 0)
            .err()
            .unwrap();
        assert!(err.to_string().contains("64-byte buffer"), "{err}");
        let scratch = program(vec![Step::copy(Slice::send(0), Slice::scratch(0), 4)]);
        assert!(Compiled::new(&world, &scratch, layout, Dtype::F32, ReduceOp::Sum, 0).is_err());
    }

    #[test]
    fn buffers_smaller_than_the_program_needs_are_refused() {
        let world = HostWorld::new(1, HostOptions::default());
        let counts = Collective::AllReduce.counts(4096, 4, 1);
        let layout = Layout::new(Collective::AllReduce, counts, Placement::OutOfPlace, 0);
        let p = program(vec![Step::copy(Slice::send(0), Slice::recv(0), 1024)]);
        let c = Compiled::new(&world, &p, layout, Dtype::F32, ReduceOp::Sum, 0).unwrap();
        let exec = RankExec::new(
            Arc::clone(&world),
            0,
            Arc::new(crate::engine::observe::Unobserved),
        );
        let (a, small) = (HostBuf::new(4096).unwrap(), HostBuf::new(64).unwrap());
        let err = exec
            .run(
                &c,
                &RankBufs {
                    bufs: [&a, &small, &small],
                },
            )
            .unwrap_err();
        assert!(err.to_string().contains("needs 4096"), "{err}");
        let b = HostBuf::new(4096).unwrap();
        assert!(exec
            .run(
                &c,
                &RankBufs {
                    bufs: [&a, &b, &small]
                }
            )
            .is_ok());
    }
}
