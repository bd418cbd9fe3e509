//! Whether a sweep's buffers fit: host memory for every rank's buffers and
//! FIFOs, or a device's free memory; and the sweep cut to the sizes that do.

use super::plan::{self, Case, Plan};
use super::{rank, HarnessError};
use crate::engine::exec::mem;
use crate::engine::transport::inproc::Fifo;
use crate::units::Bytes;
use std::collections::HashSet;

/// Checks that the sweep's buffers fit in memory before anything is allocated.
pub fn check_memory(plan: &Plan, cases: &[Case]) -> Result<(), HarnessError> {
    check_budget(plan, cases, Budget::Host)
}

/// Where a sweep's buffers live, and the room there.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// Host memory, for every rank: the tightest of `MemAvailable`, the
    /// memory cgroup's room and the address space left (`mem::MemLimits`).
    Host,
    /// The most crowded device: `free` bytes shared by `ranks` ranks, each
    /// also holding `extra` bytes of connections and tables; `limit` says
    /// what the room is (free device memory; the host's, for emulated GPUs).
    Device {
        free: u64,
        ranks: usize,
        extra: u64,
        limit: &'static str,
    },
}

impl Budget {
    pub fn available(self) -> Option<u64> {
        match self {
            Budget::Host => mem::available_bytes(),
            Budget::Device { free, .. } => Some(free),
        }
    }
}

/// What the host world allocates for a sweep's connections: one FIFO per
/// (sender, receiver, channel) any of its cases uses, each of
/// `Fifo::region_bytes(slots, slot_bytes)`, all kept until the world goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostFifos {
    pub links: usize,
    pub bytes_each: u64,
}

impl HostFifos {
    pub fn total(&self) -> u64 {
        self.links as u64 * self.bytes_each
    }
}

/// Counts the FIFOs the host world makes for `cases`: one per connection
/// of the sweep's programs (see `links`), on the plan's channels.
pub fn host_fifos(plan: &Plan, cases: &[Case]) -> HostFifos {
    HostFifos {
        links: links(plan, cases, plan.channels.max(1)).len(),
        bytes_each: Fifo::region_bytes(plan.host.slots, plan.host.slot_bytes) as u64,
    }
}

/// The most ranks one rank hears from on a channel, over the programs of
/// `cases` (two channels generated, so an algorithm that gives channels
/// different peers counts both): what a CUDA rank's incoming connections
/// grow by with each channel.
pub fn peers_per_channel(plan: &Plan, cases: &[Case]) -> usize {
    let mut heard = std::collections::HashMap::<usize, usize>::new();
    for (_, to, _) in links(plan, cases, 2) {
        *heard.entry(to).or_default() += 1;
    }
    heard.values().copied().max().unwrap_or(0).div_ceil(2)
}

/// The connections (sender, receiver, channel) the programs of `cases`
/// use on `channels` channels: every rank's program (generated with one
/// step per block, which changes no connection), per collective,
/// algorithm and root at its largest counts.
fn links(plan: &Plan, cases: &[Case], channels: usize) -> HashSet<(usize, usize, usize)> {
    use crate::engine::algo::{generate, Spec};
    let largest = plan::largest_builtin(
        cases,
        |c| (c.coll, c.algo, c.root, c.group),
        |c| c.counts.send.max(c.counts.recv) as u64,
    );
    let n = plan.ranks;
    let mut links = HashSet::new();
    for c in largest {
        let members = plan.members(c);
        let chunk = members
            .iter()
            .map(|m| m.counts.send.max(m.counts.recv))
            .max()
            .unwrap_or(1)
            .max(1);
        for &placement in &plan.placements {
            for rank in 0..n {
                let specs: Vec<Spec> = members
                    .iter()
                    .map(|m| m.spec(n, rank, placement, channels, chunk))
                    .collect();
                let program = match specs.as_slice() {
                    [one] => generate(one),
                    group => crate::engine::algo::group::generate_group(group).map(|g| g.0),
                };
                match program {
                    Ok(p) => {
                        let sends = p.channels.iter().flat_map(|ch| &ch.steps);
                        for peer in sends.flat_map(|s| s.send.iter()) {
                            links.insert((rank, peer.rank as usize, peer.chan as usize));
                        }
                    }
                    // The run will say why; budget for every pair meanwhile.
                    Err(_) => links.extend(
                        (0..n)
                            .filter(|&to| to != rank)
                            .flat_map(|to| (0..channels).map(move |ch| (rank, to, ch))),
                    ),
                }
            }
        }
    }
    links
}

/// Checks that the sweep's buffers fit `budget`.
pub fn check_budget(plan: &Plan, cases: &[Case], budget: Budget) -> Result<(), HarnessError> {
    let per_rank = rank::buffer_bytes(plan, cases)
        .iter()
        .fold(0usize, |a, &b| a.saturating_add(b));
    match budget {
        Budget::Host => check_host(plan, cases, per_rank as u64),
        Budget::Device {
            free,
            ranks,
            extra,
            limit,
        } => {
            let need = (per_rank as u64)
                .saturating_add(extra)
                .saturating_mul(ranks as u64);
            tracing::debug!(
                need = %Bytes(need),
                per_rank = %Bytes(per_rank as u64),
                extra = %Bytes(extra),
                ranks,
                available = %Bytes(free),
                "memory check (device)"
            );
            if need > free / 10 * 9 {
                return Err(HarnessError::Memory {
                    need: Bytes(need),
                    per_rank: Bytes(per_rank as u64),
                    ranks,
                    extra: Bytes(extra.saturating_mul(ranks as u64)),
                    free: Bytes(free),
                    usable: Bytes(free / 10 * 9),
                    limit,
                    group: plan.group_shape(),
                });
            }
            Ok(())
        }
    }
}

/// Host memory: every rank's buffers and every FIFO must fit in 90% of the
/// resident limit, and with the rank threads' reservations, in the address
/// space left.
fn check_host(plan: &Plan, cases: &[Case], per_rank: u64) -> Result<(), HarnessError> {
    let ranks = plan.ranks;
    let fifos = host_fifos(plan, cases);
    let need = per_rank
        .saturating_mul(ranks as u64)
        .saturating_add(fifos.total());
    let threads = mem::thread_reservation(ranks);
    let limits = mem::MemLimits::read();
    tracing::debug!(
        need = %Bytes(need),
        per_rank = %Bytes(per_rank),
        ranks,
        fifos = fifos.links,
        fifo_bytes = %Bytes(fifos.bytes_each),
        threads_reserve = %Bytes(threads),
        mem_available = ?limits.mem_available,
        cgroup_room = ?limits.cgroup,
        address_space_room = ?limits.address_space,
        "memory check (host)"
    );
    let refuse = |free: u64, usable: u64, limit: &'static str| HarnessError::Memory {
        need: Bytes(need),
        per_rank: Bytes(per_rank),
        ranks,
        extra: Bytes(fifos.total()),
        free: Bytes(free),
        usable: Bytes(usable),
        limit,
        group: plan.group_shape(),
    };
    if let Some(free) = limits.resident() {
        if need > free / 10 * 9 {
            let limit = if limits.cgroup == Some(free) {
                "room left in the memory cgroup"
            } else {
                "MemAvailable"
            };
            return Err(refuse(free, free / 10 * 9, limit));
        }
    }
    if let Some(room) = limits.address_space {
        if need.saturating_add(threads) > room / 10 * 9 {
            return Err(refuse(
                room,
                (room / 10 * 9).saturating_sub(threads),
                "address space left under RLIMIT_AS (ulimit -v), less the rank threads' stacks and arenas",
            ));
        }
    }
    Ok(())
}

/// The largest sizes a sweep dropped so that its buffers fit in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeCap {
    /// The largest size kept.
    pub kept_max: u64,
    /// The sizes dropped, smallest first.
    pub dropped: Vec<u64>,
    /// Memory available when the sweep was planned.
    pub available: u64,
}

/// Drops the largest sizes of `plan` until its buffers fit in memory.
/// Returns what was dropped; `None` when everything fits, or when not even
/// the smallest size fits (then [`run`] refuses with the reason).
pub fn cap_sizes_to_memory(plan: &mut Plan, budget: Budget) -> Option<SizeCap> {
    let fits = |p: &Plan| check_budget(p, &plan::cases(p).0, budget).is_ok();
    if fits(plan) {
        return None;
    }
    let mut trial = plan.clone();
    let mut dropped = Vec::new();
    while trial.sizes.len() > 1 {
        dropped.extend(trial.sizes.pop());
        if fits(&trial) {
            dropped.reverse();
            let cap = SizeCap {
                kept_max: trial.sizes.iter().copied().max().unwrap_or(0),
                dropped,
                available: budget.available().unwrap_or(0),
            };
            plan.sizes = trial.sizes;
            return Some(cap);
        }
    }
    None
}
