//! The device a sweep runs on: the CUDA engine (a GPU, or the emulated
//! one) or the host engine, what `auto` picks and says, the notes on flags
//! the device leaves unused, and the memory the sweep's buffers have there.

use super::*;

/// The engine's device, as `meta.device` names it, with a line for people
/// (for `auto`) and the devices used, as `meta.devices` lists them.
pub(crate) struct Chosen {
    /// The CUDA executor's device (None: the host engine).
    pub gpu: Option<GpuKind>,
    pub timing: Timing,
    /// Whether the timed loop is captured in a CUDA graph.
    pub graph: bool,
    pub device: String,
    pub note: Option<String>,
    /// Flags accepted that change nothing on this device, one line each.
    pub notes: Vec<String>,
    pub devices: Vec<String>,
    /// The GPUs used (none on the host engine).
    pub gpus: Vec<crate::report::Gpu>,
}

impl Chosen {
    /// Says on stderr which device runs and what of the request goes unused.
    pub(crate) fn tell(&self) {
        if let Some(n) = &self.note {
            say!("collbench: {n}");
        }
        for n in &self.notes {
            say!("collbench: note: {n}");
        }
    }
}

/// Whether NVRTC loads, or why not.
pub(super) fn nvrtc_usable() -> Result<(), crate::engine::exec::cuda::LoadError> {
    crate::engine::exec::cuda::Nvrtc::get().map(|_| ())
}

/// Picks the engine's device for sweep `s` and the timing that goes with
/// it. `node`: when ranks are processes (MPI, `--procs`), how many run on
/// this node (`auto` then takes the GPUs only if each rank gets its own).
pub(crate) fn choose_device(s: &Sweep, node: Option<usize>) -> anyhow::Result<Chosen> {
    let picked = pick(s, node)?;
    let gpu = picked.gpu;
    check_engines(s, gpu, node.is_some())?;
    let timing = match (s.timing, gpu) {
        (Some(TimingChoice::Events), None) => bail!(
            "--timing events needs the CUDA engine; the host engine times with the wall clock"
        ),
        (Some(TimingChoice::Wall), _) | (_, None) => Timing::Wall,
        _ => Timing::Events,
    };
    let mut notes = s.notes.clone();
    notes.extend(unused_here(s, gpu));
    let graph = match (s.plan.graph, gpu) {
        (GraphAsk::Required, None) => {
            bail!("--graph needs the CUDA engine (--device cuda or cuda-emu)")
        }
        (GraphAsk::IfCuda, None) => {
            notes.push(
                "-G: the host engine has no CUDA graphs; the timed loop runs as it is".into(),
            );
            false
        }
        (GraphAsk::No, _) => false,
        (_, Some(_)) => true,
    };
    let between_ops = |i: &&crate::harness::inject::Inject| {
        matches!(
            i.fault,
            crate::harness::inject::Fault::Hang | crate::harness::inject::Fault::Delay { .. }
        )
    };
    if let Some(i) = s.plan.injects.iter().find(between_ops).filter(|_| graph) {
        notes.push(format!(
            "--inject {i}: hangs and delays come between operations, and under --graph each case's timed operations are one graph launch: only a warm-up or check operation is hit"
        ));
    }
    let device = gpu.map_or("host", |k| k.name()).to_string();
    notes.extend(tuning_elsewhere(s, &device));
    tracing::info!(device, asked = ?s.device, ?timing, devices = ?picked.devices, "device chosen");
    Ok(Chosen {
        gpu,
        timing,
        graph,
        device,
        note: picked.note,
        notes,
        devices: picked.devices,
        gpus: picked.gpus,
    })
}

/// The device `--device` asks for, as found on this machine.
struct Picked {
    gpu: Option<GpuKind>,
    /// What `auto` chose and why.
    note: Option<String>,
    /// The devices used, a line each.
    devices: Vec<String>,
    gpus: Vec<crate::report::Gpu>,
}

/// Finds the device `s.device` names (`auto`: a GPU with NVRTC, unless
/// rank processes outnumber the node's GPUs or MPI's own collectives run,
/// else the host engine).
fn pick(s: &Sweep, node: Option<usize>) -> anyhow::Result<Picked> {
    let ranks = s.plan.ranks;
    let ranks_n = crate::units::count_of(ranks, "rank");
    // The GPUs the ranks use: lines for people, and name and bus id for
    // nccl-tests' device lines.
    let on_gpus = |d: &cuda_device::Devices, note: Option<String>| -> Picked {
        let n = d.devices.len().min(ranks).max(1);
        let used = &d.devices[..n.min(d.devices.len())];
        let devices: Vec<String> = used
            .iter()
            .map(|x| {
                format!(
                    "GPU {}: {} ({}, {} SMs)",
                    x.ordinal, x.name, x.arch, x.multiprocessors
                )
            })
            .collect();
        Picked {
            gpu: Some(GpuKind::Cuda),
            note: note.map(|n| format!("{n}: {} ({ranks_n})", devices.join(", "))),
            devices,
            gpus: used
                .iter()
                .map(|x| crate::report::Gpu {
                    name: x.name.clone(),
                    bus_id: x.bus_id.clone(),
                })
                .collect(),
        }
    };
    let host = |note: String| Picked {
        gpu: None,
        note: Some(note),
        devices: Vec::new(),
        gpus: Vec::new(),
    };
    Ok(match s.device {
        DeviceChoice::Cuda => {
            let d = cuda_device::probe().map_err(|why| {
                anyhow!("--device cuda: no usable GPU ({why}); use --device host, auto, or cuda-emu")
            })?;
            nvrtc_usable().map_err(|why| {
                anyhow!("--device cuda needs NVRTC to compile its kernels: {why}")
            })?;
            on_gpus(&d, None)
        }
        DeviceChoice::CudaEmu => {
            let cfg = crate::engine::exec::cuda::dev::emu::EmuConfig::from_env()
                .map_err(|e| anyhow!("--device cuda-emu: {e}"))?;
            let n = cfg.gpus.min(ranks).max(1);
            Picked {
                gpu: Some(GpuKind::Emu),
                note: None,
                devices: vec![format!("{n} x collbench emulated GPU (CPU threads)")],
                gpus: (0..n)
                    .map(|i| crate::report::Gpu {
                        name: "collbench emulated GPU".into(),
                        bus_id: format!("emu:{i:02x}:00"),
                    })
                    .collect(),
            }
        }
        DeviceChoice::Host => Picked {
            gpu: None,
            note: None,
            devices: Vec::new(),
            gpus: Vec::new(),
        },
        DeviceChoice::Auto => match cuda_device::probe() {
            Ok(_) if node.is_some() && s.plan.engines.contains(&Engine::Mpi) => host(format!(
                "--engine mpi runs on host buffers: every process runs on the host engine ({ranks_n})"
            )),
            Ok(d) if node.is_some_and(|n| n > d.devices.len()) && !s.plan.allow_shared_gpu => {
                host(format!(
                    "{} ranks on this node and {} GPU(s): running on the host engine ({ranks_n}; --device cuda --allow-shared-gpu shares the GPUs)",
                    node.unwrap_or(0),
                    d.devices.len()
                ))
            }
            Ok(d) => match nvrtc_usable() {
                Ok(()) => on_gpus(&d, Some("running on the CUDA engine".into())),
                Err(why) => host(format!(
                    "GPU found, but NVRTC is not usable ({why}): running on the host engine ({ranks_n})"
                )),
            },
            Err(why) => host(format!(
                "no usable GPU ({why}): running on the host engine ({ranks_n})"
            )),
        },
    })
}

/// Refuses engines the device cannot run: NCCL needs the CUDA engine, MPI
/// the host engine under an MPI launch.
fn check_engines(s: &Sweep, gpu: Option<GpuKind>, mpi_world: bool) -> anyhow::Result<()> {
    if let Some(e) = s.plan.engines.iter().find(|e| match e {
        Engine::Builtin => false,
        Engine::Mpi => !(mpi_world && gpu.is_none()),
        Engine::Nccl => gpu.is_none(),
    }) {
        bail!(match e {
            Engine::Nccl => "--engine nccl runs on the CUDA engine: add --device cuda (or cuda-emu for its stand-in)".to_string(),
            _ if gpu.is_some() => "--engine mpi runs on the host engine only: add --device host".into(),
            _ if cfg!(feature = "mpi") => "--engine mpi needs an MPI launch: mpirun -np N collbench ...".into(),
            _ => "--engine mpi needs a build with MPI (cargo build --release --features mpi) and an MPI launch".into(),
        });
    }
    Ok(())
}

/// A note for each flag the sweep gave that changes nothing here: the
/// builtin engine's knobs under a library engine alone, the CUDA engine's
/// on the host engine.
fn unused_here(s: &Sweep, gpu: Option<GpuKind>) -> Vec<String> {
    let mut notes = Vec::new();
    if !s.plan.engines.contains(&Engine::Builtin) {
        // NCCL and MPI choose their own algorithms, protocols, channels.
        let library: Vec<&str> = s.plan.engines.iter().map(|e| e.name()).collect();
        let library = library.join(",");
        let given = [
            (
                "--algo",
                matches!(s.plan.algos, harness::plan::AlgoChoice::List(_)),
            ),
            ("--protocol", s.plan.protocol.is_some()),
            ("--channels", s.plan.channels != 0),
        ];
        for (flag, _) in given.iter().filter(|(_, g)| *g) {
            notes.push(format!(
                "{flag}: the builtin engine's; --engine {library} chooses its own, so it is unused"
            ));
        }
    }
    if gpu.is_some() {
        return notes;
    }
    if let Some(p) = s.plan.protocol {
        notes.push(format!(
            "--protocol {}: the protocols are the CUDA engine's; the host engine moves whole slots, so it is unused",
            p.name()
        ));
    }
    if s.plan.gpu_map.is_some() {
        notes.push(
            "--gpu-map (or COLLBENCH_GPU_MAP): the host engine uses no GPU, so it is unused".into(),
        );
    }
    if s.plan.allow_shared_gpu {
        notes.push("--allow-shared-gpu: the host engine uses no GPU, so it is unused".into());
    }
    notes
}

/// A note when `--tuning`'s table was fitted on another kind of device: it
/// predicts that device.
fn tuning_elsewhere(s: &Sweep, device: &str) -> Option<String> {
    let t = s.plan.tuning.as_ref()?;
    let fitted = t.meta.device.as_str();
    if fitted.is_empty() || fitted == "given" || fitted == device {
        return None;
    }
    Some(format!(
        "--tuning: the table was fitted on {fitted}{}, and this sweep runs on {device}: its predictions and auto's picks are {fitted}'s",
        if t.meta.host.is_empty() {
            String::new()
        } else {
            format!(" (host {})", t.meta.host)
        }
    ))
}

/// `None` when the devices cannot be opened (the run then says why).
pub(super) fn budget(plan: &Plan, chosen: &Chosen, here: Here) -> Option<harness::Budget> {
    use crate::engine::exec::cuda::launch::{memory_budget, CudaOptions};
    let Some(kind) = chosen.gpu else {
        let b = harness::Budget::Host;
        let available = b
            .available()
            .map_or("unknown".into(), |a| Bytes(a).to_string());
        tracing::info!(available, "memory budget: host");
        return Some(b);
    };
    let mut opts = CudaOptions::new(
        kind,
        plan.slot_bytes,
        plan.timeout(),
        chosen.timing,
        plan.cuda_knobs,
    );
    opts.channels = plan.channels;
    opts.peers = Some(harness::peers_per_channel(
        plan,
        &crate::harness::plan::cases(plan).0,
    ));
    // A group's ways of running each hold connections of their own: the
    // peers a channel hears from count them (each way's channels are
    // tags of their own in the group's program).
    let (free, ranks, extra, limit) = memory_budget(kind, here, &opts)?;
    tracing::info!(
        free = %Bytes(free),
        ranks_on_busiest = ranks,
        per_rank_extra = %Bytes(extra),
        "memory budget: device"
    );
    Some(harness::Budget::Device {
        free,
        ranks,
        extra,
        limit,
    })
}

/// `--procs N` on the CUDA engine: the GPU of each of the N ranks (from
/// `--gpu-map` or round-robin) exists and, unless `--allow-shared-gpu`,
/// is no other rank's.
pub(super) fn check_node_placement(kind: GpuKind, plan: &Plan, n: usize) -> anyhow::Result<()> {
    use crate::engine::exec::cuda::launch::{first_shared, node_placement, shared_gpu_refusal};
    let ndevices = match kind {
        GpuKind::Cuda => match cuda_device::probe() {
            Ok(d) => d.devices.len(),
            // The ranks say why.
            Err(_) => return Ok(()),
        },
        GpuKind::Emu => {
            crate::engine::exec::cuda::dev::emu::EmuConfig::from_env()
                .map_err(|e| anyhow!("--device cuda-emu: {e}"))?
                .gpus
        }
    };
    let placement = node_placement(plan.gpu_map.as_deref(), n, ndevices).map_err(|e| anyhow!(e))?;
    if let (Some((gpu, with)), false) = (first_shared(&placement), plan.allow_shared_gpu) {
        bail!(shared_gpu_refusal(
            &with,
            format_args!("{gpu} of this node")
        ));
    }
    Ok(())
}
