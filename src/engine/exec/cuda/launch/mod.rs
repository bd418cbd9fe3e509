//! The CUDA launcher, written once against [`Device`]: a world of ranks
//! placed on devices (one per GPU when there are enough, virtual ranks
//! sharing a GPU otherwise), their connections, and each rank's runner:
//! buffers and tables in device memory, one persistent `cb_collective`
//! launch per operation on the rank's own stream, CUDA events around each,
//! status and per-channel progress in host-mapped memory that the waiting
//! host thread reads (for the flight recorder, the abort and the timeout
//! record the kernels leave).
//!
//! Deadlock rules kept here: every rank's blocks must be resident at once
//! (checked against the occupancy query before any launch); ranks sharing a
//! GPU never outnumber its hardware queues; device memory is freed only once
//! every rank has stopped (a free may wait for the whole device); data
//! kernels finish before a rank reaches the barrier that precedes an
//! operation.

use super::abi::{CbProgress, CbStatus, ConnKey, Proto, FLAG_LINE};
use super::dev::{DevError, DevPtr, Device, Mapped, StreamId};
use super::kernels::Variant;
use crate::engine::algo::MAX_PEERS;
use crate::engine::exec::world::{ExecError, HostWorld, MAX_CHANNELS};
use crate::engine::observe::Observer;
use crate::engine::transport::node::ProcessPeers;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

fn dev_err(e: DevError) -> ExecError {
    ExecError::Setup(format!("device: {e}"))
}

/// The devices of `kind`, opened.
fn open_devices(kind: Kind) -> Result<Vec<Arc<dyn Device>>, DevError> {
    Ok(match kind {
        Kind::Cuda => super::dev::real::devices()?
            .into_iter()
            .map(|d| d as Arc<dyn Device>)
            .collect(),
        Kind::Emu => super::dev::emu::devices()?
            .into_iter()
            .map(|d| d as Arc<dyn Device>)
            .collect(),
    })
}

/// A world spread over processes (one rank each, under MPI or `--procs`):
/// how this process's rank finds its GPU and its peers.
pub struct Across {
    pub procs: Arc<dyn ProcessPeers>,
    /// `--gpu-map`: the GPU of each rank of a node, by node rank (None: the
    /// node rank, round-robin over the GPUs).
    pub gpu_map: Option<Vec<usize>>,
    /// `--allow-shared-gpu`: ranks may share a GPU.
    pub allow_shared: bool,
}

/// Ranks, the devices they run on, and their connections.
pub struct CudaWorld {
    kind: Kind,
    devices: Vec<Arc<dyn Device>>,
    /// Device index of each rank (of this process's rank, when spread).
    of_rank: Vec<usize>,
    /// Ranks running on each device (across processes, when spread).
    load: Vec<usize>,
    /// Across processes: how this process's rank reaches the others.
    spread: Option<spread::Spread>,
    host: Arc<HostWorld>,
    /// Why kernels stopped, one record per device.
    status: status::Board,
    opts: CudaOptions,
    /// Ranks span devices or processes: flags at system scope, no LL128.
    staged: bool,
    /// Device pairs (sender, receiver) whose connections are the
    /// receiver's device memory, written peer-to-peer by the sender's
    /// kernels; other pairs of different devices use host-mapped memory.
    peer: HashSet<(usize, usize)>,
    conns: Mutex<HashMap<ConnKey, DevPtr>>,
    /// Device allocations and mapped memory freed when the world goes.
    owned: Mutex<Vec<(usize, Owned)>>,
    setup_streams: Mutex<HashMap<usize, StreamId>>,
    /// Where this process's ranks agree on what they must choose alike.
    rounds: agree::Rounds,
    /// What runs `--engine nccl` operations, when the sweep has them.
    library: Option<library::Library>,
    /// Blocks a rank's program may use when channels are `auto`, per variant.
    auto: Mutex<HashMap<Variant, usize>>,
}

enum Owned {
    Dev(DevPtr),
    Mapped(Mapped),
}

impl CudaWorld {
    /// Opens the devices of `kind` and places `nranks` ranks on them; each
    /// rank will hold buffers of `bytes`. Refuses layouts that cannot run.
    pub fn open(
        kind: Kind,
        host: Arc<HostWorld>,
        opts: CudaOptions,
        bytes: [usize; 3],
        nccl: bool,
        across: Option<Across>,
    ) -> Result<Arc<CudaWorld>, ExecError> {
        let mut opts = opts;
        let devices = open_devices(kind).map_err(|e| match kind {
            Kind::Cuda => ExecError::Setup(format!("--device cuda: no usable GPU ({})", e.detail)),
            Kind::Emu => ExecError::Setup(format!("--device cuda-emu: {e}")),
        })?;
        if devices.is_empty() {
            return Err(ExecError::Setup(format!(
                "--device {}: no device",
                kind.name()
            )));
        }
        if kind == Kind::Emu {
            // The emulated blocks are as wide as COLLBENCH_EMU_THREADS.
            opts.threads = devices
                .iter()
                .map(|d| d.desc().block_threads)
                .min()
                .unwrap_or(1);
        }
        let Placed {
            of_rank,
            load,
            spread,
            devices,
        } = place(kind, &host, devices, across, &mut opts, nccl)?;
        check_devices(&devices, &load, spread.is_some(), bytes, &opts)?;
        // Across GPUs or processes, connections may be host memory or
        // another GPU's: flags at system scope, and no LL128, whose 128-byte
        // lines must reach the reader whole (NCCL runs it over NVLink only;
        // PCIe may split them).
        let staged = devices.len() > 1 || spread.is_some();
        if staged && opts.proto == Some(Proto::LowLatency128) {
            return Err(ExecError::Setup(ll128_refused(
                spread.is_some(),
                devices.len(),
            )));
        }
        let peer = match &spread {
            None => peer_pairs(&devices, opts.no_p2p),
            // Across processes, CUDA IPC reaches peers (see `spread`).
            Some(_) => HashSet::new(),
        };
        let home = of_rank.first().copied().unwrap_or(0);
        let status = status::Board::new(
            devices[home]
                .alloc_mapped(devices.len() * std::mem::size_of::<CbStatus>())
                .map_err(dev_err)?,
        );
        let rounds = agree::Rounds::new(of_rank.len());
        let mut world = CudaWorld {
            kind,
            rounds,
            staged,
            peer,
            devices,
            of_rank,
            load,
            spread,
            host,
            status,
            opts,
            conns: Mutex::new(HashMap::new()),
            owned: Mutex::new(Vec::new()),
            setup_streams: Mutex::new(HashMap::new()),
            library: None,
            auto: Mutex::new(HashMap::new()),
        };
        if nccl {
            world.library = Some(library::open(&world)?);
            if let Some(name) = world.library_name() {
                tracing::info!(library = %name, "--engine nccl runs on");
            }
        }
        Ok(Arc::new(world))
    }

    /// The protocol every rank runs (`--protocol auto`), from each one's
    /// own choice `mine` in `round` (its count of loaded operations): the
    /// one that carries the most any rank needs (see [`agree`]).
    fn agree_proto(&self, round: u64, mine: Proto, rank: usize) -> Result<Proto, ExecError> {
        let c = agree::capacity(mine);
        let most = match &self.spread {
            Some(sp) => sp.agree(
                c as usize,
                "protocol",
                &self.host,
                self.opts.timeout,
                usize::max,
            )? as u64,
            None => self
                .rounds
                .most(round, c, rank, &self.host, self.opts.timeout)?,
        };
        Ok(agree::of_capacity(most))
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn host(&self) -> &Arc<HostWorld> {
        &self.host
    }

    /// Blocks each rank's program takes with `--channels auto`: the same for
    /// every rank (their programs must match), from the most crowded
    /// device (across processes, agreed with every rank). Where ranks share a GPU, half its resident slots, so the
    /// persistent kernels never fill it and a short kernel queued ahead of
    /// another rank's blocks always finds room; a rank alone on its GPU
    /// may take every slot.
    pub(super) fn auto_blocks(&self, variant: Variant) -> Result<usize, ExecError> {
        let poisoned = || ExecError::Setup("channel table poisoned".into());
        if let Some(&n) = self.auto.lock().map_err(|_| poisoned())?.get(&variant) {
            return Ok(n);
        }
        let mut blocks = MAX_CHANNELS;
        for (i, d) in self.devices.iter().enumerate() {
            if self.load[i] == 0 {
                continue;
            }
            let here = self.load[i];
            let f = d.function(variant, "cb_collective").map_err(dev_err)?;
            let per_sm = d.occupancy(f, self.opts.threads).map_err(dev_err)? as usize;
            let cap = d.desc().multiprocessors as usize * per_sm.max(1);
            // Alone on its device a rank's kernels queue on its one stream:
            // nothing else waits for a slot, and every SM may work for it.
            let share = if here == 1 { cap } else { cap / 2 / here };
            blocks = blocks.min(share.max(1));
            tracing::debug!(
                %variant,
                ordinal = d.desc().ordinal,
                sms = d.desc().multiprocessors,
                blocks_per_sm = per_sm,
                threads = self.opts.threads,
                ranks = here,
                resident_cap = cap,
                "occupancy for auto channels"
            );
        }
        if self.kind == Kind::Emu {
            // Every block is a thread: few, so the host's cores are not
            // swamped (and never more than the emulated device holds).
            blocks = blocks.min(2);
        }
        if let Some(sp) = &self.spread {
            // Each process sees only its own GPU (how crowded, how large):
            // the world takes the least.
            let mine = blocks;
            blocks = sp.agree(
                blocks,
                "auto channels",
                &self.host,
                self.opts.timeout,
                usize::min,
            )?;
            if blocks < mine {
                tracing::debug!(
                    mine,
                    agreed = blocks,
                    "auto channels: another rank's GPU allows fewer"
                );
            }
        }
        tracing::info!(
            %variant,
            blocks,
            max = MAX_CHANNELS,
            "auto channels: half the resident blocks of the most crowded device, per rank (all of them for a rank alone on its device)"
        );
        self.auto
            .lock()
            .map_err(|_| poisoned())?
            .insert(variant, blocks);
        Ok(blocks)
    }

    /// What runs `--engine nccl` here: NCCL's version, or the stand-in.
    pub fn library_name(&self) -> Option<String> {
        match self.library.as_ref()? {
            library::Library::Nccl(_) => {
                let n = super::nccl::Nccl::get().ok()?;
                Some(format!("NCCL {} ({})", n.version_string(), n.path))
            }
            library::Library::StandIn(_) => {
                Some("nccl-standin (the emulated device computes NCCL's rows on the host)".into())
            }
        }
    }

    /// The devices ranks run on, described.
    pub fn devices(&self) -> Vec<crate::engine::exec::cuda::dev::DeviceDesc> {
        self.devices.iter().map(|d| d.desc().clone()).collect()
    }

    pub fn options(&self) -> &CudaOptions {
        &self.opts
    }

    fn own(&self, dev: usize, o: Owned) {
        if let Ok(mut v) = self.owned.lock() {
            v.push((dev, o));
        }
    }

    fn setup_stream(&self, dev: usize) -> Result<StreamId, ExecError> {
        let mut m = self
            .setup_streams
            .lock()
            .map_err(|_| ExecError::Setup("setup streams poisoned".into()))?;
        if let Some(&s) = m.get(&dev) {
            return Ok(s);
        }
        let s = self.devices[dev].stream().map_err(dev_err)?;
        m.insert(dev, s);
        Ok(s)
    }

    /// The memory of connection `key`, zeroed, made on first use; both
    /// ends get the same. Connections persist (their counters with them)
    /// for the world's life, like the host engine's FIFOs.
    fn conn(&self, key: ConnKey) -> Result<DevPtr, ExecError> {
        let mut m = self
            .conns
            .lock()
            .map_err(|_| ExecError::Setup("connection table poisoned".into()))?;
        if let Some(&p) = m.get(&key) {
            return Ok(p);
        }
        let bytes = self.opts.shape.bytes();
        if let Some(sp) = &self.spread {
            let di = self.of_rank.first().copied().unwrap_or(0);
            let d = &self.devices[di];
            let mapped = |bytes: usize| {
                let m = d.alloc_mapped(bytes).map_err(dev_err)?;
                self.own(di, Owned::Mapped(m));
                Ok(m)
            };
            let p = sp.conn(
                key,
                d,
                &self.opts.shape,
                &self.host,
                self.opts.timeout,
                &mapped,
            )?;
            m.insert(key, p);
            return Ok(p);
        }
        let dev = self.of_rank[key.to];
        let d = &self.devices[dev];
        let from = self.of_rank[key.from];
        // The receiver's device memory where the sender's kernels reach it
        // (the same GPU, or a peer), else pinned host memory both reach.
        let direct = from == dev || self.peer.contains(&(from, dev));
        // Tail and head start at `seq_start` (0 but in tests of the
        // sequence numbers' wrap).
        let start = self.opts.seq_start.to_ne_bytes();
        let p = if !direct {
            let mapped = d.alloc_mapped(bytes).map_err(dev_err)?;
            self.own(dev, Owned::Mapped(mapped));
            for at in [0, FLAG_LINE] {
                // SAFETY: the mapped memory holds `bytes` (past both flag
                // lines), zeroed, and no kernel uses it yet.
                unsafe {
                    std::ptr::copy_nonoverlapping(start.as_ptr(), mapped.host.add(at), 8);
                }
            }
            mapped.dev
        } else {
            let p = d.alloc(bytes).map_err(dev_err)?;
            self.own(dev, Owned::Dev(p));
            let s = self.setup_stream(dev)?;
            d.memset(s, p, 0, bytes).map_err(dev_err)?;
            if self.opts.seq_start != 0 {
                for at in [0, FLAG_LINE as u64] {
                    d.upload(s, p + at, &start).map_err(dev_err)?;
                }
            }
            d.sync(s).map_err(dev_err)?;
            p
        };
        m.insert(key, p);
        Ok(p)
    }

    /// The rank's runner: its buffers of `bytes`, its stream and progress.
    pub fn rank(
        self: &Arc<CudaWorld>,
        rank: usize,
        observer: Arc<dyn Observer>,
        bytes: [usize; 3],
    ) -> Result<CudaRank, ExecError> {
        let di = *self
            .of_rank
            .get(rank)
            .ok_or_else(|| ExecError::Setup(format!("no rank {rank}")))?;
        let dev = Arc::clone(&self.devices[di]);
        let stream = dev.stream().map_err(dev_err)?;
        let mut bufs = [0; 3];
        for (b, &n) in bufs.iter_mut().zip(&bytes) {
            *b = dev.alloc(n.max(256)).map_err(dev_err)?;
            self.own(di, Owned::Dev(*b));
        }
        let progress = dev
            .alloc_mapped(MAX_CHANNELS * std::mem::size_of::<CbProgress>())
            .map_err(dev_err)?;
        self.own(di, Owned::Mapped(progress));
        let small = dev.alloc(256).map_err(dev_err)?;
        self.own(di, Owned::Dev(small));
        Ok(CudaRank {
            world: Arc::clone(self),
            rank,
            di,
            dev,
            stream,
            bufs,
            sizes: bytes,
            progress,
            observer,
            small,
            words: Vec::new(),
            words_used: 0,
            rounds: 0,
            stage: (0, 0),
            tables: (0, 0),
            loaded: None,
            events: Vec::new(),
            pending: Vec::new(),
            wall_start: None,
            graph: None,
            link_records: None,
        })
    }
}

impl Drop for CudaWorld {
    fn drop(&mut self) {
        let home = self.of_rank.first().copied().unwrap_or(0);
        if let Some(mut sp) = self.spread.take() {
            // The bridge stops before the memory it reads is freed.
            // A run that stopped exits soon and its peers may be parked:
            // memory not yet closed by its opener is kept, not waited for.
            let wait = match self.host.aborted() {
                true => std::time::Duration::ZERO,
                false => self.opts.timeout,
            };
            sp.close(&self.devices[home], wait);
        }
        let owned = self.owned.get_mut().map(std::mem::take).unwrap_or_default();
        for (dev, o) in owned {
            let d = &self.devices[dev];
            let _ = match o {
                Owned::Dev(p) => d.free(p),
                Owned::Mapped(m) => d.free_mapped(m),
            };
        }
        let _ = self.devices[home].free_mapped(self.status.memory());
    }
}

mod agree;
mod data;
mod layout;
mod library;
mod options;
mod rank;
mod spread;
mod status;
use layout::{check_devices, peer_pairs, place, Placed};
pub use layout::{ll128_refused, memory_budget, Here};
pub use options::{CudaOptions, EnvKnobs, Kind, Timing};
pub use spread::{first_shared, node_placement, shared_gpu_refusal};

pub use rank::CudaRank;
