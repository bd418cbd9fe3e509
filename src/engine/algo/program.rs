//! The step-program IR: what one rank does on one channel, as a list of
//! primitive steps over slices of its buffers (NCCL's vocabulary).

use super::AlgoError;
use crate::engine::types::{Collective, Counts, Dtype, Placement};
use std::fmt;

/// A buffer of one rank, as the program sees it. In-place runs map `Send`
/// into the receive buffer (see [`Layout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buf {
    Send,
    Recv,
    Scratch,
}

/// `len` elements of a buffer starting at element `off` (len is the step's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub buf: Buf,
    pub off: usize,
}

impl Slice {
    pub fn send(off: usize) -> Slice {
        Slice {
            buf: Buf::Send,
            off,
        }
    }
    pub fn recv(off: usize) -> Slice {
        Slice {
            buf: Buf::Recv,
            off,
        }
    }
    pub fn scratch(off: usize) -> Slice {
        Slice {
            buf: Buf::Scratch,
            off,
        }
    }
}

/// The primitive a step performs. The name is documentation and diagnosis;
/// what a step does follows from its fields (see [`Step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prim {
    Send,
    Recv,
    RecvReduceSend,
    RecvReduceCopy,
    RecvCopySend,
    RecvReduceCopySend,
    Copy,
    LocalReduce,
}

impl Prim {
    pub fn name(self) -> &'static str {
        match self {
            Prim::Send => "send",
            Prim::Recv => "recv",
            Prim::RecvReduceSend => "recv-reduce-send",
            Prim::RecvReduceCopy => "recv-reduce-copy",
            Prim::RecvCopySend => "recv-copy-send",
            Prim::RecvReduceCopySend => "recv-reduce-copy-send",
            Prim::Copy => "copy",
            Prim::LocalReduce => "local-reduce",
        }
    }

    /// Whether received data is combined with the local source (vs copied).
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Prim::RecvReduceSend
                | Prim::RecvReduceCopy
                | Prim::RecvReduceCopySend
                | Prim::LocalReduce
        )
    }
}

/// A connection end: the peer rank and the connection's channel. A step may
/// use a connection of another channel than its own (a tree's root turns the
/// reduction around onto the broadcast channel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer {
    pub rank: u32,
    pub chan: u32,
}

pub const MAX_PEERS: usize = 4;

/// Up to [`MAX_PEERS`] connection ends, inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Peers {
    len: u8,
    items: [Option<Peer>; MAX_PEERS],
}

impl Peers {
    pub fn none() -> Peers {
        Peers::default()
    }

    pub fn one(rank: usize, chan: usize) -> Peers {
        Peers::of([(rank, chan)])
    }

    pub fn of(it: impl IntoIterator<Item = (usize, usize)>) -> Peers {
        let mut p = Peers::default();
        for (rank, chan) in it {
            let i = p.len as usize;
            assert!(i < MAX_PEERS, "a step talks to at most {MAX_PEERS} peers");
            p.items[i] = Some(Peer {
                rank: rank as u32,
                chan: chan as u32,
            });
            p.len += 1;
        }
        p
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = Peer> + '_ {
        self.items.iter().take(self.len as usize).flatten().copied()
    }
}

/// One primitive step. Its value is `src` combined with everything received
/// from `recv` (reduced when the primitive reduces, else the single input
/// copied), with the operator's finishing step applied when `finish` is set;
/// the value is written to `dst` (if any) and sent to every peer in `send`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub prim: Prim,
    /// Elements moved by this step (never 0).
    pub len: usize,
    pub src: Option<Slice>,
    pub dst: Option<Slice>,
    pub recv: Peers,
    pub send: Peers,
    /// Apply the reduction operator's finishing step (avg: divide by n).
    pub finish: bool,
}

impl Step {
    fn base(prim: Prim, len: usize) -> Step {
        Step {
            prim,
            len,
            src: None,
            dst: None,
            recv: Peers::none(),
            send: Peers::none(),
            finish: false,
        }
    }

    pub fn send(src: Slice, len: usize, to: Peers) -> Step {
        Step {
            src: Some(src),
            send: to,
            ..Step::base(Prim::Send, len)
        }
    }

    pub fn recv(from: Peers, dst: Slice, len: usize) -> Step {
        Step {
            dst: Some(dst),
            recv: from,
            ..Step::base(Prim::Recv, len)
        }
    }

    pub fn recv_reduce_send(from: Peers, src: Slice, len: usize, to: Peers) -> Step {
        Step {
            src: Some(src),
            recv: from,
            send: to,
            ..Step::base(Prim::RecvReduceSend, len)
        }
    }

    pub fn recv_reduce_copy(from: Peers, src: Slice, dst: Slice, len: usize) -> Step {
        Step {
            src: Some(src),
            dst: Some(dst),
            recv: from,
            ..Step::base(Prim::RecvReduceCopy, len)
        }
    }

    pub fn recv_copy_send(from: Peers, dst: Slice, len: usize, to: Peers) -> Step {
        Step {
            dst: Some(dst),
            recv: from,
            send: to,
            ..Step::base(Prim::RecvCopySend, len)
        }
    }

    pub fn recv_reduce_copy_send(
        from: Peers,
        src: Slice,
        dst: Slice,
        len: usize,
        to: Peers,
    ) -> Step {
        Step {
            src: Some(src),
            dst: Some(dst),
            recv: from,
            send: to,
            ..Step::base(Prim::RecvReduceCopySend, len)
        }
    }

    pub fn copy(src: Slice, dst: Slice, len: usize) -> Step {
        Step {
            src: Some(src),
            dst: Some(dst),
            ..Step::base(Prim::Copy, len)
        }
    }

    /// `dst = dst (op) src`.
    pub fn local_reduce(src: Slice, dst: Slice, len: usize) -> Step {
        Step {
            src: Some(src),
            dst: Some(dst),
            ..Step::base(Prim::LocalReduce, len)
        }
    }

    pub fn with_finish(mut self, finish: bool) -> Step {
        self.finish = finish;
        self
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} len={}", self.prim.name(), self.len)?;
        for p in self.recv.iter() {
            write!(f, " <-r{}c{}", p.rank, p.chan)?;
        }
        if let Some(s) = self.src {
            write!(f, " src={:?}+{}", s.buf, s.off)?;
        }
        if let Some(d) = self.dst {
            write!(f, " dst={:?}+{}", d.buf, d.off)?;
        }
        for p in self.send.iter() {
            write!(f, " ->r{}c{}", p.rank, p.chan)?;
        }
        if self.finish {
            f.write_str(" finish")?;
        }
        Ok(())
    }
}

/// The steps one rank runs on one channel, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelProgram {
    pub steps: Vec<Step>,
}

/// Everything one rank runs for one collective.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    pub rank: usize,
    pub nranks: usize,
    /// Indexed by channel; channel `c` owns the connections tagged `c`.
    pub channels: Vec<ChannelProgram>,
    /// Elements of scratch space the program needs.
    pub scratch: usize,
}

impl Program {
    pub fn step_count(&self) -> usize {
        self.channels.iter().map(|c| c.steps.len()).sum()
    }

    /// Bytes each physical buffer of `layout` needs for elements of `dtype`;
    /// a slice outside its view is an error (every executor checks this
    /// before it runs a program).
    pub fn bounds(&self, layout: &Layout, dtype: Dtype) -> Result<[usize; 3], AlgoError> {
        let sizes = [layout.buf0, layout.buf1, self.scratch];
        let mut need = sizes.map(|e| e * dtype.size());
        for step in self.channels.iter().flat_map(|c| &c.steps) {
            for s in [step.src, step.dst].into_iter().flatten() {
                let (b, off) = layout.resolve(s);
                let end = (off + step.len) * dtype.size();
                let limit = sizes[b] * dtype.size();
                if end > limit {
                    return Err(AlgoError::OutOfBounds(format!(
                        "step {step} reaches byte {end} of a {limit}-byte buffer"
                    )));
                }
                need[b] = need[b].max(end);
            }
        }
        Ok(need)
    }
}

/// Where the views `Send` and `Recv` lie in a rank's physical buffers.
/// Out-of-place: two buffers. In-place: one buffer holding both views at the
/// offsets NCCL uses (all-gather: send at `rank * block` of recv;
/// reduce-scatter and scatter: recv at `rank * block` of send; gather: send at
/// `rank * block` of recv; the rest: the same buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub placement: Placement,
    /// Elements of physical buffer 0 (the send buffer out-of-place, the only one in-place).
    pub buf0: usize,
    /// Elements of physical buffer 1 (the receive buffer out-of-place; 0 in-place).
    pub buf1: usize,
    /// (physical buffer, element offset) of the `Send` view.
    pub send_at: (usize, usize),
    /// (physical buffer, element offset) of the `Recv` view.
    pub recv_at: (usize, usize),
}

impl Layout {
    pub fn new(coll: Collective, counts: Counts, placement: Placement, rank: usize) -> Layout {
        let (send, recv) = (counts.send_of(rank), counts.recv_of(rank));
        // Where this rank's block lies in the gathered buffer.
        let own = match counts.v {
            Some(v) => counts.blocks(v.nranks).get(rank).map_or(0, |b| b.0),
            None => rank * counts.block,
        };
        match placement {
            Placement::OutOfPlace => Layout {
                placement,
                buf0: send,
                buf1: recv,
                send_at: (0, 0),
                recv_at: (1, 0),
            },
            Placement::InPlace => {
                let (size, send_off, recv_off) = match coll {
                    Collective::AllGather | Collective::Gather | Collective::AllGatherV => {
                        (recv, own, 0)
                    }
                    Collective::ReduceScatter
                    | Collective::Scatter
                    | Collective::ReduceScatterV => (send, 0, own),
                    _ => (send.max(recv), 0, 0),
                };
                Layout {
                    placement,
                    buf0: size,
                    buf1: 0,
                    send_at: (0, send_off),
                    recv_at: (0, recv_off),
                }
            }
        }
    }

    /// Physical (buffer, offset) of a view slice; scratch is buffer 2.
    pub fn resolve(&self, s: Slice) -> (usize, usize) {
        match s.buf {
            Buf::Send => (self.send_at.0, self.send_at.1 + s.off),
            Buf::Recv => (self.recv_at.0, self.recv_at.1 + s.off),
            Buf::Scratch => (2, s.off),
        }
    }

    /// Whether the `Send` and `Recv` views share memory.
    pub fn aliased(&self) -> bool {
        self.placement == Placement::InPlace
    }
}
