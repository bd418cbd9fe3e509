//! The vocabulary every room shares: collectives, algorithms, element types
//! and reduction operators, with their names as the CLI and JSON spell them.

use super::split::{Split, VKind, VShape};
use std::fmt;

/// A collective operation, as nccl-tests names its binaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    Reduce,
    AllToAll,
    Gather,
    Scatter,
    SendRecv,
    /// All-to-all with per-pair counts (PyTorch's `all_to_allv`).
    AllToAllV,
    /// All-gather with per-rank block sizes.
    AllGatherV,
    /// Reduce-scatter with per-rank block sizes.
    ReduceScatterV,
}

/// Send-recv's peers of `rank` as `(to, from)`. Its `root` is the peer
/// offset: rank r sends to r + k and receives from r - k (k = `root` mod
/// `nranks`, and 0 stands for 1: the next rank, the default sweep). The
/// offsets 1..n-1 are the rounds of `collbench links`: each round every
/// rank sends once and receives once, and together they cover every
/// directed pair.
pub fn send_recv_peers(rank: usize, nranks: usize, root: usize) -> (usize, usize) {
    let n = nranks.max(1);
    let k = match root % n {
        0 => 1 % n,
        k => k,
    };
    ((rank + k) % n, (rank + n - k) % n)
}

impl Collective {
    /// Every collective, in the order `collbench all` runs them.
    pub const ALL: [Collective; 9] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllToAll,
        Collective::Gather,
        Collective::Scatter,
        Collective::SendRecv,
    ];

    /// The v-collectives: uneven counts, run when named (not by `all`).
    pub const V: [Collective; 3] = [
        Collective::AllToAllV,
        Collective::AllGatherV,
        Collective::ReduceScatterV,
    ];

    /// Every collective, the v forms last.
    pub const EVERY: [Collective; 12] = {
        let mut out = [Collective::AllReduce; 12];
        let mut i = 0;
        while i < Self::ALL.len() {
            out[i] = Self::ALL[i];
            i += 1;
        }
        while i < out.len() {
            out[i] = Self::V[i - Self::ALL.len()];
            i += 1;
        }
        out
    };

    /// Which v-collective this is, if it is one.
    pub fn vkind(self) -> Option<VKind> {
        match self {
            Collective::AllToAllV => Some(VKind::AllToAll),
            Collective::AllGatherV => Some(VKind::AllGather),
            Collective::ReduceScatterV => Some(VKind::ReduceScatter),
            _ => None,
        }
    }

    /// The even collective a v-collective generalises (itself otherwise):
    /// both share their generators, checks and bandwidth factors.
    pub fn even(self) -> Collective {
        match self {
            Collective::AllToAllV => Collective::AllToAll,
            Collective::AllGatherV => Collective::AllGather,
            Collective::ReduceScatterV => Collective::ReduceScatter,
            c => c,
        }
    }

    /// Whether every rank's output holds the same values (all-reduce,
    /// all-gather, broadcast): one bad element there reaches every rank.
    pub fn output_replicated(self) -> bool {
        matches!(
            self,
            Collective::AllReduce
                | Collective::AllGather
                | Collective::Broadcast
                | Collective::AllGatherV
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::AllGather => "all-gather",
            Collective::ReduceScatter => "reduce-scatter",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AllToAll => "all-to-all",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
            Collective::SendRecv => "send-recv",
            Collective::AllToAllV => "all-to-all-v",
            Collective::AllGatherV => "all-gather-v",
            Collective::ReduceScatterV => "reduce-scatter-v",
        }
    }

    pub fn parse(s: &str) -> Option<Collective> {
        let norm = s.trim().to_ascii_lowercase().replace('_', "-");
        let alias = match norm.as_str() {
            "allreduce" => "all-reduce",
            "allgather" => "all-gather",
            "reducescatter" => "reduce-scatter",
            "alltoall" => "all-to-all",
            "sendrecv" => "send-recv",
            "alltoallv" | "all-to-allv" => "all-to-all-v",
            "allgatherv" | "all-gatherv" => "all-gather-v",
            "reducescatterv" | "reduce-scatterv" => "reduce-scatter-v",
            other => other,
        };
        Collective::EVERY.into_iter().find(|c| c.name() == alias)
    }

    /// Whether the collective combines values with a reduction operator.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Collective::AllReduce
                | Collective::ReduceScatter
                | Collective::Reduce
                | Collective::ReduceScatterV
        )
    }

    /// Whether one rank is distinguished (the `root` column).
    pub fn rooted(self) -> bool {
        matches!(
            self,
            Collective::Broadcast | Collective::Reduce | Collective::Gather | Collective::Scatter
        )
    }

    /// nccl-tests' bus-bandwidth factor for `n` ranks.
    /// The v forms take their even forms' factors (all-to-all-v as
    /// nccl-tests' `alltoallv_perf`: `(n-1)/n` of the per-rank send size).
    pub fn busbw_factor(self, n: usize) -> f64 {
        let n = n.max(1) as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather
            | Collective::ReduceScatter
            | Collective::AllToAll
            | Collective::AllToAllV
            | Collective::AllGatherV
            | Collective::ReduceScatterV
            | Collective::Gather
            | Collective::Scatter => (n - 1.0) / n,
            Collective::Broadcast | Collective::Reduce | Collective::SendRecv => 1.0,
        }
    }

    /// The algorithms that implement this collective.
    pub fn algos(self) -> &'static [Algo] {
        match self {
            Collective::AllReduce => &[Algo::Ring, Algo::Tree, Algo::Direct],
            Collective::Broadcast | Collective::Reduce => &[Algo::Ring, Algo::Tree],
            Collective::AllGather
            | Collective::ReduceScatter
            | Collective::AllGatherV
            | Collective::ReduceScatterV => &[Algo::Ring],
            Collective::AllToAll
            | Collective::AllToAllV
            | Collective::Gather
            | Collective::Scatter
            | Collective::SendRecv => &[Algo::Direct],
        }
    }

    /// Element counts of one case, following nccl-tests: `bytes` is the size
    /// the sweep asked for; the counts are what each rank's buffers hold.
    /// The v-collectives divide evenly; see [`Collective::counts_split`].
    pub fn counts(self, bytes: u64, elem: usize, nranks: usize) -> Counts {
        self.counts_split(bytes, elem, nranks, Split::Uniform)
    }

    /// Element counts of one case, the v-collectives' divided by `split`
    /// (which the others ignore). For all-gather-v, `bytes` is the gathered
    /// buffer (every rank's receive), for reduce-scatter-v every rank's send
    /// buffer, for all-to-all-v what each rank sends (its send buffer, as
    /// nccl-tests' `alltoallv_perf`). The case's `send` and `recv` are the
    /// largest rank's (what buffers are sized for); [`Counts::send_of`] and
    /// [`Counts::recv_of`] give each rank's.
    pub fn counts_split(self, bytes: u64, elem: usize, nranks: usize, split: Split) -> Counts {
        let total = bytes / elem as u64;
        if let Some(kind) = self.vkind() {
            let v = VShape {
                kind,
                split,
                total: total as usize,
                nranks: nranks.max(1),
            };
            let m = v.matrix();
            let widest = m[0].iter().copied().max().unwrap_or(0);
            let columns = (0..nranks.max(1))
                .map(|d| m.iter().map(|row| row[d]).sum::<usize>())
                .max()
                .unwrap_or(0);
            let t = total as usize;
            let (send, recv) = match kind {
                VKind::AllGather => (widest, t),
                VKind::ReduceScatter => (t, widest),
                VKind::AllToAll => (t, columns),
            };
            return Counts {
                send,
                recv,
                block: t / nranks.max(1),
                v: Some(v),
            };
        }
        let n = nranks.max(1) as u64;
        let (send, recv, block) = match self {
            Collective::AllReduce
            | Collective::Broadcast
            | Collective::Reduce
            | Collective::SendRecv => (total, total, total),
            Collective::AllGather | Collective::Gather => {
                let base = total / n;
                (base, base * n, base)
            }
            Collective::ReduceScatter | Collective::Scatter => {
                let base = total / n;
                (base * n, base, base)
            }
            Collective::AllToAll => {
                let base = total / n;
                (base * n, base * n, base)
            }
            Collective::AllToAllV | Collective::AllGatherV | Collective::ReduceScatterV => {
                unreachable!("the v-collectives returned above")
            }
        };
        Counts {
            send: send as usize,
            recv: recv as usize,
            block: block as usize,
            v: None,
        }
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Per-rank element counts of one case.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Elements in each rank's send buffer (the root's, for scatter; the
    /// largest rank's for a v-collective).
    pub send: usize,
    /// Elements in each rank's receive buffer (the root's, for gather; the
    /// largest rank's for a v-collective).
    pub recv: usize,
    /// Elements one rank contributes or receives: the unit blocks are cut
    /// in (a v-collective's average).
    pub block: usize,
    /// A v-collective's division among ranks.
    pub v: Option<VShape>,
}

/// Where a block lies in a buffer, and its length, in elements.
pub type Span = (usize, usize);

/// `(offset, len)` of consecutive blocks of `lens`.
fn spans(lens: impl IntoIterator<Item = usize>) -> Vec<Span> {
    let mut at = 0;
    lens.into_iter()
        .map(|l| {
            let s = (at, l);
            at += l;
            s
        })
        .collect()
}

impl Counts {
    /// Elements of rank `r`'s send view.
    pub fn send_of(&self, r: usize) -> usize {
        match self.v {
            Some(v) if v.kind == VKind::AllGather => v.row(0).get(r).copied().unwrap_or(0),
            _ => self.send,
        }
    }

    /// Elements of rank `r`'s receive view.
    pub fn recv_of(&self, r: usize) -> usize {
        match self.v {
            Some(v) if v.kind == VKind::ReduceScatter => v.row(0).get(r).copied().unwrap_or(0),
            Some(v) if v.kind == VKind::AllToAll => v.matrix().iter().map(|row| row[r]).sum(),
            _ => self.recv,
        }
    }

    /// Every rank's block in the gathered buffer (all-gather's receive,
    /// reduce-scatter's send, the root's of gather and scatter), in rank order.
    pub fn blocks(&self, nranks: usize) -> Vec<Span> {
        match self.v {
            Some(v) if v.kind != VKind::AllToAll => spans(v.row(0)),
            _ => spans(std::iter::repeat_n(self.block, nranks.max(1))),
        }
    }

    /// All-to-all: what rank `r` sends each rank, in its send view.
    pub fn sends(&self, r: usize, nranks: usize) -> Vec<Span> {
        match self.v {
            Some(v) if v.kind == VKind::AllToAll => spans(v.row(r)),
            _ => self.blocks(nranks),
        }
    }

    /// All-to-all: what rank `r` receives from each rank, in its receive view.
    pub fn recvs(&self, r: usize, nranks: usize) -> Vec<Span> {
        match self.v {
            Some(v) if v.kind == VKind::AllToAll => spans(v.matrix().iter().map(|row| row[r])),
            _ => self.blocks(nranks),
        }
    }

    /// The size nccl-tests prints for this case, in bytes (a v-collective's:
    /// its `total`, see [`Collective::counts_split`]).
    pub fn reported_bytes(&self, c: Collective, elem: usize) -> u64 {
        if let Some(v) = self.v {
            return (v.total * elem) as u64;
        }
        let elems = match c {
            Collective::AllGather | Collective::Gather => self.recv,
            Collective::ReduceScatter | Collective::Scatter | Collective::AllToAll => self.send,
            _ => self.send,
        };
        (elems * elem) as u64
    }

    /// The element count nccl-tests prints: per rank (one block) for the
    /// collectives whose size is the whole of every rank's data, the
    /// buffer's otherwise.
    pub fn reported_count(&self, c: Collective) -> u64 {
        match c {
            Collective::AllGather
            | Collective::Gather
            | Collective::ReduceScatter
            | Collective::Scatter
            | Collective::AllToAll
            | Collective::AllToAllV
            | Collective::AllGatherV
            | Collective::ReduceScatterV => self.block as u64,
            _ => self.send as u64,
        }
    }
}

/// How data moves between ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algo {
    Ring,
    Tree,
    Direct,
}

impl Algo {
    pub const ALL: [Algo; 3] = [Algo::Ring, Algo::Tree, Algo::Direct];

    pub fn name(self) -> &'static str {
        match self {
            Algo::Ring => "ring",
            Algo::Tree => "tree",
            Algo::Direct => "direct",
        }
    }

    pub fn parse(s: &str) -> Option<Algo> {
        Algo::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s.trim()))
    }
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    Bf16,
    F32,
    F64,
    F8E4M3,
    F8E5M2,
}

impl Dtype {
    pub const ALL: [Dtype; 12] = [
        Dtype::I8,
        Dtype::U8,
        Dtype::I32,
        Dtype::U32,
        Dtype::I64,
        Dtype::U64,
        Dtype::F16,
        Dtype::Bf16,
        Dtype::F32,
        Dtype::F64,
        Dtype::F8E4M3,
        Dtype::F8E5M2,
    ];

    /// `--dtype all` in nccl-tests' order (its `-d all`: bfloat16 after
    /// double, the fp8 types last).
    pub const NCCL_TESTS_ORDER: [Dtype; 12] = [
        Dtype::I8,
        Dtype::U8,
        Dtype::I32,
        Dtype::U32,
        Dtype::I64,
        Dtype::U64,
        Dtype::F16,
        Dtype::F32,
        Dtype::F64,
        Dtype::Bf16,
        Dtype::F8E4M3,
        Dtype::F8E5M2,
    ];

    /// The short names nccl-tests prints in its `type` column.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::I8 => "int8",
            Dtype::U8 => "uint8",
            Dtype::I32 => "int32",
            Dtype::U32 => "uint32",
            Dtype::I64 => "int64",
            Dtype::U64 => "uint64",
            Dtype::F16 => "half",
            Dtype::Bf16 => "bfloat16",
            Dtype::F32 => "float",
            Dtype::F64 => "double",
            Dtype::F8E4M3 => "f8e4m3",
            Dtype::F8E5M2 => "f8e5m2",
        }
    }

    pub fn parse(s: &str) -> Option<Dtype> {
        let v = s.trim().to_ascii_lowercase();
        let d = match v.as_str() {
            "int8" | "i8" | "char" => Dtype::I8,
            "uint8" | "u8" => Dtype::U8,
            "int32" | "i32" | "int" => Dtype::I32,
            "uint32" | "u32" => Dtype::U32,
            "int64" | "i64" => Dtype::I64,
            "uint64" | "u64" => Dtype::U64,
            "half" | "f16" | "float16" | "fp16" => Dtype::F16,
            "bfloat16" | "bf16" => Dtype::Bf16,
            "float" | "f32" | "float32" | "fp32" => Dtype::F32,
            "double" | "f64" | "float64" | "fp64" => Dtype::F64,
            "f8e4m3" | "fp8_e4m3" | "fp8e4m3" | "e4m3" => Dtype::F8E4M3,
            "f8e5m2" | "fp8_e5m2" | "fp8e5m2" | "e5m2" => Dtype::F8E5M2,
            _ => return None,
        };
        Some(d)
    }

    pub fn size(self) -> usize {
        match self {
            Dtype::I8 | Dtype::U8 | Dtype::F8E4M3 | Dtype::F8E5M2 => 1,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            Dtype::F16 | Dtype::Bf16 | Dtype::F32 | Dtype::F64 | Dtype::F8E4M3 | Dtype::F8E5M2
        )
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reduction operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceOp {
    Sum,
    Prod,
    Min,
    Max,
    Avg,
    /// NCCL's pre-multiplied sum (`ncclRedOpCreatePreMulSum`): every
    /// rank's input is multiplied by a scalar (`--scalar`), rounded to the
    /// type, before the sum.
    PreMulSum,
}

impl ReduceOp {
    /// Every operator, in the order of the kernels' operator ids (which
    /// must not change).
    pub const ALL: [ReduceOp; 6] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
        ReduceOp::PreMulSum,
    ];
    /// What `--op all` runs, in nccl-tests' order: the five operators
    /// that need no argument. Under nccl-tests' binary names `-o all`
    /// adds `mulsum`, as nccl-tests does.
    pub const NCCL_TESTS_ORDER: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Avg,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
            ReduceOp::PreMulSum => "premulsum",
        }
    }

    /// The name nccl-tests prints in its `redop` column.
    pub fn nccl_tests_name(self) -> &'static str {
        match self {
            ReduceOp::PreMulSum => "mulsum",
            other => other.name(),
        }
    }

    pub fn parse(s: &str) -> Option<ReduceOp> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("mulsum") {
            return Some(ReduceOp::PreMulSum);
        }
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name().eq_ignore_ascii_case(s))
    }
}

/// Who moves the data: collbench's own engine, or a library's collectives
/// run side by side with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    Builtin,
    /// NCCL's collectives on the CUDA executor's buffers and streams.
    Nccl,
    Mpi,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Builtin => "builtin",
            Engine::Nccl => "nccl",
            Engine::Mpi => "mpi",
        }
    }
}

/// Out-of-place (separate send and receive buffers) or in-place (the send
/// buffer lies inside the receive buffer, where NCCL puts it).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Placement {
    OutOfPlace,
    InPlace,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::OutOfPlace => "out",
            Placement::InPlace => "in",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_recv_rounds_cover_every_directed_pair_once() {
        // Root 0 (the default sweep) is the next rank.
        assert_eq!(send_recv_peers(2, 5, 0), (3, 1));
        assert_eq!(send_recv_peers(0, 1, 0), (0, 0));
        for n in 2..9 {
            let mut seen = std::collections::BTreeSet::new();
            for k in 1..n {
                let mut senders = std::collections::BTreeSet::new();
                for r in 0..n {
                    let (to, from) = send_recv_peers(r, n, k);
                    assert_ne!(to, r);
                    // r's sender this round sends to r.
                    assert_eq!(send_recv_peers(from, n, k).0, r);
                    assert!(seen.insert((r, to)), "n={n} k={k}: {r} -> {to} twice");
                    senders.insert(from);
                }
                assert_eq!(senders.len(), n, "every rank receives once a round");
            }
            assert_eq!(seen.len(), n * (n - 1));
        }
    }

    #[test]
    fn counts_are_what_nccl_tests_prints() {
        // 1 MiB of floats on 4 ranks: the per-rank count where the size is
        // every rank's data (the genuine logs' rule), the buffer's otherwise.
        let mib = 1 << 20;
        for (c, want) in [
            (Collective::AllGather, 65536),
            (Collective::ReduceScatter, 65536),
            (Collective::AllToAll, 65536),
            (Collective::Gather, 65536),
            (Collective::Scatter, 65536),
            (Collective::AllReduce, 262144),
            (Collective::Broadcast, 262144),
            (Collective::Reduce, 262144),
            (Collective::SendRecv, 262144),
        ] {
            let counts = c.counts(mib, 4, 4);
            assert_eq!(counts.reported_bytes(c, 4), mib, "{c}");
            assert_eq!(counts.reported_count(c), want, "{c}");
        }
    }

    #[test]
    fn busbw_factors_match_nccl_tests() {
        assert_eq!(Collective::AllReduce.busbw_factor(8), 2.0 * 7.0 / 8.0);
        assert_eq!(Collective::AllGather.busbw_factor(4), 0.75);
        assert_eq!(Collective::ReduceScatter.busbw_factor(2), 0.5);
        assert_eq!(Collective::AllToAll.busbw_factor(4), 0.75);
        assert_eq!(Collective::Broadcast.busbw_factor(8), 1.0);
        assert_eq!(Collective::Reduce.busbw_factor(8), 1.0);
        assert_eq!(Collective::SendRecv.busbw_factor(8), 1.0);
        assert_eq!(Collective::AllReduce.busbw_factor(1), 0.0);
    }

    #[test]
    fn counts_follow_nccl_tests() {
        let c = Collective::AllGather.counts(1024, 4, 4);
        assert_eq!((c.send, c.recv), (64, 256));
        assert_eq!(c.reported_bytes(Collective::AllGather, 4), 1024);
        let c = Collective::ReduceScatter.counts(1000, 4, 3);
        assert_eq!((c.send, c.recv), (249, 83));
        assert_eq!(c.reported_bytes(Collective::ReduceScatter, 4), 996);
        let c = Collective::AllReduce.counts(8, 4, 8);
        assert_eq!((c.send, c.recv), (2, 2));
    }

    #[test]
    fn names_round_trip() {
        for c in Collective::ALL {
            assert_eq!(Collective::parse(c.name()), Some(c));
        }
        assert_eq!(Collective::parse("allreduce"), Some(Collective::AllReduce));
        for d in Dtype::ALL {
            assert_eq!(Dtype::parse(d.name()), Some(d));
        }
        for o in ReduceOp::ALL {
            assert_eq!(ReduceOp::parse(o.name()), Some(o));
        }
        assert_eq!(ReduceOp::parse("mulsum"), Some(ReduceOp::PreMulSum));
        assert_eq!(ReduceOp::PreMulSum.nccl_tests_name(), "mulsum");
        assert_eq!(Collective::parse("all-everything"), None);
    }
}
