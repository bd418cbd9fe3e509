//! Where a world's ranks go and whether they fit: placement on devices
//! (round-robin, or one rank per process), the hardware-queue and memory
//! checks, the memory budget a sweep is cut to, which GPU pairs go
//! peer-to-peer, and where LL128 may run.

use super::*;

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
/// its buffers, what the room is). Emulated GPUs are all host memory: where
/// the host's room shared by every rank (of the process, or of the node's
/// rank processes) is tighter than one device's, it is that. A rank process looks at its own GPU only (and so opens no
/// context on the others). `None` when the devices cannot be opened (the
/// world's own checks then say why).
pub fn memory_budget(
    kind: Kind,
    here: Here,
    opts: &CudaOptions,
) -> Option<(u64, usize, u64, &'static str)> {
    let devices = match open_devices(kind) {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!(kind = kind.name(), error = %e, "memory budget: devices do not open");
            return None;
        }
    };
    // Free memory of the most crowded device, the ranks on it, and the
    // overhead of each of them.
    let (free, per_device, overhead) = match here {
        Here::Threads(nranks) => {
            let used = devices.len().min(nranks).max(1);
            let free = devices
                .iter()
                .take(used)
                .filter_map(|d| d.mem_info().ok().map(|m| m.0))
                .min()?;
            let per_device = nranks.div_ceil(used);
            let overhead = rank_overhead(opts, Some(nranks), per_device, false, &*devices[0]);
            (free, per_device, overhead)
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
            let dev = devices.get(mine)?;
            // The world's size is not known here: a channel's most peers.
            let overhead = rank_overhead(opts, None, sharing, true, &**dev);
            (dev.mem_info().ok()?.0, sharing, overhead)
        }
    };
    let overhead = overhead as u64;
    let everyone = match here {
        Here::Threads(n) => n,
        Here::Process { node_size, .. } => node_size.max(1),
    };
    let (free, per_device, limit) = match (kind, crate::engine::exec::mem::available_bytes()) {
        // free / per_device > host / everyone, in whole numbers.
        (Kind::Emu, Some(host))
            if u128::from(free) * everyone as u128 > u128::from(host) * per_device as u128 =>
        {
            (host, everyone, "host memory (every emulated GPU's)")
        }
        _ => (free, per_device, "free device memory"),
    };
    tracing::debug!(
        kind = kind.name(),
        ?here,
        free_bytes = free,
        ranks_per_device = per_device,
        overhead_bytes_per_rank = overhead,
        "memory budget"
    );
    Some((free, per_device, overhead, limit))
}

/// Device bytes a rank holds beyond its buffers, at most: its incoming
/// connections (each the receiver's memory, kept for the world's life; a
/// whole IPC granule each between rank processes of a GPU) and its tables.
/// `nranks` is the world's size where known; `sharing` the ranks on the
/// rank's device.
fn rank_overhead(
    opts: &CudaOptions,
    nranks: Option<usize>,
    sharing: usize,
    ipc: bool,
    dev: &dyn Device,
) -> usize {
    let real = dev.kind() == Kind::Cuda.name();
    let channels = match (opts.channels, real) {
        // The emulated device's auto takes two (a block is a thread).
        (0, false) => 2,
        _ => channels_at_most(opts, dev.desc().multiprocessors, sharing),
    };
    // The sweep's programs say how many peers a channel hears from (a ring
    // one, a direct all-reduce or all-to-all every other rank); unknown,
    // every other rank of the world, or a channel's most in one step.
    let peers = opts
        .peers
        .unwrap_or_else(|| nranks.map_or(MAX_PEERS, |n| n.saturating_sub(1)));
    connection_bytes(opts.shape.bytes(), ipc && real, peers, channels).saturating_add(1 << 20)
}

/// Bytes of a rank's incoming connections, at most: `channels` channels,
/// each hearing from `peers` ranks, each connection `conn` bytes, a whole
/// 2 MiB IPC granule when `ipc`.
fn connection_bytes(conn: usize, ipc: bool, peers: usize, channels: usize) -> usize {
    let conn = if ipc {
        conn.next_multiple_of(super::super::dev::real::IPC_GRANULE)
    } else {
        conn
    };
    conn.saturating_mul(peers).saturating_mul(channels)
}

/// The most channels a rank's programs take on a GPU of `sms`
/// multiprocessors shared by `sharing` ranks: `--channels`, or what auto
/// can give (see `CudaWorld::auto_blocks`) with every multiprocessor
/// holding as many blocks as its 2048 threads allow.
fn channels_at_most(opts: &CudaOptions, sms: u32, sharing: usize) -> usize {
    if opts.channels > 0 {
        return opts.channels.min(MAX_CHANNELS);
    }
    let cap = sms as usize * (2048 / opts.threads.max(32) as usize).max(1);
    let share = if sharing <= 1 { cap } else { cap / 2 / sharing };
    share.clamp(1, MAX_CHANNELS)
}

/// The pairs of `devices` (sender, receiver by index) whose connections go
/// peer-to-peer: the sender's GPU reaches the receiver's memory and peer
/// access could be enabled (a GPU reaches only so many peers); none with
/// one device or `no_p2p`.
pub(super) fn peer_pairs(devices: &[Arc<dyn Device>], no_p2p: bool) -> HashSet<(usize, usize)> {
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
pub(super) struct Placed {
    pub(super) of_rank: Vec<usize>,
    pub(super) load: Vec<usize>,
    pub(super) spread: Option<spread::Spread>,
    pub(super) devices: Vec<Arc<dyn Device>>,
}

/// Places the ranks of `host` on `devices`: round-robin in one process
/// (the devices used kept), or this process's one rank on its GPU, its
/// peers agreed with (the relay then takes the simple protocol only).
pub(super) fn place(
    kind: Kind,
    host: &HostWorld,
    devices: Vec<Arc<dyn Device>>,
    across: Option<Across>,
    opts: &mut CudaOptions,
    nccl: bool,
) -> Result<Placed, ExecError> {
    let nranks = host.nranks();
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
            let sp = spread::Spread::open(a.procs, &devices, di, a.allow_shared, host)?;
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
pub(super) fn check_devices(
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
        // A hardware queue for each rank's stream. The world's setup stream
        // may share one: it zeroes connections only while a case is being
        // prepared, before any rank launches the case's kernels (a barrier
        // follows), so it never waits for a kernel that waits for it.
        if !spread && here as u32 > desc.connections {
            return Err(ExecError::Setup(format!(
                "{here} ranks share GPU {} ({}), more than its {} hardware queues (CUDA_DEVICE_MAX_CONNECTIONS): their persistent kernels could wait on each other forever; use --ranks {} or fewer per GPU",
                desc.ordinal, desc.name, desc.connections, desc.connections
            )));
        }
        // Saturating: buffers past the address space must read as too
        // large, never wrap to a small need.
        let per_rank = bytes.iter().fold(0usize, |a, &b| a.saturating_add(b));
        let nranks = (!spread).then(|| load.iter().sum());
        let conn = rank_overhead(opts, nranks, here, spread, &**d);
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
                "not enough memory on GPU {} ({}): {} x {} of buffers and connections need {}, but may use {} (90% of the {} free); {}",
                desc.ordinal,
                desc.name,
                crate::units::count_of(here, "rank"),
                crate::units::Bytes(per_rank.saturating_add(conn) as u64),
                crate::units::Bytes(need),
                crate::units::Bytes(free / 10 * 9),
                crate::units::Bytes(free),
                crate::engine::exec::world::memory_advice(
                    (conn as u64).saturating_mul(here as u64),
                    free / 10 * 9,
                    crate::engine::exec::world::GroupShape::NONE
                )
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn opts(channels: usize) -> CudaOptions {
        let mut o = CudaOptions::new(
            Kind::Cuda,
            Some(64 << 10),
            Duration::from_secs(1),
            Timing::Events,
            EnvKnobs::default(),
        );
        o.channels = channels;
        o
    }

    /// Auto takes every resident block of a GPU for a lone rank (up to
    /// MAX_CHANNELS) and half of them, split, for ranks sharing one: the
    /// estimate follows, where it once assumed four channels.
    #[test]
    fn channels_follow_the_sweep_or_what_auto_can_give() {
        // 512 threads: at most 4 blocks per SM.
        assert_eq!(channels_at_most(&opts(0), 132, 1), MAX_CHANNELS);
        assert_eq!(channels_at_most(&opts(0), 132, 8), 132 * 4 / 2 / 8);
        assert_eq!(channels_at_most(&opts(0), 1, 16), 1);
        assert_eq!(channels_at_most(&opts(6), 132, 8), 6);
        assert_eq!(channels_at_most(&opts(999), 132, 1), MAX_CHANNELS);
    }

    #[test]
    fn connections_count_peers_channels_and_whole_ipc_granules() {
        let conn = 1 << 20 | 4096;
        // A lone rank hears from nobody.
        assert_eq!(connection_bytes(conn, false, 0, 128), 0);
        // A ring: one peer a channel; a direct all-reduce on 8: seven.
        assert_eq!(connection_bytes(conn, false, 1, 16), conn * 16);
        assert_eq!(connection_bytes(conn, false, 7, 16), conn * 7 * 16);
        // Between processes each connection is a 2 MiB granule.
        assert_eq!(connection_bytes(conn, true, 7, 128), (2 << 20) * 7 * 128);
        assert_eq!(connection_bytes(usize::MAX / 2, false, 4, 128), usize::MAX);
    }
}
