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

use super::abi::{CbProgress, CbStatus, ConnKey, ConnShape, Proto};
use super::dev::{DevError, DevPtr, Device, Mapped, StreamId};
use super::kernels::Variant;
use crate::engine::algo::MAX_PEERS;
use crate::engine::exec::world::{ExecError, HostWorld, MAX_CHANNELS};
use crate::engine::observe::Observer;
use crate::engine::transport::node::ProcessPeers;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Which device implementation a world runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cuda,
    Emu,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Cuda => "cuda",
            Kind::Emu => "cuda-emu",
        }
    }
}

/// How operations are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// CUDA events around every operation on the rank's stream.
    Events,
    /// The host clock from the first launch to the end of the wait
    /// (nccl-tests' method), shared evenly between the operations.
    Wall,
}

/// Tunables of the CUDA executor.
#[derive(Clone, Copy, Debug)]
pub struct CudaOptions {
    pub shape: ConnShape,
    /// Threads per block of the collective kernel (the most: see `narrow`).
    pub threads: u32,
    /// Operations of the line protocols with few lines launch narrower
    /// blocks (not when `COLLBENCH_CUDA_THREADS` fixes the width).
    pub narrow: bool,
    pub timeout: Duration,
    pub timing: Timing,
    /// The protocol of every operation (None: low-latency for steps that
    /// fit its slots, simple otherwise).
    pub proto: Option<Proto>,
    /// Programs that only copy within a rank run in the kernel too
    /// (`COLLBENCH_CUDA_COPIES=kernel`), not as the device's copies.
    pub kernel_copies: bool,
    /// Connections between GPUs go through pinned host memory even where
    /// the GPUs reach each other peer-to-peer (`COLLBENCH_CUDA_P2P=off`).
    pub no_p2p: bool,
}

impl CudaOptions {
    /// The defaults for `kind`, with simple-protocol slots of `slot_bytes`
    /// and the environment's `knobs`.
    pub fn new(
        kind: Kind,
        slot_bytes: usize,
        timeout: Duration,
        timing: Timing,
        knobs: EnvKnobs,
    ) -> CudaOptions {
        let slot_bytes = slot_bytes.next_multiple_of(16).max(64);
        let fixed = match kind {
            Kind::Cuda => knobs.threads,
            Kind::Emu => None,
        };
        tracing::debug!(?knobs, "CUDA executor knobs from the environment");
        CudaOptions {
            shape: ConnShape {
                slots: 4,
                slot_bytes,
                // Half of a line is payload: the same payload as a simple slot, at most 16 KiB.
                ll_slot_bytes: (2 * slot_bytes).min(32 << 10),
                // The same payload as a simple slot.
                ll128_slot_bytes: ConnShape::ll128_for(slot_bytes),
            },
            threads: match (kind, fixed) {
                (Kind::Cuda, Some(t)) => t,
                (Kind::Cuda, None) => 512,
                (Kind::Emu, _) => 1,
            },
            narrow: fixed.is_none(),
            timeout,
            timing,
            proto: None,
            kernel_copies: knobs.kernel_copies,
            no_p2p: knobs.no_p2p,
        }
    }
}

/// The CUDA executor's tuning knobs in the environment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnvKnobs {
    /// `COLLBENCH_CUDA_THREADS`: threads per block of the collective
    /// kernel, fixed for every operation (a multiple of 32 from 32 to 1024).
    pub threads: Option<u32>,
    /// `COLLBENCH_CUDA_COPIES=kernel`: a program that only copies within
    /// the rank runs in the collective kernel like any other (to measure the
    /// kernel's copy); `driver` (the default): as the device's copies.
    pub kernel_copies: bool,
    /// `COLLBENCH_CUDA_P2P=off`: connections between GPUs of one process
    /// through pinned host memory, as where peer access is impossible;
    /// `auto` (the default): peer-to-peer where the GPUs allow it.
    pub no_p2p: bool,
}

impl EnvKnobs {
    /// The knobs of this process's environment; a bad value is an error
    /// naming its variable and what it takes (an empty one is unset).
    pub fn from_env() -> Result<EnvKnobs, String> {
        EnvKnobs::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(env: impl Fn(&str) -> Option<String>) -> Result<EnvKnobs, String> {
        let get = |k: &str| {
            env(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let threads = match get("COLLBENCH_CUDA_THREADS") {
            None => None,
            Some(v) => Some(
                v.parse::<u32>()
                    .ok()
                    .filter(|t| (32..=1024).contains(t) && t % 32 == 0)
                    .ok_or_else(|| {
                        format!("COLLBENCH_CUDA_THREADS={v:?}: expected threads per block, a multiple of 32 from 32 to 1024")
                    })?,
            ),
        };
        let kernel_copies = match get("COLLBENCH_CUDA_COPIES") {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("kernel") => true,
            Some(v) if v.eq_ignore_ascii_case("driver") => false,
            Some(v) => {
                return Err(format!(
                    "COLLBENCH_CUDA_COPIES={v:?}: expected kernel or driver (who runs a program that only copies within its rank)"
                ))
            }
        };
        let no_p2p = match get("COLLBENCH_CUDA_P2P") {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("auto") => false,
            Some(v) if v.eq_ignore_ascii_case("off") => true,
            Some(v) => {
                return Err(format!(
                    "COLLBENCH_CUDA_P2P={v:?}: expected auto or off (whether connections between GPUs go peer-to-peer where the GPUs allow it)"
                ))
            }
        };
        Ok(EnvKnobs {
            threads,
            kernel_copies,
            no_p2p,
        })
    }
}

/// `CbStatus::rank` when the host (not a rank) stopped the kernels.
const HOST: u64 = u64::MAX;

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

/// Who shares the devices a memory budget is for.
#[derive(Clone, Copy, Debug)]
pub enum Here<'a> {
    /// `n` ranks of this process, round-robin over the devices.
    Threads(usize),
    /// This process's one rank, `node_rank` of the `node_size` ranks of its
    /// node, on the GPU `gpu_map` (or its node rank) gives it.
    Process {
        node_rank: usize,
        node_size: usize,
        gpu_map: Option<&'a [usize]>,
    },
}

/// Room for buffers on the devices ranks of `kind` would use: (free bytes
/// of the most crowded device, ranks on it, bytes each rank needs beyond
/// its buffers). A rank process looks at its own GPU only (and so opens no
/// context on the others). `None` when the devices cannot be opened (the
/// world's own checks then say why).
pub fn memory_budget(kind: Kind, here: Here, opts: &CudaOptions) -> Option<(u64, usize, u64)> {
    let devices = match open_devices(kind) {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!(kind = kind.name(), error = %e, "memory budget: devices do not open");
            return None;
        }
    };
    let (free, per_device) = match here {
        Here::Threads(nranks) => {
            let used = devices.len().min(nranks).max(1);
            let free = devices
                .iter()
                .take(used)
                .filter_map(|d| d.mem_info().ok().map(|m| m.0))
                .min()?;
            (free, nranks.div_ceil(used))
        }
        Here::Process {
            node_rank,
            node_size,
            gpu_map,
        } => {
            // A map the world refuses is said there.
            let placement =
                spread::node_placement(gpu_map, node_size.max(node_rank + 1), devices.len())
                    .ok()?;
            let mine = *placement.get(node_rank)?;
            let sharing = placement.iter().filter(|&&d| d == mine).count();
            (devices.get(mine)?.mem_info().ok()?.0, sharing)
        }
    };
    let overhead = rank_overhead(opts) as u64;
    tracing::debug!(
        kind = kind.name(),
        ?here,
        free_bytes = free,
        ranks_per_device = per_device,
        overhead_bytes_per_rank = overhead,
        "memory budget"
    );
    Some((free, per_device, overhead))
}

/// Device bytes a rank holds beyond its buffers: connections (an
/// estimate: four channels of up to MAX_PEERS peers each way), tables.
fn rank_overhead(opts: &CudaOptions) -> usize {
    opts.shape.bytes() * 4 * MAX_PEERS + (1 << 20)
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
    status: Mapped,
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
    /// What runs `--engine nccl` operations, when the sweep has them.
    library: Option<library::Library>,
    /// Blocks a rank's program may use when channels are `auto`, per variant.
    auto: Mutex<HashMap<Variant, usize>>,
}

enum Owned {
    Dev(DevPtr),
    Mapped(Mapped),
}

/// The pairs of `devices` (sender, receiver by index) whose connections go
/// peer-to-peer: the sender's GPU reaches the receiver's memory and peer
/// access could be enabled (a GPU reaches only so many peers); none with
/// one device or `no_p2p`.
fn peer_pairs(devices: &[Arc<dyn Device>], no_p2p: bool) -> HashSet<(usize, usize)> {
    let mut pairs = HashSet::new();
    if devices.len() < 2 {
        return pairs;
    }
    if no_p2p {
        tracing::info!("connections between GPUs through host memory (COLLBENCH_CUDA_P2P=off)");
        return pairs;
    }
    for (a, da) in devices.iter().enumerate() {
        for (b, db) in devices.iter().enumerate() {
            let to = db.desc().ordinal;
            if a == b || !da.can_access_peer(to) {
                continue;
            }
            match da.enable_peer(to) {
                Ok(()) => {
                    pairs.insert((a, b));
                }
                Err(e) => tracing::info!(
                    from = da.desc().ordinal,
                    to,
                    error = %e,
                    "no peer access: connections through host memory"
                ),
            }
        }
    }
    let all = devices.len() * (devices.len() - 1);
    tracing::info!(
        peer_to_peer = pairs.len(),
        of = all,
        "connections between GPUs: peer-to-peer where the pair allows it, else pinned host memory"
    );
    pairs
}

/// Where a world's ranks run: each rank's device (index into `devices`),
/// the ranks on each device, and across processes how to reach the others.
struct Placed {
    of_rank: Vec<usize>,
    load: Vec<usize>,
    spread: Option<spread::Spread>,
    devices: Vec<Arc<dyn Device>>,
}

/// Places `nranks` ranks on `devices`: round-robin in one process (the
/// devices used kept), or this process's one rank on its GPU, its peers
/// agreed with (the relay then takes the simple protocol only).
fn place(
    kind: Kind,
    nranks: usize,
    devices: Vec<Arc<dyn Device>>,
    across: Option<Across>,
    opts: &mut CudaOptions,
    nccl: bool,
) -> Result<Placed, ExecError> {
    Ok(match across {
        None => {
            let of_rank: Vec<usize> = (0..nranks).map(|r| r % devices.len()).collect();
            let used = devices.len().min(nranks);
            tracing::info!(
                kind = kind.name(),
                nranks,
                devices = used,
                virtual_ranks = nranks > used,
                spans_devices = used > 1,
                threads = opts.threads,
                "CUDA world: ranks placed round-robin on devices"
            );
            let devices: Vec<Arc<dyn Device>> = devices.into_iter().take(used).collect();
            let load = (0..used)
                .map(|i| of_rank.iter().filter(|&&x| x == i).count())
                .collect();
            Placed {
                of_rank,
                load,
                spread: None,
                devices,
            }
        }
        Some(a) => {
            if nccl {
                return Err(ExecError::Setup(
                    "--engine nccl across processes is not supported yet: run one process with --ranks N for NCCL's rows".into(),
                ));
            }
            let di = spread::pick_device(&*a.procs, a.gpu_map.as_deref(), devices.len())?;
            let sp = spread::Spread::open(a.procs, &devices, di, a.allow_shared)?;
            if sp.relayed() {
                opts.proto = match opts.proto {
                    None | Some(Proto::Simple) => Some(Proto::Simple),
                    Some(p) => {
                        return Err(ExecError::Setup(format!(
                            "--protocol {}: connections through the relay (to another node, or COLLBENCH_FORCE_RELAY=1) run the simple protocol only",
                            p.name()
                        )))
                    }
                };
            }
            let mut load = vec![0; devices.len()];
            load[di] = sp.sharing;
            Placed {
                of_rank: vec![di; nranks],
                load,
                spread: Some(sp),
                devices,
            }
        }
    })
}

/// Refuses a layout that cannot run: more ranks on a GPU than its hardware
/// queues (their persistent kernels could wait on each other), or buffers
/// and connections past 90% of a device's free memory.
fn check_devices(
    devices: &[Arc<dyn Device>],
    load: &[usize],
    spread: bool,
    bytes: [usize; 3],
    opts: &CudaOptions,
) -> Result<(), ExecError> {
    for (i, d) in devices.iter().enumerate() {
        let here = load[i];
        if here == 0 {
            continue;
        }
        let desc = d.desc();
        if !spread && here as u32 > desc.connections {
            return Err(ExecError::Setup(format!(
                "{here} ranks share GPU {} ({}), more than its {} hardware queues (CUDA_DEVICE_MAX_CONNECTIONS): their persistent kernels could wait on each other forever; use --ranks {} or fewer per GPU",
                desc.ordinal, desc.name, desc.connections, desc.connections
            )));
        }
        // Saturating: buffers past the address space must read as too
        // large, never wrap to a small need.
        let per_rank = bytes.iter().fold(0usize, |a, &b| a.saturating_add(b));
        let conn = rank_overhead(opts);
        let need = (per_rank.saturating_add(conn) as u64).saturating_mul(here as u64);
        let (free, _) = d.mem_info().map_err(dev_err)?;
        tracing::debug!(
            ordinal = desc.ordinal,
            ranks = here,
            queues = desc.connections,
            buffer_bytes_per_rank = per_rank,
            connection_bytes_per_rank = conn,
            need_bytes = need,
            free_bytes = free,
            "device memory check (need <= 90% of free)"
        );
        if need > free / 10 * 9 {
            return Err(ExecError::Setup(format!(
                "not enough memory on GPU {} ({}): {} x {} of buffers and connections need {}, but {} is free; lower --sizes' maximum or --ranks",
                desc.ordinal,
                desc.name,
                crate::units::count_of(here, "rank"),
                crate::units::Bytes(per_rank.saturating_add(conn) as u64),
                crate::units::Bytes(need),
                crate::units::Bytes(free)
            )));
        }
    }
    Ok(())
}

/// Why `--protocol ll128` is refused where connections are not one GPU's
/// own memory: between rank processes (CUDA IPC or host memory), or
/// between `gpus` GPUs of one process (peer GPU or host-mapped memory).
pub fn ll128_refused(across_processes: bool, gpus: usize) -> String {
    let how = if across_processes {
        "ranks in processes of their own exchange through CUDA IPC or host memory".to_string()
    } else {
        format!("ranks on {gpus} GPUs exchange through peer GPU or host-mapped memory")
    };
    format!(
        "--protocol ll128: {how}, where a 128-byte line can arrive in pieces and be read torn; LL128 runs between ranks sharing one GPU in one process; use --protocol ll, simple or auto"
    )
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
        let nranks = host.nranks();
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
        let Placed {
            of_rank,
            load,
            spread,
            devices,
        } = place(kind, nranks, devices, across, &mut opts, nccl)?;
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
        let status = devices[home]
            .alloc_mapped(std::mem::size_of::<CbStatus>())
            .map_err(dev_err)?;
        let mut world = CudaWorld {
            kind,
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
            blocks = sp.agree_min(blocks, "auto channels")?;
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
        let p = if !direct {
            let mapped = d.alloc_mapped(bytes).map_err(dev_err)?;
            self.own(dev, Owned::Mapped(mapped));
            mapped.dev
        } else {
            let p = d.alloc(bytes).map_err(dev_err)?;
            self.own(dev, Owned::Dev(p));
            let s = self.setup_stream(dev)?;
            d.memset(s, p, 0, bytes).map_err(dev_err)?;
            d.sync(s).map_err(dev_err)?;
            p
        };
        m.insert(key, p);
        Ok(p)
    }

    fn status(&self) -> CbStatus {
        // SAFETY: the mapped status outlives the world; kernels write it
        // with system-scope stores, so a volatile read sees them.
        unsafe { std::ptr::read_volatile(self.status.host as *const CbStatus) }
    }

    /// Tells every kernel of the world to stop (the host gives up).
    fn stop_kernels(&self) {
        let p = self.status.host as *mut u64;
        // SAFETY: `abort` is the first word of the mapped status; the
        // kernels compare-and-swap it from 0, so use an atomic here too.
        let abort = unsafe { &*(p as *const std::sync::atomic::AtomicU64) };
        if abort
            .compare_exchange(
                0,
                1,
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
            )
            .is_ok()
        {
            // SAFETY: the record's words follow `abort`; nobody else writes them now.
            unsafe { std::ptr::write_volatile(p.add(1), HOST) };
            abort.store(2, std::sync::atomic::Ordering::SeqCst);
        }
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
            words: (0, 0),
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
            sp.close(&self.devices[home]);
        }
        let owned = self.owned.get_mut().map(std::mem::take).unwrap_or_default();
        for (dev, o) in owned {
            let d = &self.devices[dev];
            let _ = match o {
                Owned::Dev(p) => d.free(p),
                Owned::Mapped(m) => d.free_mapped(m),
            };
        }
        let _ = self.devices[home].free_mapped(self.status);
    }
}

mod data;
mod library;
mod rank;
mod spread;
pub use spread::{first_shared, node_placement, shared_gpu_refusal};

pub use rank::CudaRank;

#[cfg(test)]
mod tests {
    use super::EnvKnobs;

    fn knobs(vars: &[(&str, &str)]) -> Result<EnvKnobs, String> {
        EnvKnobs::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn the_environments_knobs_are_read_and_a_bad_one_is_named() {
        assert_eq!(knobs(&[]), Ok(EnvKnobs::default()));
        let k = knobs(&[
            ("COLLBENCH_CUDA_THREADS", " 256 "),
            ("COLLBENCH_CUDA_COPIES", "Kernel"),
        ]);
        assert_eq!(
            k,
            Ok(EnvKnobs {
                threads: Some(256),
                kernel_copies: true,
                no_p2p: false,
            })
        );
        let empty = [
            ("COLLBENCH_CUDA_THREADS", ""),
            ("COLLBENCH_CUDA_COPIES", " "),
        ];
        assert_eq!(knobs(&empty), Ok(EnvKnobs::default()));
        assert_eq!(
            knobs(&[
                ("COLLBENCH_CUDA_COPIES", "driver"),
                ("COLLBENCH_CUDA_P2P", "Auto")
            ]),
            Ok(EnvKnobs::default())
        );
        assert_eq!(
            knobs(&[("COLLBENCH_CUDA_P2P", "off")]).map(|k| k.no_p2p),
            Ok(true)
        );
        for (var, bad) in [
            ("COLLBENCH_CUDA_THREADS", "100"),
            ("COLLBENCH_CUDA_THREADS", "2048"),
            ("COLLBENCH_CUDA_THREADS", "0"),
            ("COLLBENCH_CUDA_THREADS", "lots"),
            ("COLLBENCH_CUDA_COPIES", "gpu"),
            ("COLLBENCH_CUDA_P2P", "on"),
        ] {
            let e = knobs(&[(var, bad)]).unwrap_err();
            assert!(e.contains(var) && e.contains(bad), "{var}={bad}: {e}");
        }
    }
}
