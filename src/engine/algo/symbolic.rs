//! The symbolic executor: runs every rank's [`Program`] for a case where
//! each element is a multiset of (rank, index) contributions, over FIFOs of
//! bounded depth, and checks the outputs against the collective's meaning.
//! It proves, for one case: no deadlock, matching sends and receives, no
//! read of an unwritten element, no element counted twice or missed, the
//! finishing step applied exactly once where a reduction ends, every
//! rank's input entering a reduction through its send view exactly once
//! (where premulsum scales it: a contribution read through another view,
//! or read again once written back, would be scaled never or twice), and
//! out-of-place inputs left untouched.

use super::group::{generate_group, Shift};
use super::program::{Layout, Program, Slice, Step};
use super::{generate, AlgoError, Buf, Spec};
use crate::engine::types::{Algo, Collective, Counts, Placement};
use std::collections::{HashMap, VecDeque};

/// A symbolic element: sorted (rank << 32 | index) contributions and how
/// many times the finishing step ran on it. `None` is never written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sym {
    pub parts: Vec<u64>,
    pub finished: u8,
}

type Val = Option<Sym>;

/// The shallowest FIFO an executor may use: a ring step that receives and
/// sends at once deadlocks at depth 1 (both neighbours hold a full slot).
pub const MIN_SLOTS: usize = 2;

fn contrib(rank: usize, index: usize) -> u64 {
    ((rank as u64) << 32) | index as u64
}

/// The mark a contribution gets when a reduction reads it through the send
/// view (where executors apply premulsum's scalar).
const SCALED: u64 = 1 << 63;

/// One case to prove.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub coll: Collective,
    pub algo: Algo,
    pub nranks: usize,
    pub root: usize,
    pub counts: Counts,
    pub placement: Placement,
    pub channels: usize,
    pub chunk: usize,
    /// FIFO depth in messages. A proof at depth d holds for any deeper FIFO
    /// (more buffering only adds schedules); executors use at least [`MIN_SLOTS`].
    pub slots: usize,
}

/// A group member's contributions are told apart by this much added to
/// their index (cases here stay far below it).
const MEMBER_STRIDE: usize = 1 << 24;

struct RankState {
    layout: Layout,
    mem: [Vec<Val>; 3],
    program: Program,
    pc: Vec<usize>,
    /// Each member's shift (one, zero, for a single operation).
    shifts: Vec<Shift>,
    /// Elements of the program's send and receive views.
    send_len: usize,
    recv_len: usize,
}

type ConnKey = (usize, usize, u32);

/// Why a case is not proved: the first check that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// No program for a rank.
    #[error(transparent)]
    Generate(#[from] AlgoError),
    /// A step failed: where, and why.
    #[error("rank {rank} channel {channel} step {index} ({step}): {source}")]
    Step {
        rank: usize,
        channel: usize,
        index: usize,
        /// The step, as it prints.
        step: String,
        source: Box<ProofError>,
    },
    /// No rank can make progress; each blocked step as ` [rank r ch c step i: step]`.
    #[error("deadlock:{0}")]
    Deadlock(String),
    #[error("{count} unreceived message(s) on {conn:?}")]
    Unreceived { count: usize, conn: ConnKey },
    #[error("connection {conn:?} used by channels {first} and {second} of rank {rank}")]
    SharedConnection {
        conn: ConnKey,
        first: usize,
        second: usize,
        rank: usize,
    },
    #[error("{buf:?} slice {off}+{len} out of bounds")]
    OutOfBounds { buf: Buf, off: usize, len: usize },
    #[error("received {got} elements, step expects {want}")]
    Length { got: usize, want: usize },
    #[error("a copying step with {0} inputs")]
    CopyInputs(usize),
    #[error("a reducing step with {0} input(s)")]
    ReduceInputs(usize),
    /// A step that breaks a rule of the vocabulary (e.g. reads an unwritten element).
    #[error("{0}")]
    Malformed(&'static str),
    #[error("rank {rank} recv[{index}]: expected {expected:?} finished {finished}, got {got:?}")]
    WrongOutput {
        rank: usize,
        index: usize,
        expected: Vec<u64>,
        finished: u8,
        got: Val,
    },
    #[error("rank {rank} send[{index}] was modified")]
    InputModified { rank: usize, index: usize },
}

/// Runs the case; `Ok(steps executed)` when every check holds.
pub fn prove(case: &Case) -> Result<usize, ProofError> {
    prove_group(std::slice::from_ref(case))
}

/// Runs a group of operations issued together (the same ranks, placement,
/// channels, chunk and FIFO depth), as one merged program per rank, and
/// checks every member's outputs as [`prove`] checks one operation's.
pub fn prove_group(members: &[Case]) -> Result<usize, ProofError> {
    let ranks = setup_group(members)?;
    check_single_writer(&ranks)?;
    run_group(members, ranks)
}

#[cfg(test)]
fn run(case: &Case, ranks: Vec<RankState>) -> Result<usize, ProofError> {
    run_group(std::slice::from_ref(case), ranks)
}

fn run_group(members: &[Case], mut ranks: Vec<RankState>) -> Result<usize, ProofError> {
    let case = members
        .first()
        .ok_or(ProofError::Malformed("a group of no operations"))?;
    let mut conns: HashMap<ConnKey, VecDeque<Vec<Val>>> = HashMap::new();
    let mut executed = 0;
    loop {
        let mut progress = false;
        let mut all_done = true;
        for (r, st) in ranks.iter_mut().enumerate() {
            for c in 0..st.program.channels.len() {
                while let Some(step) = st.program.channels[c].steps.get(st.pc[c]).copied() {
                    if !ready(case, &conns, r, &step) {
                        all_done = false;
                        break;
                    }
                    exec(members, st, &mut conns, r, &step).map_err(|e| ProofError::Step {
                        rank: r,
                        channel: c,
                        index: st.pc[c],
                        step: step.to_string(),
                        source: Box::new(e),
                    })?;
                    st.pc[c] += 1;
                    executed += 1;
                    progress = true;
                }
            }
        }
        if all_done {
            break;
        }
        if !progress {
            return Err(deadlock_report(&ranks));
        }
    }
    if let Some((k, q)) = conns.iter().find(|(_, q)| !q.is_empty()) {
        return Err(ProofError::Unreceived {
            count: q.len(),
            conn: *k,
        });
    }
    for (r, st) in ranks.iter().enumerate() {
        for (k, m) in members.iter().enumerate() {
            check_outputs(m, k, r, st)?;
        }
    }
    Ok(executed)
}

#[cfg(test)]
fn setup(case: &Case) -> Result<Vec<RankState>, ProofError> {
    setup_group(std::slice::from_ref(case))
}

fn setup_group(members: &[Case]) -> Result<Vec<RankState>, ProofError> {
    let case = members
        .first()
        .ok_or(ProofError::Malformed("a group of no operations"))?;
    (0..case.nranks)
        .map(|rank| {
            let specs: Vec<Spec> = members
                .iter()
                .map(|m| Spec {
                    coll: m.coll,
                    algo: m.algo,
                    nranks: m.nranks,
                    rank,
                    root: m.root,
                    counts: m.counts,
                    placement: m.placement,
                    channels: m.channels,
                    chunk: m.chunk,
                })
                .collect();
            let (program, layout, shifts) = match specs.as_slice() {
                [one] => (
                    generate(one)?,
                    Layout::new(one.coll, one.counts, one.placement, rank),
                    vec![Shift::default()],
                ),
                _ => generate_group(&specs)?,
            };
            let mut mem = [
                vec![None; layout.buf0],
                vec![None; layout.buf1],
                vec![None; program.scratch],
            ];
            let (mut send_len, mut recv_len) = (0, 0);
            for (k, (m, sh)) in members.iter().zip(&shifts).enumerate() {
                let (sends, recvs) = (m.counts.send_of(rank), m.counts.recv_of(rank));
                send_len = send_len.max(sh.send + sends);
                recv_len = recv_len.max(sh.recv + recvs);
                for i in 0..sends {
                    let (b, o) = layout.resolve(sh.apply(Slice::send(i)));
                    mem[b][o] = Some(Sym {
                        parts: vec![contrib(rank, k * MEMBER_STRIDE + i)],
                        finished: 0,
                    });
                }
            }
            let pc = vec![0; program.channels.len()];
            Ok(RankState {
                layout,
                mem,
                program,
                pc,
                shifts,
                send_len,
                recv_len,
            })
        })
        .collect()
}

/// Each outgoing and incoming connection end belongs to one channel program.
fn check_single_writer(ranks: &[RankState]) -> Result<(), ProofError> {
    let mut owner: HashMap<(bool, ConnKey), usize> = HashMap::new();
    for (r, st) in ranks.iter().enumerate() {
        for (c, ch) in st.program.channels.iter().enumerate() {
            for step in &ch.steps {
                let sends = step
                    .send
                    .iter()
                    .map(|p| (true, (r, p.rank as usize, p.chan)));
                let recvs = step
                    .recv
                    .iter()
                    .map(|p| (false, (p.rank as usize, r, p.chan)));
                for key in sends.chain(recvs) {
                    let prev = *owner.entry(key).or_insert(c);
                    if prev != c {
                        return Err(ProofError::SharedConnection {
                            conn: key.1,
                            first: prev,
                            second: c,
                            rank: r,
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

fn ready(case: &Case, conns: &HashMap<ConnKey, VecDeque<Vec<Val>>>, r: usize, step: &Step) -> bool {
    let depth = |k: ConnKey| conns.get(&k).map_or(0, |q| q.len());
    step.recv
        .iter()
        .all(|p| depth((p.rank as usize, r, p.chan)) > 0)
        && step
            .send
            .iter()
            .all(|p| depth((r, p.rank as usize, p.chan)) < case.slots)
}

fn view_len(st: &RankState, s: Slice) -> usize {
    match s.buf {
        super::Buf::Send => st.send_len,
        super::Buf::Recv => st.recv_len,
        super::Buf::Scratch => st.program.scratch,
    }
}

/// Whether the member whose send view holds element `off` of the group's reduces.
fn reducing_input(members: &[Case], st: &RankState, off: usize) -> bool {
    let r = st.program.rank;
    members
        .iter()
        .zip(&st.shifts)
        .any(|(m, sh)| m.coll.reduces() && (sh.send..sh.send + m.counts.send_of(r)).contains(&off))
}

fn read(st: &RankState, s: Slice, len: usize) -> Result<Vec<Val>, ProofError> {
    if s.off + len > view_len(st, s) {
        return Err(ProofError::OutOfBounds {
            buf: s.buf,
            off: s.off,
            len,
        });
    }
    let (b, o) = st.layout.resolve(s);
    Ok(st.mem[b][o..o + len].to_vec())
}

fn exec(
    members: &[Case],
    st: &mut RankState,
    conns: &mut HashMap<ConnKey, VecDeque<Vec<Val>>>,
    r: usize,
    step: &Step,
) -> Result<(), ProofError> {
    let mut inputs: Vec<Vec<Val>> = Vec::new();
    if let Some(s) = step.src {
        let mut v = read(st, s, step.len)?;
        if s.buf == Buf::Send && reducing_input(members, st, s.off) {
            for p in v.iter_mut().flatten().flat_map(|x| x.parts.iter_mut()) {
                if *p & SCALED != 0 {
                    return Err(ProofError::Malformed(
                        "reads a reduced value through the send view (premulsum would scale it twice)",
                    ));
                }
                *p |= SCALED;
            }
        }
        inputs.push(v);
    }
    if step.prim == super::Prim::LocalReduce {
        let d = step
            .dst
            .ok_or(ProofError::Malformed("local-reduce without dst"))?;
        inputs.push(read(st, d, step.len)?);
    }
    for p in step.recv.iter() {
        let msg = conns
            .get_mut(&(p.rank as usize, r, p.chan))
            .and_then(|q| q.pop_front())
            .ok_or(ProofError::Malformed("receive from an empty connection"))?;
        if msg.len() != step.len {
            return Err(ProofError::Length {
                got: msg.len(),
                want: step.len,
            });
        }
        inputs.push(msg);
    }
    let mut out = combine(step, inputs)?;
    if step.finish {
        for v in out.iter_mut() {
            v.as_mut()
                .ok_or(ProofError::Malformed("finish on an unwritten element"))?
                .finished += 1;
        }
    }
    if let Some(d) = step.dst {
        if d.off + step.len > view_len(st, d) {
            return Err(ProofError::OutOfBounds {
                buf: d.buf,
                off: d.off,
                len: step.len,
            });
        }
        let (b, o) = st.layout.resolve(d);
        st.mem[b][o..o + step.len].clone_from_slice(&out);
    }
    for p in step.send.iter() {
        conns
            .entry((r, p.rank as usize, p.chan))
            .or_default()
            .push_back(out.clone());
    }
    if step.dst.is_none() && step.send.is_empty() {
        return Err(ProofError::Malformed("step writes nothing"));
    }
    Ok(())
}

fn combine(step: &Step, inputs: Vec<Vec<Val>>) -> Result<Vec<Val>, ProofError> {
    let reduces = step.prim.reduces();
    match (reduces, inputs.len()) {
        (false, 1) => {}
        (false, k) => return Err(ProofError::CopyInputs(k)),
        (true, k) if k < 2 => return Err(ProofError::ReduceInputs(k)),
        _ => {}
    }
    let mut it = inputs.into_iter();
    let mut acc = it.next().unwrap_or_default();
    if !reduces {
        return Ok(acc);
    }
    for next in it {
        for (a, b) in acc.iter_mut().zip(next) {
            let (Some(x), Some(y)) = (a.as_mut(), b) else {
                return Err(ProofError::Malformed("reduces an unwritten element"));
            };
            if x.finished > 0 || y.finished > 0 {
                return Err(ProofError::Malformed("reduces an already finished value"));
            }
            x.parts.extend(y.parts);
            x.parts.sort_unstable();
        }
    }
    Ok(acc)
}

fn deadlock_report(ranks: &[RankState]) -> ProofError {
    let mut s = String::new();
    for (r, st) in ranks.iter().enumerate() {
        for (c, ch) in st.program.channels.iter().enumerate() {
            if let Some(step) = ch.steps.get(st.pc[c]) {
                s.push_str(&format!(" [rank {r} ch {c} step {}: {step}]", st.pc[c]));
            }
        }
    }
    ProofError::Deadlock(s)
}

/// Where rank `r`'s blocks come from: every rank's block in the gathered
/// buffer, and (all-to-all) where each rank's block for `r` lies in `r`'s
/// receive buffer and in the sender's send buffer.
struct Geometry {
    blocks: Vec<(usize, usize)>,
    recvs: Vec<(usize, usize)>,
    from: Vec<usize>,
}

impl Geometry {
    fn new(case: &Case, r: usize) -> Geometry {
        let (n, c) = (case.nranks, case.counts);
        Geometry {
            blocks: c.blocks(n),
            recvs: c.recvs(r, n),
            from: (0..n).map(|q| c.sends(q, n)[r].0).collect(),
        }
    }

    /// The block of `spans` holding element `i`, and `i`'s place in it.
    fn find(spans: &[(usize, usize)], i: usize) -> (usize, usize) {
        let q = spans.partition_point(|&(o, l)| o + l <= i);
        (q, i - spans.get(q).map_or(0, |s| s.0))
    }
}

/// What element `i` of rank `r`'s receive buffer must hold, if defined.
fn expected(case: &Case, g: &Geometry, r: usize, i: usize) -> Option<Vec<u64>> {
    let (n, root) = (case.nranks, case.root);
    let all = |idx: usize| (0..n).map(|q| contrib(q, idx)).collect::<Vec<_>>();
    let block = |i: usize| {
        let (q, k) = Geometry::find(&g.blocks, i);
        vec![contrib(q, k)]
    };
    let v = match case.coll {
        Collective::AllReduce => all(i),
        Collective::AllGather | Collective::AllGatherV => block(i),
        Collective::ReduceScatter | Collective::ReduceScatterV => all(g.blocks[r].0 + i),
        Collective::Broadcast => vec![contrib(root, i)],
        Collective::Reduce if r == root => all(i),
        Collective::AllToAll | Collective::AllToAllV => {
            let (q, k) = Geometry::find(&g.recvs, i);
            vec![contrib(q, g.from[q] + k)]
        }
        Collective::Gather if r == root => block(i),
        Collective::Scatter => vec![contrib(root, g.blocks[r].0 + i)],
        Collective::SendRecv => vec![contrib(
            crate::engine::types::send_recv_peers(r, n, root).1,
            i,
        )],
        Collective::Reduce | Collective::Gather => return None,
    };
    Some(v)
}

/// Checks member `k`'s (`case`'s) outputs and inputs on rank `r`.
fn check_outputs(case: &Case, k: usize, r: usize, st: &RankState) -> Result<(), ProofError> {
    let want_finish = u8::from(case.coll.reduces());
    // Reductions: every contribution read through its rank's send view.
    let mark = if case.coll.reduces() { SCALED } else { 0 };
    let g = Geometry::new(case, r);
    let (sh, tag) = (st.shifts[k], (k * MEMBER_STRIDE) as u64);
    for i in 0..case.counts.recv_of(r) {
        let Some(mut want) = expected(case, &g, r, i) else {
            continue;
        };
        for p in want.iter_mut() {
            *p = (*p + tag) | mark;
        }
        want.sort_unstable();
        let (b, o) = st.layout.resolve(sh.apply(Slice::recv(i)));
        match &st.mem[b][o] {
            Some(v) if v.parts == want && v.finished == want_finish => {}
            got => {
                return Err(ProofError::WrongOutput {
                    rank: r,
                    index: i,
                    expected: want,
                    finished: want_finish,
                    got: got.clone(),
                })
            }
        }
    }
    if case.placement == Placement::OutOfPlace {
        for i in 0..case.counts.send_of(r) {
            let (b, o) = st.layout.resolve(sh.apply(Slice::send(i)));
            let mine = contrib(r, k * MEMBER_STRIDE + i);
            let ok = matches!(&st.mem[b][o], Some(v) if v.parts == [mine] && v.finished == 0);
            if !ok {
                return Err(ProofError::InputModified { rank: r, index: i });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prove_all(coll: Collective, algo: Algo, n: usize, bytes: &[u64]) {
        // Send-recv's root is its peer offset: every one is a program.
        let roots: Vec<usize> = if coll.rooted() || coll == Collective::SendRecv {
            (0..n).collect()
        } else {
            vec![0]
        };
        for &b in bytes {
            for &root in &roots {
                for placement in [Placement::OutOfPlace, Placement::InPlace] {
                    for (channels, chunk) in [(1, 3), (2, 2), (3, 64)] {
                        let case = Case {
                            coll,
                            algo,
                            nranks: n,
                            root,
                            counts: coll.counts(b, 1, n),
                            placement,
                            channels,
                            chunk,
                            slots: MIN_SLOTS,
                        };
                        if let Err(e) = prove(&case) {
                            panic!("{coll} {algo} n={n} root={root} bytes={b} {placement:?} channels={channels} chunk={chunk}: {e}");
                        }
                    }
                }
            }
        }
    }

    /// Every generator, every collective, every rank count 1..=16, every root.
    #[test]
    fn every_generator_is_correct_for_1_to_16_ranks() {
        for coll in Collective::ALL {
            for &algo in coll.algos() {
                for n in 1..=16 {
                    // sizes: nothing, less than one element per rank, uneven, several loops
                    prove_all(
                        coll,
                        algo,
                        n,
                        &[0, (n as u64) / 2, 7 * n as u64 + 5, 23 * n as u64],
                    );
                }
            }
        }
    }

    /// The v-collectives' generators for 1..=16 ranks, under every kind
    /// of split (blocks of zero elements included: a skew over few
    /// elements, a hot rank), both placements, several channel and chunk
    /// shapes.
    #[test]
    fn every_v_generator_is_correct_for_1_to_16_ranks() {
        use crate::engine::split::Split;
        for coll in Collective::V {
            for &algo in coll.algos() {
                for n in 1..=16 {
                    for split in [Split::Uniform, Split::Skew(5), Split::Hot(n / 2)] {
                        for b in [0, n as u64 / 2, 7 * n as u64 + 5, 23 * n as u64] {
                            for placement in [Placement::OutOfPlace, Placement::InPlace] {
                                for (channels, chunk) in [(1, 3), (2, 2), (3, 64)] {
                                    let case = Case {
                                        coll,
                                        algo,
                                        nranks: n,
                                        root: 0,
                                        counts: coll.counts_split(b, 1, n, split),
                                        placement,
                                        channels,
                                        chunk,
                                        slots: MIN_SLOTS,
                                    };
                                    if let Err(e) = prove(&case) {
                                        panic!("{coll} {algo} n={n} {split} bytes={b} {placement:?} channels={channels} chunk={chunk}: {e}");
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Groups of operations issued together, merged into one program per
    /// rank: every (collective, algorithm) twice over (the same way shares
    /// its connections), and a mix of every way at once (each way on
    /// connections of its own, a tree's turn-around beside rings), for
    /// 1..=16 ranks, both placements.
    #[test]
    fn every_group_is_correct_for_1_to_16_ranks() {
        use crate::engine::split::Split;
        for n in 1..=16 {
            let ways: Vec<(Collective, Algo)> = Collective::EVERY
                .iter()
                .flat_map(|&c| c.algos().iter().map(move |&a| (c, a)))
                .collect();
            let mut groups: Vec<Vec<(Collective, Algo)>> =
                ways.iter().map(|&w| vec![w, w]).collect();
            groups.push(ways.clone());
            for group in &groups {
                for &b in &[7 * n as u64 + 5, 23 * n as u64] {
                    for placement in [Placement::OutOfPlace, Placement::InPlace] {
                        for (channels, chunk) in [(1, 3), (2, 2)] {
                            let members: Vec<Case> = group
                                .iter()
                                .enumerate()
                                .map(|(k, &(coll, algo))| Case {
                                    coll,
                                    algo,
                                    nranks: n,
                                    root: (k * 5) % n,
                                    // Members differ in size as well as kind.
                                    counts: coll.counts_split(
                                        b + k as u64,
                                        1,
                                        n,
                                        Split::Skew(k as u64),
                                    ),
                                    placement,
                                    channels,
                                    chunk,
                                    slots: MIN_SLOTS,
                                })
                                .collect();
                            if let Err(e) = prove_group(&members) {
                                let names: Vec<String> =
                                    group.iter().map(|(c, a)| format!("{c}/{a}")).collect();
                                panic!("group {names:?} n={n} bytes={b} {placement:?} channels={channels} chunk={chunk}: {e}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_group_whose_members_swap_buffers_is_caught() {
        let mk = |coll| Case {
            coll,
            algo: Algo::Ring,
            nranks: 3,
            root: 0,
            counts: Collective::AllReduce.counts(12, 1, 3),
            placement: Placement::OutOfPlace,
            channels: 1,
            chunk: 4,
            slots: MIN_SLOTS,
        };
        let members = [mk(Collective::AllReduce), mk(Collective::AllReduce)];
        assert!(prove_group(&members).is_ok());
        let mut ranks = setup_group(&members).unwrap();
        // Rank 1 writes member 0's output where member 1's goes.
        let st = &mut ranks[1];
        for s in st.program.channels[0].steps.iter_mut() {
            if let Some(d) = s.dst.as_mut() {
                if d.buf == Buf::Recv && d.off < 12 {
                    d.off += 12;
                } else if d.buf == Buf::Recv {
                    d.off -= 12;
                }
            }
        }
        let err = run_group(&members, ranks).unwrap_err().to_string();
        assert!(err.contains("recv[") || err.contains("expected"), "{err}");
    }

    fn small_case(coll: Collective, algo: Algo) -> Case {
        Case {
            coll,
            algo,
            nranks: 3,
            root: 0,
            counts: coll.counts(12, 1, 3),
            placement: Placement::OutOfPlace,
            channels: 1,
            chunk: 2,
            slots: MIN_SLOTS,
        }
    }

    #[test]
    fn detects_a_missing_contribution() {
        // Reduce-scatter whose last step forgets to reduce: checked by rewriting one step.
        let case = small_case(Collective::AllReduce, Algo::Ring);
        let mut ranks = setup(&case).unwrap();
        let st = &mut ranks[0];
        let step = st.program.channels[0]
            .steps
            .iter_mut()
            .find(|s| s.prim == super::super::Prim::RecvReduceCopySend)
            .unwrap();
        step.finish = false;
        // Run the mutated programs by hand through prove's machinery.
        let err = run(&case, ranks).unwrap_err().to_string();
        assert!(err.contains("finished"), "{err}");
    }

    #[test]
    fn detects_a_deadlock() {
        let case = small_case(Collective::SendRecv, Algo::Direct);
        let mut ranks = setup(&case).unwrap();
        // Rank 1 receives before it sends, and waits on itself forever if everyone does.
        for st in ranks.iter_mut() {
            st.program.channels[0].steps.reverse();
        }
        let err = run(&case, ranks).unwrap_err().to_string();
        assert!(
            err.contains("deadlock") || err.contains("expected"),
            "{err}"
        );
    }
}
