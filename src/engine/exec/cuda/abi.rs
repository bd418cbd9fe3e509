//! The host side of `kernels/abi.cuh`: `#[repr(C)]` twins of the structs
//! the collective kernel reads, and the translation of a rank's [`Program`]
//! into them (slices resolved to physical buffers, connections to table
//! indices), plus the layout of one connection's memory (flags and the two
//! slot rings) as both of its ends see it.
//! Pointers are `u64` addresses: device addresses on a GPU, host addresses
//! on the emulated device.

use crate::engine::algo::{Layout, Prim, Program, MAX_PEERS};
use crate::engine::types::Dtype;
use std::collections::HashMap;

pub const CB_REDUCE: u32 = 1;
pub const CB_FINISH: u32 = 2;
pub const CB_HAS_SRC: u32 = 4;
pub const CB_HAS_DST: u32 = 8;
pub const CB_DST_IN: u32 = 16;
/// Premulsum: `src` is the rank's input, multiplied by the scalar first.
pub const CB_PRE: u32 = 32;

/// Flag or'ed into [`CbRank::proto`]: connections outside this GPU's
/// memory, so the kernel orders its flags at system scope.
pub const PROTO_SYS: u32 = 0x100;

/// Which protocol a launch uses (the same for every rank of an operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Proto {
    /// Payload in slots, a release-stored tail per message: bandwidth.
    Simple = 0,
    /// Payload and sequence number in each 16-byte line: latency.
    LowLatency = 1,
    /// NCCL's LL128: 128-byte lines of 120 payload bytes and an 8-byte
    /// sequence number, written and read by 8 threads at once: most of the
    /// bandwidth of simple, without its flag round trip per slot.
    LowLatency128 = 2,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Simple => "simple",
            Proto::LowLatency => "ll",
            Proto::LowLatency128 => "ll128",
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CbStep {
    pub len: u64,
    pub src: u64,
    pub dst: u64,
    pub flags: u32,
    pub src_buf: u8,
    pub dst_buf: u8,
    pub nrecv: u8,
    pub nsend: u8,
    pub recv: [u16; MAX_PEERS],
    pub send: [u16; MAX_PEERS],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CbConn {
    pub tail: u64,
    pub head: u64,
    pub buf: u64,
    pub ll: u64,
    pub slot_bytes: u64,
    pub ll_slot_bytes: u64,
    pub slots: u32,
    pub peer: u32,
    /// LL128 slots: `slots` of `ll128_slot_bytes` (128-byte lines).
    pub ll128: u64,
    pub ll128_slot_bytes: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CbProgress {
    pub step: u64,
    /// 0: not waiting; 1 + peer: to receive; 1 + peer + 2^32: to send.
    pub wait_on: u64,
    pub pad: [u64; 2],
}

/// What a rank measured of one incoming connection (`--links`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CbLink {
    pub bytes: u64,
    pub wait_ns: u64,
    pub transfer_ns: u64,
    /// Steps receiving over it last `pace / 1000` times as long (fault injection).
    pub pace: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CbStatus {
    /// 0 running; 1 a rank is giving up (record being written); 2 record complete.
    pub abort: u64,
    pub rank: u64,
    pub channel: u64,
    pub step: u64,
    pub peer: u64,
    /// 1 receive, 2 send.
    pub kind: u64,
    pub waited_ns: u64,
    /// Nonzero: the host stopped the kernels. Only the host writes it;
    /// `abort` only the GPU the record belongs to (atomics on host-mapped
    /// memory hold among one GPU's threads, not between sides).
    pub stop: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CbRank {
    pub steps: u64,
    pub chan_start: u64,
    pub ins: u64,
    pub outs: u64,
    pub bufs: [u64; 3],
    pub progress: u64,
    pub status: u64,
    /// One [`CbLink`] per incoming connection, or 0: links not measured.
    pub links: u64,
    pub timeout_ns: u64,
    pub rank: u32,
    pub nranks: u32,
    pub proto: u32,
    pub nchannels: u32,
    /// Premulsum's scalar (bits of the element type).
    pub scalar: u64,
}

/// One direction of one connection: (sender, receiver, channel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnKey {
    pub from: usize,
    pub to: usize,
    pub chan: u32,
}

/// Why a program cannot be translated for the kernel.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// A slice lies outside its buffer.
    #[error(transparent)]
    Bounds(#[from] crate::engine::algo::AlgoError),
    /// More steps than the kernel's `u32` channel table holds.
    #[error("too many steps")]
    TooManySteps,
    /// A connection end used by two channels (the kernel keeps its
    /// counters per block).
    #[error("connection {from}->{to} (channel {chan}) is used by channels {first} and {second}")]
    SharedConnection {
        from: usize,
        to: usize,
        chan: u32,
        first: usize,
        second: usize,
    },
    /// More connections than the kernel's `u16` indices reach.
    #[error("more than 65535 connections")]
    TooManyConnections,
}

/// A rank's program as the kernel reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct RankTables {
    pub steps: Vec<CbStep>,
    /// `nchannels + 1` entries: channel c runs `steps[chan_start[c]..chan_start[c + 1]]`.
    pub chan_start: Vec<u32>,
    /// Incoming connections, in the order step `recv` indices use.
    pub ins: Vec<ConnKey>,
    /// Outgoing connections, in the order step `send` indices use.
    pub outs: Vec<ConnKey>,
    /// Bytes each physical buffer must hold.
    pub need: [usize; 3],
    /// The largest step that sends or receives (a message: it must fit a
    /// connection slot), in bytes; local copies may be any size.
    pub max_step_bytes: usize,
    /// The largest step with no peer (a local copy or reduction), in bytes.
    pub max_local_bytes: usize,
}

impl RankTables {
    /// Translates `program` (run on `layout`'s buffers) for the kernel.
    /// Fails if a slice lies outside its buffer, if a connection end is used
    /// by two channels (the kernel keeps its counters per block), or if the
    /// tables outgrow the kernel's index types. With `premul` (premulsum),
    /// every step whose source is the rank's input scales it.
    pub fn new(
        program: &Program,
        layout: &Layout,
        dtype: Dtype,
        premul: bool,
    ) -> Result<RankTables, TableError> {
        let need = program.bounds(layout, dtype)?;
        let rank = program.rank;
        let mut ins: Vec<ConnKey> = Vec::new();
        let mut outs: Vec<ConnKey> = Vec::new();
        let mut index: HashMap<(bool, ConnKey), (u16, usize)> = HashMap::new();
        let mut steps = Vec::with_capacity(program.step_count());
        let mut chan_start = Vec::with_capacity(program.channels.len() + 1);
        let (mut max_step_bytes, mut max_local_bytes) = (0, 0);
        for (c, ch) in program.channels.iter().enumerate() {
            chan_start.push(u32::try_from(steps.len()).map_err(|_| TableError::TooManySteps)?);
            for s in &ch.steps {
                let mut x = CbStep {
                    len: s.len as u64,
                    ..CbStep::default()
                };
                if !s.recv.is_empty() || !s.send.is_empty() {
                    max_step_bytes = max_step_bytes.max(s.len * dtype.size());
                } else {
                    max_local_bytes = max_local_bytes.max(s.len * dtype.size());
                }
                if s.prim.reduces() {
                    x.flags |= CB_REDUCE;
                }
                if s.finish {
                    x.flags |= CB_FINISH;
                }
                if let Some(src) = s.src {
                    let (b, off) = layout.resolve(src);
                    x.flags |= CB_HAS_SRC;
                    if premul && src.buf == crate::engine::algo::Buf::Send {
                        x.flags |= CB_PRE;
                    }
                    x.src_buf = b as u8;
                    x.src = off as u64;
                }
                if let Some(dst) = s.dst {
                    let (b, off) = layout.resolve(dst);
                    x.flags |= CB_HAS_DST;
                    x.dst_buf = b as u8;
                    x.dst = off as u64;
                    if s.prim == Prim::LocalReduce {
                        x.flags |= CB_DST_IN;
                    }
                }
                for (k, p) in s.recv.iter().enumerate() {
                    let key = ConnKey {
                        from: p.rank as usize,
                        to: rank,
                        chan: p.chan,
                    };
                    x.recv[k] = slot(&mut index, &mut ins, false, key, c)?;
                }
                for (k, p) in s.send.iter().enumerate() {
                    let key = ConnKey {
                        from: rank,
                        to: p.rank as usize,
                        chan: p.chan,
                    };
                    x.send[k] = slot(&mut index, &mut outs, true, key, c)?;
                }
                x.nrecv = s.recv.len() as u8;
                x.nsend = s.send.len() as u8;
                steps.push(x);
            }
        }
        chan_start.push(u32::try_from(steps.len()).map_err(|_| TableError::TooManySteps)?);
        Ok(RankTables {
            steps,
            chan_start,
            ins,
            outs,
            need,
            max_step_bytes,
            max_local_bytes,
        })
    }

    pub fn nchannels(&self) -> usize {
        self.chan_start.len().saturating_sub(1)
    }
}

fn slot(
    index: &mut HashMap<(bool, ConnKey), (u16, usize)>,
    list: &mut Vec<ConnKey>,
    out: bool,
    key: ConnKey,
    chan: usize,
) -> Result<u16, TableError> {
    if let Some(&(i, owner)) = index.get(&(out, key)) {
        if owner != chan {
            return Err(TableError::SharedConnection {
                from: key.from,
                to: key.to,
                chan: key.chan,
                first: owner,
                second: chan,
            });
        }
        return Ok(i);
    }
    let i = u16::try_from(list.len()).map_err(|_| TableError::TooManyConnections)?;
    list.push(key);
    index.insert((out, key), (i, chan));
    Ok(i)
}

/// Shape of every connection's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnShape {
    pub slots: usize,
    /// Simple-protocol slot size (a multiple of 16).
    pub slot_bytes: usize,
    /// Low-latency slot size in lines of 16 bytes (a multiple of 16; half is payload).
    pub ll_slot_bytes: usize,
    /// LL128 slot size in lines of 128 bytes (a multiple of 128; 120 of
    /// each 128 are payload).
    pub ll128_slot_bytes: usize,
}

impl ConnShape {
    /// Bytes one connection takes in the arena: tail and head on lines of
    /// their own, then the three slot rings.
    pub fn bytes(&self) -> usize {
        self.ll128_offset() + self.slots * self.ll128_slot_bytes
    }

    /// Where the LL128 ring starts: on a 128-byte boundary, so that each
    /// of its lines is one line of the memory system whatever the simple
    /// slot's size (a line across two would not be seen whole).
    fn ll128_offset(&self) -> usize {
        (2 * FLAG_LINE + self.slots * (self.slot_bytes + self.ll_slot_bytes))
            .next_multiple_of(LL128_LINE)
    }

    /// The largest step payload the low-latency protocol carries.
    pub fn ll_max_bytes(&self) -> usize {
        self.ll_slot_bytes / 2
    }

    /// The largest step payload LL128 carries.
    pub fn ll128_max_bytes(&self) -> usize {
        self.ll128_slot_bytes / 128 * 120
    }

    /// The LL128 slot that carries what a simple slot of `slot_bytes` does.
    pub fn ll128_for(slot_bytes: usize) -> usize {
        slot_bytes.div_ceil(120) * 128
    }

    /// The kernel's view of connection `key` whose memory starts at `base`,
    /// seen from rank `me` (the peer is the other end): both ends get the
    /// same flags and rings.
    pub fn conn(&self, base: u64, key: ConnKey, me: usize) -> CbConn {
        let buf = base + 2 * FLAG_LINE as u64;
        let ll = buf + (self.slots * self.slot_bytes) as u64;
        CbConn {
            tail: base,
            head: base + FLAG_LINE as u64,
            buf,
            ll,
            ll128: base + self.ll128_offset() as u64,
            ll128_slot_bytes: self.ll128_slot_bytes as u64,
            slot_bytes: self.slot_bytes as u64,
            ll_slot_bytes: self.ll_slot_bytes as u64,
            slots: self.slots as u32,
            peer: if key.from == me { key.to } else { key.from } as u32,
        }
    }
}

/// An LL128 line: 120 payload bytes and an 8-byte sequence number.
pub const LL128_LINE: usize = 128;

/// Flags sit 128 bytes apart, so sender and receiver never share a line.
/// The tail's line also holds each slot's message length after the tail.
pub const FLAG_LINE: usize = 128;

/// The most slots a connection has: one length word each after the tail.
pub const MAX_SLOTS: usize = FLAG_LINE / 8 - 1;

/// Bytes of a slice of plain-old-data structs, for uploads.
pub fn as_bytes<T: Copy>(items: &[T]) -> &[u8] {
    // SAFETY: T is one of this module's #[repr(C)] structs of integers, with
    // no padding (sizes asserted in the tests), or an integer type.
    unsafe { std::slice::from_raw_parts(items.as_ptr().cast::<u8>(), std::mem::size_of_val(items)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::algo::{generate, Spec};
    use crate::engine::types::{Algo, Collective, Placement};

    #[test]
    fn layouts_match_the_kernel_header() {
        use std::mem::size_of;
        assert_eq!(size_of::<CbStep>(), 48);
        assert_eq!(size_of::<CbConn>(), 72);
        assert_eq!(size_of::<CbProgress>(), 32);
        assert_eq!(size_of::<CbStatus>(), 64);
        assert_eq!(size_of::<CbLink>(), 32);
        assert_eq!(size_of::<CbRank>(), 112);
        let header = include_str!("../../../../kernels/abi.cuh");
        for (name, size) in [
            ("CbStep", 48),
            ("CbConn", 72),
            ("CbProgress", 32),
            ("CbStatus", 64),
            ("CbLink", 32),
            ("CbRank", 112),
        ] {
            let line = format!("static_assert(sizeof({name}) == {size},");
            assert!(header.contains(&line), "abi.cuh lacks `{line}`");
        }
        for (name, value) in [
            ("CB_REDUCE", CB_REDUCE),
            ("CB_FINISH", CB_FINISH),
            ("CB_HAS_SRC", CB_HAS_SRC),
            ("CB_HAS_DST", CB_HAS_DST),
            ("CB_DST_IN", CB_DST_IN),
            ("CB_PRE", CB_PRE),
        ] {
            assert!(
                header.contains(&format!("#define {name} {value}u")),
                "{name}"
            );
        }
    }

    fn tables(coll: Collective, algo: Algo, n: usize, rank: usize) -> RankTables {
        let counts = coll.counts(4096, 4, n);
        let spec = Spec {
            coll,
            algo,
            nranks: n,
            rank,
            root: 0,
            counts,
            placement: Placement::OutOfPlace,
            channels: 2,
            chunk: 64,
        };
        let p = generate(&spec).unwrap();
        let layout = Layout::new(coll, counts, Placement::OutOfPlace, rank);
        RankTables::new(&p, &layout, Dtype::F32, false).unwrap()
    }

    #[test]
    fn only_messages_count_against_the_slot() {
        // One rank: a single local copy per channel of 512 elements (2 KiB),
        // larger than the generator's 64-element chunk, and no message.
        let t = tables(Collective::AllReduce, Algo::Ring, 1, 0);
        assert_eq!(t.steps.len(), 2);
        assert!(t
            .steps
            .iter()
            .all(|s| s.len == 512 && s.nrecv == 0 && s.nsend == 0));
        assert_eq!(t.max_step_bytes, 0);
        assert_eq!(t.max_local_bytes, 512 * 4);
        // Two ranks: every step is a message of at most one chunk.
        let t = tables(Collective::AllReduce, Algo::Ring, 2, 0);
        assert_eq!(t.max_step_bytes, 64 * 4);
    }

    #[test]
    fn ring_tables_resolve_every_step_and_connection() {
        let t = tables(Collective::AllReduce, Algo::Ring, 4, 1);
        assert_eq!(t.nchannels(), 2);
        assert_eq!(*t.chan_start.last().unwrap() as usize, t.steps.len());
        // A ring rank receives from its predecessor and sends to its successor.
        assert!(t.ins.iter().all(|k| k.from == 0 && k.to == 1));
        assert!(t.outs.iter().all(|k| k.from == 1 && k.to == 2));
        for s in &t.steps {
            assert!(s.len > 0 && s.len as usize * 4 <= t.max_step_bytes);
            for &i in &s.recv[..s.nrecv as usize] {
                assert!((i as usize) < t.ins.len());
            }
            for &i in &s.send[..s.nsend as usize] {
                assert!((i as usize) < t.outs.len());
            }
        }
        assert_eq!(t.need[0], 4096);
    }

    #[test]
    fn both_ends_of_a_connection_see_the_same_memory() {
        let all: Vec<_> = (0..3)
            .map(|r| tables(Collective::AllReduce, Algo::Ring, 3, r))
            .collect();
        let shape = ConnShape {
            slots: 4,
            slot_bytes: 1024,
            ll_slot_bytes: 512,
            ll128_slot_bytes: 1152,
        };
        let mut keys: Vec<ConnKey> = all
            .iter()
            .flat_map(|t| t.ins.iter().chain(&t.outs).copied())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        // 3 ranks, 2 channels, one ring edge out of each rank per channel.
        assert_eq!(keys.len(), 6);
        // Each connection at its own base, as the launcher allocates them.
        let base = |k: &ConnKey| {
            (1 << 20) + keys.iter().position(|x| x == k).unwrap_or(0) as u64 * shape.bytes() as u64
        };
        let outs0: Vec<CbConn> = all[0]
            .outs
            .iter()
            .map(|k| shape.conn(base(k), *k, 0))
            .collect();
        let ins1: Vec<CbConn> = all[1]
            .ins
            .iter()
            .map(|k| shape.conn(base(k), *k, 1))
            .collect();
        for o in &outs0 {
            assert!(ins1.iter().any(|i| i.tail == o.tail && i.buf == o.buf));
            assert_eq!(o.peer, 1);
            assert_eq!(o.ll, o.buf + 4 * 1024);
        }
        assert!(ins1
            .iter()
            .all(|i| i.peer == 0 && i.tail % 128 == 0 && i.head == i.tail + 128));
    }

    #[test]
    fn ll128_lines_start_on_a_line_of_their_own_whatever_the_slot_size() {
        // Slots of 16-byte multiples that are not 32-byte ones used to put
        // the LL128 ring 64 bytes off a line: each of its lines in two.
        for slot_bytes in [64, 80, 1008, 1024, 4112, 262144] {
            let shape = ConnShape {
                slots: 4,
                slot_bytes,
                ll_slot_bytes: (2 * slot_bytes).min(32 << 10),
                ll128_slot_bytes: ConnShape::ll128_for(slot_bytes),
            };
            let key = ConnKey {
                from: 0,
                to: 1,
                chan: 0,
            };
            let c = shape.conn(1 << 20, key, 0);
            assert_eq!(c.ll128 % LL128_LINE as u64, 0, "slot {slot_bytes}");
            // The rings follow each other and the last ends where the
            // connection does.
            assert!(c.ll128 >= c.ll + 4 * c.ll_slot_bytes, "slot {slot_bytes}");
            assert!(c.ll128 < c.ll + 4 * c.ll_slot_bytes + LL128_LINE as u64);
            assert_eq!(
                c.ll128 + 4 * c.ll128_slot_bytes,
                (1 << 20) + shape.bytes() as u64,
                "slot {slot_bytes}"
            );
        }
    }
}
