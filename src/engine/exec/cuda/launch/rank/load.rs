//! Loading an operation for the collective kernel: the checks that it fits
//! (buffers, slots, channels, every block resident at once), its tables
//! uploaded with the connections they name, the protocol picked and the
//! launch's width.

use super::*;

/// `--protocol auto` runs a line protocol (LL, or LL128 where steps outgrow
/// the low-latency slot) for operations of at most this many bytes per
/// rank (the larger of its buffers), simple above: NCCL's order of
/// protocols by size. Measured on an H200 (8 virtual ranks, all-reduce,
/// `scripts/gpu-acceptance.sh`): the line protocols beat simple by 10% at
/// 512 KiB and lost by 20% at 2 MiB, where LL had still been picked
/// (every step fit its slot).
const LINE_AUTO_MAX: usize = 1 << 20;

/// Threads per block for an operation under `proto` whose largest message
/// step moves `message_bytes` and largest local step (no peer)
/// `local_bytes`. The line protocols give each thread its own lines (LL: 8
/// payload bytes a thread; LL128: a 16-byte part of a 120-byte line), and
/// a local step moves 16-byte vectors, one a thread at a time: a small
/// operation keeps a few warps busy and leaves the rest of a full block
/// only to wait at every step's barriers, which cost more the more warps
/// they hold (on an H100, 8 ranks at 8 B took 16.1 us with 512 threads,
/// 15.3 with 256). Such an operation launches as many threads as its
/// largest step has lines or vectors, in whole warps; the simple
/// protocol's copies want every thread. `COLLBENCH_CUDA_THREADS` fixes the
/// width.
fn launch_width(
    opts: &super::super::CudaOptions,
    proto: Proto,
    message_bytes: usize,
    local_bytes: usize,
) -> u32 {
    let lines = match proto {
        _ if !opts.narrow => return opts.threads,
        Proto::Simple => return opts.threads,
        Proto::LowLatency => message_bytes.div_ceil(8),
        Proto::LowLatency128 => message_bytes.div_ceil(120) * 8,
    };
    let threads = lines.max(local_bytes.div_ceil(16));
    let warps = threads.div_ceil(32).max(1);
    u32::try_from(warps * 32).map_or(opts.threads, |w| w.min(opts.threads))
}

/// Where each part of a rank's table upload starts, in bytes from its base.
struct TableOffsets {
    steps: u64,
    chan: u64,
    ins: u64,
    outs: u64,
    links: Option<u64>,
}

/// The larger of an operation's buffers, in bytes.
fn op_bytes(op: &OpDesc) -> usize {
    op.counts.send.max(op.counts.recv) * op.dtype.size()
}

impl CudaRank {
    /// Refuses a layout whose blocks cannot all be resident at once.
    pub(super) fn check_residency(&self, f: FuncId, nchannels: usize) -> Result<(), ExecError> {
        let threads = self.world.opts.threads;
        let per_sm = self.dev.occupancy(f, threads).map_err(dev_err)?;
        let desc = self.dev.desc();
        let here = self.world.load[self.di];
        let need = here * nchannels;
        let cap = desc.multiprocessors as usize * per_sm as usize;
        tracing::debug!(
            rank = self.rank,
            ordinal = desc.ordinal,
            ranks_on_device = here,
            channels = nchannels,
            need_blocks = need,
            sms = desc.multiprocessors,
            blocks_per_sm = per_sm,
            threads,
            cap_blocks = cap,
            fits = need <= cap,
            "residency check"
        );
        if need > cap {
            let emu = self.world.kind == Kind::Emu;
            return Err(ExecError::Unfit(format!(
                "{here} rank(s) x {nchannels} block(s) = {need} blocks must be resident at once on GPU {} ({}), but it holds {} SMs x {per_sm} blocks{} = {cap}: lower --ranks or --channels (a block per channel of a rank's program; the tree all-reduce runs 4 a channel), or leave that algorithm out{}",
                desc.ordinal,
                desc.name,
                desc.multiprocessors,
                if emu { String::new() } else { format!(" of {threads} threads") },
                if emu { " (or raise COLLBENCH_EMU_SMS / COLLBENCH_EMU_BLOCKS_PER_SM)" } else { "" }
            )));
        }
        Ok(())
    }

    /// `program`'s tables and its kernel, once they are known to fit (the
    /// tables, and every block resident at once); nothing changes on the
    /// device.
    pub(super) fn check_kernel(
        &mut self,
        op: &OpDesc,
        program: &Program,
    ) -> Result<(RankTables, FuncId), ExecError> {
        let premul = op.op == crate::engine::types::ReduceOp::PreMulSum;
        let t = RankTables::new(program, &op.layout, op.dtype, premul)
            .map_err(|e| ExecError::Setup(e.to_string()))?;
        self.check_fits(&t)?;
        let variant = Variant {
            dtype: op.dtype,
            op: op.op,
        };
        let coll_fn = self
            .dev
            .function(variant, "cb_collective")
            .map_err(dev_err)?;
        tracing::debug!(
            rank = self.rank,
            %variant,
            channels = t.nchannels(),
            steps = t.steps.len(),
            ins = t.ins.len(),
            outs = t.outs.len(),
            "program checked for the kernel"
        );
        self.check_residency(coll_fn, t.nchannels())?;
        Ok((t, coll_fn))
    }

    /// Uploads the rank's tables; returns the kernel's argument.
    pub(super) fn upload_tables(
        &mut self,
        t: &RankTables,
        nranks: usize,
        op_bytes: usize,
    ) -> Result<(CbRank, Proto), ExecError> {
        let (blob, at, mut records) = self.table_blob(t)?;
        self.tables = self.region(self.tables, blob.len())?;
        let base = self.tables.0;
        self.dev.upload(self.stream, base, &blob).map_err(dev_err)?;
        if let (Some(r), Some(links)) = (records.as_mut(), at.links) {
            r.at = base + links;
        }
        self.link_records = records;
        let proto = self.pick_proto(t, nranks, op_bytes)?;
        let arg = CbRank {
            steps: base + at.steps,
            chan_start: base + at.chan,
            ins: base + at.ins,
            outs: base + at.outs,
            bufs: self.bufs,
            progress: self.progress.dev,
            status: self.world.status.dev(self.di),
            links: self.link_records.as_ref().map_or(0, |r| r.at),
            timeout_ns: self.world.opts.timeout.as_nanos().min(u64::MAX as u128) as u64,
            rank: self.rank as u32,
            nranks: nranks as u32,
            proto: proto as u32 | if self.world.staged { PROTO_SYS } else { 0 },
            nchannels: t.nchannels() as u32,
            scalar: 0,
        };
        Ok((arg, proto))
    }

    /// The rank's tables laid out as one upload (each part 16-byte
    /// aligned), where each part starts, and the link records when links
    /// are timed or paced.
    fn table_blob(
        &self,
        t: &RankTables,
    ) -> Result<(Vec<u8>, TableOffsets, Option<LinkRecords>), ExecError> {
        let mut ins = Vec::with_capacity(t.ins.len());
        let mut outs = Vec::with_capacity(t.outs.len());
        for (keys, list) in [(&t.ins, &mut ins), (&t.outs, &mut outs)] {
            for &k in keys.iter() {
                let base = self.world.conn(k)?;
                list.push(self.world.opts.shape.conn(base, k, self.rank));
            }
        }
        let mut blob: Vec<u8> = Vec::new();
        let mut put = |bytes: &[u8]| {
            let at = blob.len();
            blob.extend_from_slice(bytes);
            blob.resize(blob.len().next_multiple_of(16), 0);
            at as u64
        };
        let steps = put(as_bytes(&t.steps));
        let chan = put(as_bytes(&t.chan_start));
        let ins_at = put(as_bytes(&ins));
        let outs_at = put(as_bytes(&outs));
        let host = self.world.host.options();
        let pace: Vec<u64> = t
            .ins
            .iter()
            .map(|k| (host.pace.factor(k.from, k.to) * 1000.0).round() as u64)
            .collect();
        let records = (host.link_timing || pace.iter().any(|&p| p > 1000)).then(|| LinkRecords {
            at: 0,
            from: t.ins.iter().map(|k| k.from).collect(),
            pace,
        });
        let links = records.as_ref().map(|r| put(as_bytes(&r.fresh())));
        let at = TableOffsets {
            steps,
            chan,
            ins: ins_at,
            outs: outs_at,
            links,
        };
        Ok((blob, at, records))
    }

    /// The protocol the operation runs: the one asked for, or the one its
    /// largest step and size call for, agreed by every rank.
    fn pick_proto(
        &mut self,
        t: &RankTables,
        nranks: usize,
        op_bytes: usize,
    ) -> Result<Proto, ExecError> {
        let ll_max = self.world.opts.shape.ll_max_bytes();
        let ll128_max = self.world.opts.shape.ll128_max_bytes();
        let (proto, why) = match self.world.opts.proto {
            Some(p) => (p, "asked for"),
            None if op_bytes > LINE_AUTO_MAX => (
                Proto::Simple,
                "the operation exceeds 1 MiB, where the line protocols' flags cost more than they save",
            ),
            None if t.max_step_bytes <= ll_max => {
                (Proto::LowLatency, "every step fits the low-latency slot")
            }
            // LL128 only where connections are the GPU's own memory (see
            // `CudaWorld::open`).
            None if !self.world.staged && t.max_step_bytes <= ll128_max => (
                Proto::LowLatency128,
                "a step exceeds the low-latency slot; the operation is at most 1 MiB (LL128)",
            ),
            None if self.world.staged => (
                Proto::Simple,
                "a step exceeds the low-latency slot; connections between GPUs or processes take no LL128",
            ),
            None => (Proto::Simple, "a step exceeds the LL128 slot"),
        };
        // Each rank chose from its own messages; every rank runs one.
        let (proto, why) = if self.world.opts.proto.is_none() && nranks > 1 {
            self.rounds += 1;
            match self.world.agree_proto(self.rounds, proto, self.rank)? {
                p if p == proto => (p, why),
                p => (
                    p,
                    "another rank's messages need it (every rank runs one protocol)",
                ),
            }
        } else {
            (proto, why)
        };
        tracing::debug!(
            rank = self.rank,
            proto = ?proto,
            max_step_bytes = t.max_step_bytes,
            ll_max_bytes = ll_max,
            system_scope = self.world.staged,
            why,
            "protocol"
        );
        Ok(proto)
    }

    /// Refuses tables the rank cannot run: buffers too small, a step
    /// larger than the protocol's slot, too many channels.
    fn check_fits(&self, t: &RankTables) -> Result<(), ExecError> {
        if let Some(i) = (0..3).find(|&i| self.sizes[i] < t.need[i]) {
            return Err(ExecError::Setup(format!(
                "buffer {i} holds {} bytes; the program needs {}",
                self.sizes[i], t.need[i]
            )));
        }
        if t.max_step_bytes > self.world.opts.shape.slot_bytes {
            return Err(ExecError::Unfit(format!(
                "a step of {} bytes exceeds the {}-byte connection slot",
                t.max_step_bytes, self.world.opts.shape.slot_bytes
            )));
        }
        if self.world.opts.proto == Some(Proto::LowLatency128)
            && t.max_step_bytes > self.world.opts.shape.ll128_max_bytes()
        {
            return Err(ExecError::Unfit(format!(
                "--protocol ll128: a step of {} bytes exceeds the {}-byte LL128 slot payload",
                t.max_step_bytes,
                self.world.opts.shape.ll128_max_bytes()
            )));
        }
        if self.world.opts.proto == Some(Proto::LowLatency)
            && t.max_step_bytes > self.world.opts.shape.ll_max_bytes()
        {
            return Err(ExecError::Unfit(format!(
                "--protocol ll: a step of {} bytes exceeds the {}-byte low-latency slot payload",
                t.max_step_bytes,
                self.world.opts.shape.ll_max_bytes()
            )));
        }
        if t.nchannels() > MAX_CHANNELS {
            return Err(ExecError::Unfit(format!(
                "{} channels; at most {MAX_CHANNELS}",
                t.nchannels()
            )));
        }
        Ok(())
    }

    /// Loads `program` for the collective kernel: checks it fits the
    /// buffers, slots and device, uploads its tables, picks the protocol
    /// and the launch shape.
    pub(super) fn load_kernel(&mut self, op: &OpDesc, program: &Program) -> Result<(), ExecError> {
        if let Some((g, _)) = self.graph.take() {
            self.dev.drop_graph(g).map_err(dev_err)?;
        }
        let (t, coll_fn) = self.check_kernel(op, program)?;
        // What the operation may touch of each buffer: the program's
        // reach, and the data the harness fills and checks.
        let es = op.dtype.size();
        let data = [op.layout.buf0, op.layout.buf1, program.scratch];
        for (i, &b) in self.bufs.iter().enumerate() {
            self.dev.fence(b, t.need[i].max(data[i].saturating_mul(es)));
        }
        let (arg, proto) = self.upload_tables(&t, op.nranks, op_bytes(op))?;
        let arg = CbRank {
            scalar: op.scalar,
            ..arg
        };
        let threads = launch_width(&self.world.opts, proto, t.max_step_bytes, t.max_local_bytes);
        tracing::debug!(
            rank = self.rank,
            threads,
            most = self.world.opts.threads,
            max_step_bytes = t.max_step_bytes,
            max_local_bytes = t.max_local_bytes,
            "threads per block"
        );
        let step_counts: Vec<usize> = program.channels.iter().map(|c| c.steps.len()).collect();
        let grid = step_counts
            .iter()
            .rposition(|&n| n > 0)
            .map_or(1, |c| c + 1) as u32;
        let prims = program
            .channels
            .iter()
            .map(|c| c.steps.iter().map(|s| s.prim.name()).collect())
            .collect();
        let copies = if self.world.opts.kernel_copies {
            None
        } else {
            copies::plan(program, &op.layout, op.dtype, op.op, &self.bufs)
        };
        // The recorder follows the kernel's channels; device copies have none.
        let step_counts = if copies.is_some() {
            Vec::new()
        } else {
            step_counts
        };
        if let Some(c) = &copies {
            tracing::debug!(
                rank = self.rank,
                copies = c.len(),
                bytes = c.iter().map(|c| c.bytes).sum::<usize>(),
                "the program only copies within the rank: device copies instead of the kernel"
            );
        }
        self.loaded = Some(Loaded {
            variant: Variant {
                dtype: op.dtype,
                op: op.op,
            },
            coll_fn,
            arg,
            grid,
            threads,
            step_counts,
            prims,
            lib: Vec::new(),
            copies,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::exec::cuda::launch::{CudaOptions, EnvKnobs, Kind, Timing};

    #[test]
    fn small_line_protocol_operations_launch_narrow_blocks() {
        let mut o = CudaOptions::new(
            Kind::Cuda,
            Some(64 << 10),
            Duration::from_secs(1),
            Timing::Events,
            EnvKnobs::default(),
        );
        (o.threads, o.narrow) = (512, true);
        // One line each: a warp; a line a thread up to the whole block.
        assert_eq!(launch_width(&o, Proto::LowLatency, 8, 0), 32);
        assert_eq!(launch_width(&o, Proto::LowLatency, 256, 0), 32);
        assert_eq!(launch_width(&o, Proto::LowLatency, 264, 0), 64);
        assert_eq!(launch_width(&o, Proto::LowLatency, 4096, 0), 512);
        assert_eq!(launch_width(&o, Proto::LowLatency, 1 << 20, 0), 512);
        // LL128: eight threads a 120-byte line.
        assert_eq!(launch_width(&o, Proto::LowLatency128, 8, 0), 32);
        assert_eq!(launch_width(&o, Proto::LowLatency128, 480, 0), 32);
        assert_eq!(launch_width(&o, Proto::LowLatency128, 481, 0), 64);
        assert_eq!(launch_width(&o, Proto::LowLatency128, 64 << 10, 0), 512);
        // A local step moves 16-byte vectors, a thread each: a lone rank's
        // large copy (no message) takes the whole block.
        assert_eq!(launch_width(&o, Proto::LowLatency, 0, 8), 32);
        assert_eq!(launch_width(&o, Proto::LowLatency, 8, 2048), 128);
        assert_eq!(launch_width(&o, Proto::LowLatency, 0, 1 << 20), 512);
        assert_eq!(launch_width(&o, Proto::LowLatency128, 8, 1 << 20), 512);
        // The simple protocol's copies want every thread; a fixed width is kept.
        assert_eq!(launch_width(&o, Proto::Simple, 8, 0), 512);
        o.narrow = false;
        assert_eq!(launch_width(&o, Proto::LowLatency, 8, 0), 512);
        // The emulated device runs one thread a block.
        let e = CudaOptions::new(
            Kind::Emu,
            Some(64 << 10),
            Duration::from_secs(1),
            Timing::Events,
            EnvKnobs::default(),
        );
        assert_eq!(launch_width(&e, Proto::LowLatency, 8, 0), 1);
    }
}
