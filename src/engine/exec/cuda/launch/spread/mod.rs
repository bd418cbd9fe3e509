//! A CUDA world spread over processes, one rank each (under MPI or
//! `--procs`). A connection's memory belongs to its receiver: within a
//! node the receiver makes it shareable ([`Device::share`]: device memory
//! opened through CUDA IPC, or pinned host memory for GPUs without
//! peer-to-peer access) and sends the handle to the sender, which opens it,
//! so kernels write peers' slots directly as between virtual ranks. To a
//! rank the process does not map (another node, or `COLLBENCH_FORCE_RELAY=1`)
//! each end keeps the connection in host-mapped memory of its own and a
//! bridge thread moves slots between it and a FIFO the relay serves: the
//! sender's slot is copied out as soon as it is posted (freeing it for the
//! kernel while the relay sends the copy), the receiver's filled as soon as
//! the relay delivers and the slot is free. Such worlds run the simple
//! protocol, whose slots carry their length beside the tail.

mod bridge;

use super::super::abi::{ConnKey, ConnShape};
use super::super::dev::{DevPtr, Device, Mapped, ShareKind, Shared};
use crate::engine::exec::world::{ExecError, HostWorld};
use crate::engine::transport::node::ProcessPeers;
use bridge::Bridge;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tag of the messages that carry connection handles.
const CONN_TAG: i32 = 11;

/// Tag of the messages that say a peer closed a connection it opened (or
/// never opened it). They name the connection only: a process holds one
/// spread world, so a word cannot reach another world's memory.
const CLOSED_TAG: i32 = 12;

/// The longest a rank waits, when its world closes, for its peers to close
/// the memory they opened of its (the world's timeout, if shorter).
const CLOSE_WAIT: Duration = Duration::from_secs(30);

/// Relay channels of CUDA connections start here, clear of the host's.
const RELAY_CHAN_BASE: u32 = 1 << 22;

/// Where and how each rank of a spread world is reached.
pub(super) struct Spread {
    pub(super) procs: Arc<dyn ProcessPeers>,
    pub(super) me: usize,
    /// Where this rank's incoming connections live.
    pub(super) kind: ShareKind,
    /// Ranks on this rank's GPU (this one included).
    pub(super) sharing: usize,
    /// Handles received for outgoing connections not asked for yet.
    received: Mutex<HashMap<ConnKey, Vec<u8>>>,
    /// Memory this rank made for its incoming connections and shared,
    /// freed when the world goes, once the sender closed it.
    made: Mutex<Vec<(ConnKey, Shared)>>,
    /// Peers' memory this rank opened (its outgoing connections).
    opened: Mutex<Vec<(ConnKey, Shared)>>,
    bridge: Option<Bridge>,
}

/// What a rank tells its peers when the world opens.
pub(super) struct Card {
    pub host: String,
    pub bus: String,
    pub ordinal: usize,
}

impl Card {
    fn encode(&self) -> String {
        format!("{} {} {}", self.ordinal, self.bus, self.host)
    }

    fn decode(b: &[u8]) -> Option<Card> {
        let text = String::from_utf8_lossy(b);
        let mut w = text.splitn(3, ' ');
        Some(Card {
            ordinal: w.next()?.parse().ok()?,
            bus: w.next()?.to_string(),
            host: w.next()?.to_string(),
        })
    }
}

/// A device's bus id as one word of a placement record.
fn bus_of(d: &dyn Device) -> String {
    d.bus_id().replace(' ', "_")
}

fn setup(what: impl std::fmt::Display) -> ExecError {
    ExecError::Setup(what.to_string())
}

/// The GPU of every rank of a node of `nn` ranks, by node rank:
/// `map[node rank]` when given, else the node rank (round-robin beyond the
/// `ndevices` devices). Judges the whole map, so every rank of the node
/// (and a `--procs` launcher before it starts them) refuses alike.
pub fn node_placement(
    map: Option<&[usize]>,
    nn: usize,
    ndevices: usize,
) -> Result<Vec<usize>, String> {
    let Some(m) = map else {
        return Ok((0..nn).map(|r| r % ndevices.max(1)).collect());
    };
    if m.len() < nn {
        return Err(format!(
            "--gpu-map lists {} GPU(s), but this node runs {nn} ranks: give one GPU per rank of the node",
            m.len()
        ));
    }
    if let Some((nr, &di)) = m[..nn].iter().enumerate().find(|(_, &d)| d >= ndevices) {
        return Err(format!(
            "--gpu-map: GPU {di} for node rank {nr}, but this process sees {ndevices} GPU(s) (0..{})",
            ndevices.saturating_sub(1)
        ));
    }
    Ok(m[..nn].to_vec())
}

/// The first GPU of `placement` (by node rank) that several ranks would
/// share, with those ranks: refused unless `--allow-shared-gpu`.
pub fn first_shared(placement: &[usize]) -> Option<(usize, Vec<usize>)> {
    placement.iter().find_map(|&d| {
        let with: Vec<usize> = (0..placement.len())
            .filter(|&r| placement[r] == d)
            .collect();
        (with.len() > 1).then_some((d, with))
    })
}

/// Why ranks `with` must not share a GPU, and what to do.
pub fn shared_gpu_refusal(with: &[usize], gpu: impl std::fmt::Display) -> String {
    format!(
        "ranks {with:?} would share GPU {gpu}: processes on one GPU time-slice, so their persistent kernels crawl; give each rank its own GPU (--gpu-map) or pass --allow-shared-gpu"
    )
}

/// Which of `devices` this process's rank runs on (see [`node_placement`]).
pub(super) fn pick_device(
    procs: &dyn ProcessPeers,
    map: Option<&[usize]>,
    ndevices: usize,
) -> Result<usize, ExecError> {
    let (nr, nn) = procs.node_rank();
    let placement = node_placement(map, nn.max(nr + 1), ndevices).map_err(setup)?;
    Ok(placement[nr])
}

impl Spread {
    /// Agrees with every rank on who runs where; refuses ranks sharing a
    /// GPU unless `allow_shared`. `dev` is this rank's device (index `di`);
    /// the agreement is left when the run stops (`host` aborted).
    pub(super) fn open(
        procs: Arc<dyn ProcessPeers>,
        devices: &[Arc<dyn Device>],
        di: usize,
        allow_shared: bool,
        host: &HostWorld,
    ) -> Result<Spread, ExecError> {
        let me = procs.rank();
        let dev = &devices[di];
        let mine = Card {
            host: procs.hosts().get(me).cloned().unwrap_or_default(),
            bus: bus_of(&**dev),
            ordinal: dev.desc().ordinal,
        };
        let cards = procs
            .all_gather_until(mine.encode().as_bytes(), None, &|| host.aborted())
            .map_err(|e| match host.aborted() {
                true => ExecError::Aborted,
                false => setup(format!("exchanging GPU placement: {e}")),
            })?
            .iter()
            .enumerate()
            .map(|(r, b)| {
                Card::decode(b)
                    .ok_or_else(|| setup(format!("bad GPU placement record from rank {r}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let same_gpu: Vec<usize> = (0..cards.len())
            .filter(|&r| cards[r].host == mine.host && cards[r].bus == mine.bus)
            .collect();
        // Every rank judges the whole placement, so all refuse alike.
        let shared = (0..cards.len()).find_map(|r| {
            let c = &cards[r];
            let with: Vec<usize> = (0..cards.len())
                .filter(|&q| cards[q].host == c.host && cards[q].bus == c.bus)
                .collect();
            (with.len() > 1).then_some((with, c))
        });
        if let (Some((with, c)), false) = (shared, allow_shared) {
            return Err(setup(shared_gpu_refusal(
                &with,
                format_args!("{} ({}) on {}", c.ordinal, c.bus, c.host),
            )));
        }
        // Device memory when every peer this rank maps reaches its GPU
        // peer-to-peer (or is on it), else pinned host memory.
        let by_bus: HashMap<String, usize> = devices
            .iter()
            .map(|d| (bus_of(&**d), d.desc().ordinal))
            .collect();
        let reach = |r: usize| {
            let c = &cards[r];
            c.bus == mine.bus
                || by_bus
                    .get(&c.bus)
                    .and_then(|&o| devices.iter().find(|d| d.desc().ordinal == o))
                    .is_some_and(|d| {
                        d.can_access_peer(mine.ordinal) && dev.can_access_peer(d.desc().ordinal)
                    })
        };
        let mapped: Vec<usize> = (0..cards.len())
            .filter(|&r| r != me && procs.maps(r))
            .collect();
        let kind = if mapped.iter().all(|&r| reach(r)) {
            ShareKind::Device
        } else {
            ShareKind::Host
        };
        let relayed = (0..cards.len()).any(|r| r != me && !procs.maps(r));
        let bridge = match (relayed, procs.relay()) {
            (false, _) => None,
            (true, Some(relay)) => Some(Bridge::start(relay).map_err(setup)?),
            (true, None) => {
                return Err(setup(format!(
                    "rank {me} cannot reach every rank: no relay between nodes"
                )))
            }
        };
        tracing::info!(
            rank = me,
            gpu = mine.ordinal,
            bus = %mine.bus,
            sharing = same_gpu.len(),
            connections = ?kind,
            ipc_peers = ?mapped,
            relayed,
            "CUDA world across processes"
        );
        Ok(Spread {
            procs,
            me,
            kind,
            sharing: same_gpu.len(),
            received: Mutex::new(HashMap::new()),
            made: Mutex::new(Vec::new()),
            opened: Mutex::new(Vec::new()),
            bridge,
        })
    }

    /// Every rank's `n` folded into one (`fold`: the least auto channels
    /// each rank's own GPU allows, the protocol that carries the most any
    /// rank's messages need): what must be one for the whole world, or the
    /// ranks' programs differ and wait on what no peer does. Collective:
    /// every rank calls it at the same point; left when the run stops
    /// (`host` aborted), and after `timeout` (a hang: a rank that never
    /// comes stopped between operations, where no watchdog sees it;
    /// `--timeout 0` waits for ever).
    pub(super) fn agree(
        &self,
        n: usize,
        what: &str,
        host: &HostWorld,
        timeout: Duration,
        fold: fn(usize, usize) -> usize,
    ) -> Result<usize, ExecError> {
        let start = Instant::now();
        let all = self
            .procs
            .all_gather_until(&(n as u64).to_le_bytes(), Some(timeout), &|| host.aborted())
            .map_err(|e| {
                if host.aborted() {
                    ExecError::Aborted
                } else if start.elapsed() >= timeout {
                    ExecError::SetupTimeout {
                        rank: self.me,
                        what: format!("every rank's {what}: is every rank still running?"),
                        waited: start.elapsed(),
                    }
                } else {
                    setup(format!("agreeing on {what}: {e}"))
                }
            })?;
        let mut agreed = n;
        for (r, b) in all.iter().enumerate() {
            let b: [u8; 8] = b
                .as_slice()
                .try_into()
                .map_err(|_| setup(format!("bad {what} from rank {r}")))?;
            agreed = fold(agreed, u64::from_le_bytes(b) as usize);
        }
        Ok(agreed)
    }

    /// Whether any connection goes through the relay.
    pub(super) fn relayed(&self) -> bool {
        self.bridge.is_some()
    }

    fn keep(list: &Mutex<Vec<(ConnKey, Shared)>>, key: ConnKey, s: Shared) {
        if let Ok(mut v) = list.lock() {
            v.push((key, s));
        }
    }

    /// The memory of connection `key` (this rank at one end), zeroed.
    /// `mapped` makes host-mapped memory of this device (kept by the world).
    pub(super) fn conn(
        &self,
        key: ConnKey,
        dev: &Arc<dyn Device>,
        shape: &ConnShape,
        host: &HostWorld,
        timeout: Duration,
        mapped: &dyn Fn(usize) -> Result<Mapped, ExecError>,
    ) -> Result<DevPtr, ExecError> {
        let peer = if key.from == self.me {
            key.to
        } else {
            key.from
        };
        if key.from != self.me && key.to != self.me {
            return Err(setup(format!(
                "rank {} asked for the connection {} -> {}",
                self.me, key.from, key.to
            )));
        }
        let bytes = shape.bytes();
        if !self.procs.maps(peer) {
            let m = mapped(bytes)?;
            let bridge = self
                .bridge
                .as_ref()
                .ok_or_else(|| setup(format!("no relay to rank {peer}")))?;
            bridge.add(m, key, self.me, shape)?;
            return Ok(m.dev);
        }
        if key.to == self.me {
            let (s, handle) = dev
                .share(bytes, self.kind)
                .map_err(|e| setup(format!("connection memory to share: {e}")))?;
            Self::keep(&self.made, key, s);
            let mut msg = encode_key(key);
            msg.extend_from_slice(&handle);
            self.procs
                .send(key.from, CONN_TAG, &msg)
                .map_err(|e| setup(format!("sending a connection to rank {}: {e}", key.from)))?;
            return Ok(s.dev);
        }
        let handle = self.handle_for(key, host, timeout)?;
        let s = dev.open_shared(&handle).map_err(|e| {
            // Not opened: the owner need not wait for this rank to close it.
            self.say_closed(key);
            setup(format!(
                "opening rank {}'s connection memory (CUDA IPC): {e}",
                key.to
            ))
        })?;
        Self::keep(&self.opened, key, s);
        Ok(s.dev)
    }

    /// Tells the owner of `key`'s memory that this rank does not hold it.
    fn say_closed(&self, key: ConnKey) {
        if let Err(e) = self.procs.send(key.to, CLOSED_TAG, &encode_key(key)) {
            tracing::debug!(error = %e, to = key.to, "saying a connection was closed");
        }
    }

    /// Waits for the receiver's handle of `key`, keeping others that come first.
    fn handle_for(
        &self,
        key: ConnKey,
        host: &HostWorld,
        timeout: Duration,
    ) -> Result<Vec<u8>, ExecError> {
        let poisoned = || setup("connection handles poisoned");
        let start = Instant::now();
        loop {
            if let Some(h) = self.received.lock().map_err(|_| poisoned())?.remove(&key) {
                return Ok(h);
            }
            match self.procs.try_receive(CONN_TAG) {
                Some((_, msg)) => {
                    let (k, h) = decode_key(&msg)
                        .ok_or_else(|| setup("a malformed connection handle came from a peer"))?;
                    self.received
                        .lock()
                        .map_err(|_| poisoned())?
                        .insert(k, h.to_vec());
                }
                None if host.aborted() => return Err(ExecError::Aborted),
                None if start.elapsed() > timeout => {
                    return Err(ExecError::SetupTimeout {
                        rank: self.me,
                        what: format!(
                            "rank {}'s connection memory (channel {}): is that rank still running?",
                            key.to, key.chan
                        ),
                        waited: start.elapsed(),
                    })
                }
                None => std::thread::sleep(Duration::from_micros(50)),
            }
        }
    }

    /// Stops the bridge, closes the peers' memory this rank opened (saying
    /// so to each owner), then frees its own memory as its openers say they
    /// closed it: CUDA leaves freeing exported memory that another process
    /// still has open undefined, and a peer's kernel may still write it.
    /// Memory whose opener does not say so within `wait` (at most
    /// [`CLOSE_WAIT`]; zero when the run stopped: the words already here
    /// are taken, and no more waited for) stays allocated until the
    /// process exits.
    pub(super) fn close(&mut self, dev: &Arc<dyn Device>, wait: Duration) {
        if let Some(b) = self.bridge.take() {
            b.stop();
        }
        self.close_opened(dev);
        let made = self.made.get_mut().map(std::mem::take).unwrap_or_default();
        self.free_made(dev, made, wait);
    }

    /// Closes the peers' memory this rank opened and says so to each
    /// owner, as for the handles that came and were never opened.
    fn close_opened(&mut self, dev: &Arc<dyn Device>) {
        let opened = self
            .opened
            .get_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        for (key, s) in opened {
            match dev.close_shared(s) {
                Ok(()) => self.say_closed(key),
                // Still mapped here: the owner must keep it (and says so).
                Err(e) => {
                    tracing::warn!(error = %e, to = key.to, chan = key.chan, "closing a peer's connection memory")
                }
            }
        }
        // Handles that came and were never opened (this rank stopped
        // first): their owners need not wait either.
        while let Some((_, msg)) = self.procs.try_receive(CONN_TAG) {
            if let Some((k, _)) = decode_key(&msg) {
                self.say_closed(k);
            }
        }
        let unopened: Vec<ConnKey> = self
            .received
            .get_mut()
            .map(|m| m.drain().map(|(k, _)| k).collect())
            .unwrap_or_default();
        for k in unopened {
            self.say_closed(k);
        }
    }

    /// Frees the memory this rank `made` as its openers say they closed it
    /// (or are gone), for at most `wait` (see [`Spread::close`]).
    fn free_made(&self, dev: &Arc<dyn Device>, made: Vec<(ConnKey, Shared)>, wait: Duration) {
        let mut left: HashMap<ConnKey, Shared> = made.into_iter().collect();
        let free = |key: ConnKey, s: Shared| {
            if let Err(e) = dev.close_shared(s) {
                tracing::warn!(error = %e, from = key.from, chan = key.chan, "freeing shared connection memory");
            }
        };
        let start = Instant::now();
        let wait = wait.min(CLOSE_WAIT);
        while !left.is_empty() {
            // A rank whose process died holds nothing any more.
            if let Some(dead) = self.procs.lost() {
                for k in left
                    .keys()
                    .filter(|k| k.from == dead)
                    .copied()
                    .collect::<Vec<_>>()
                {
                    if let Some(s) = left.remove(&k) {
                        free(k, s);
                    }
                }
            }
            match self.procs.try_receive(CLOSED_TAG) {
                Some((_, msg)) => {
                    if let Some((s, key)) =
                        decode_key(&msg).and_then(|(k, _)| Some((left.remove(&k)?, k)))
                    {
                        free(key, s);
                    }
                }
                // Every word already here taken, and the time is up.
                None if start.elapsed() >= wait => break,
                None => std::thread::sleep(Duration::from_micros(200)),
            }
        }
        if !left.is_empty() && wait.is_zero() {
            tracing::debug!(
                rank = self.me,
                connections = left.len(),
                "the run stopped: connection memory its openers still hold is kept until this process exits"
            );
        } else if !left.is_empty() {
            let mut peers: Vec<usize> = left.keys().map(|k| k.from).collect();
            peers.sort_unstable();
            peers.dedup();
            tracing::warn!(
                rank = self.me,
                connections = left.len(),
                ?peers,
                waited = ?start.elapsed(),
                "connection memory kept until this process exits: the rank(s) that opened it did not say they closed it"
            );
        }
    }
}

fn encode_key(k: ConnKey) -> Vec<u8> {
    let mut v = Vec::with_capacity(20);
    v.extend_from_slice(&(k.from as u64).to_le_bytes());
    v.extend_from_slice(&(k.to as u64).to_le_bytes());
    v.extend_from_slice(&k.chan.to_le_bytes());
    v
}

fn decode_key(b: &[u8]) -> Option<(ConnKey, &[u8])> {
    let word = |i: usize| b.get(i..i + 8)?.try_into().ok().map(u64::from_le_bytes);
    let chan = u32::from_le_bytes(b.get(16..20)?.try_into().ok()?);
    Some((
        ConnKey {
            from: word(0)? as usize,
            to: word(8)? as usize,
            chan,
        },
        &b[20..],
    ))
}

#[cfg(test)]
mod tests;
