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

use super::super::abi::{ConnKey, ConnShape, FLAG_LINE, MAX_SLOTS};
use super::super::dev::{DevPtr, Device, Mapped, ShareKind, Shared};
use crate::engine::exec::world::{ExecError, HostWorld};
use crate::engine::transport::inproc::Fifo;
use crate::engine::transport::node::{serve_until, ProcessPeers, Relay};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
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
            .all_gather_until(mine.encode().as_bytes(), &|| host.aborted())
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

    /// The least of every rank's `n`: what each rank's own GPU allows
    /// (auto channels) must be one number for the whole world, or the
    /// ranks' programs differ and wait on connections no peer makes.
    /// Collective: every rank calls it at the same point; left when the
    /// run stops (`host` aborted).
    pub(super) fn agree_min(
        &self,
        n: usize,
        what: &str,
        host: &HostWorld,
    ) -> Result<usize, ExecError> {
        let all = self
            .procs
            .all_gather_until(&(n as u64).to_le_bytes(), &|| host.aborted())
            .map_err(|e| match host.aborted() {
                true => ExecError::Aborted,
                false => setup(format!("agreeing on {what}: {e}")),
            })?;
        let mut least = n;
        for (r, b) in all.iter().enumerate() {
            let b: [u8; 8] = b
                .as_slice()
                .try_into()
                .map_err(|_| setup(format!("bad {what} from rank {r}")))?;
            least = least.min(u64::from_le_bytes(b) as usize);
        }
        Ok(least)
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
                    let (k, h) = decode_key(&msg).ok_or_else(|| {
                        setup("a malformed connection handle came from a peer")
                    })?;
                    self.received
                        .lock()
                        .map_err(|_| poisoned())?
                        .insert(k, h.to_vec());
                }
                None if host.aborted() => return Err(ExecError::Aborted),
                None if start.elapsed() > timeout => {
                    return Err(setup(format!(
                        "rank {} waited {:?} for rank {}'s connection memory (channel {}): is that rank still running?",
                        self.me,
                        start.elapsed(),
                        key.to,
                        key.chan
                    )))
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

/// One relayed connection end: its memory (host-mapped) and the FIFO the
/// relay serves.
struct Route {
    base: *mut u8,
    fifo: Arc<Fifo>,
    outgoing: bool,
    slots: u64,
    slot_bytes: usize,
    /// Messages moved so far.
    moved: u64,
}

// SAFETY: the route's memory is host-mapped memory of the world, alive
// until the bridge stops (the world stops it before freeing); only the
// bridge thread touches a route.
unsafe impl Send for Route {}

impl Route {
    fn flag(&self, at: usize) -> &AtomicU64 {
        // SAFETY: tail (0), head (FLAG_LINE) and the length words lie in the
        // connection's first two lines, 8-byte aligned; the kernel accesses
        // them atomically too.
        unsafe { &*(self.base.add(at) as *const AtomicU64) }
    }

    fn slot(&self, seq: u64) -> *mut u8 {
        let i = (seq % self.slots) as usize;
        // SAFETY: the simple ring follows the two flag lines.
        unsafe { self.base.add(2 * FLAG_LINE + i * self.slot_bytes) }
    }

    /// Moves one message if it can; says whether it did.
    fn step(&mut self) -> bool {
        if self.outgoing {
            // The kernel posted message `moved`? Copy it out to the relay.
            if self.flag(0).load(Ordering::Acquire) <= self.moved || !self.fifo.can_send() {
                return false;
            }
            let i = (self.moved % self.slots) as usize;
            let len = (self.flag(8 * (1 + i)).load(Ordering::Relaxed) as usize)
                .min(self.slot_bytes)
                .min(self.fifo.slot_bytes());
            let dst = self.fifo.send_buffer(len);
            // SAFETY: the slot holds `len` posted bytes the kernel no longer
            // writes until head moves; the FIFO's buffer holds slot_bytes.
            unsafe { std::ptr::copy_nonoverlapping(self.slot(self.moved), dst, len) };
            self.fifo.post(len, None);
            self.moved += 1;
            self.flag(FLAG_LINE).store(self.moved, Ordering::Release);
        } else {
            // A message arrived and the kernel freed the slot? Fill it.
            let head = self.flag(FLAG_LINE).load(Ordering::Acquire);
            if self.moved - head >= self.slots {
                return false;
            }
            let Some(m) = self.fifo.peek() else {
                return false;
            };
            let len = m.len.min(self.slot_bytes);
            // SAFETY: the slot is free (head says so) and holds slot_bytes.
            unsafe { std::ptr::copy_nonoverlapping(m.ptr, self.slot(self.moved), len) };
            self.fifo.release();
            self.moved += 1;
            self.flag(0).store(self.moved, Ordering::Release);
        }
        true
    }
}

/// The thread that moves relayed connections' slots.
struct Bridge {
    relay: Arc<dyn Relay>,
    routes: Arc<Mutex<Vec<Route>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Bridge {
    fn start(relay: Arc<dyn Relay>) -> Result<Bridge, String> {
        let routes: Arc<Mutex<Vec<Route>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (Arc::clone(&routes), Arc::clone(&stop));
        let handle = std::thread::Builder::new()
            .name("cuda-bridge".into())
            .spawn(move || run(&r, &s))
            .map_err(|e| format!("starting the CUDA relay bridge: {e}"))?;
        Ok(Bridge {
            relay,
            routes,
            stop,
            handle: Some(handle),
        })
    }

    fn add(&self, m: Mapped, key: ConnKey, me: usize, shape: &ConnShape) -> Result<(), ExecError> {
        if shape.slots > MAX_SLOTS {
            return Err(setup(format!(
                "{} slots per connection: the relay bridge handles at most {MAX_SLOTS}",
                shape.slots
            )));
        }
        let fifo = Arc::new(
            Fifo::new(shape.slots, shape.slot_bytes)
                .map_err(|e| setup(format!("relay FIFO: {e}")))?,
        );
        let outgoing = key.from == me;
        let peer = if outgoing { key.to } else { key.from };
        self.relay.add(
            Arc::clone(&fifo),
            peer,
            RELAY_CHAN_BASE + key.chan,
            outgoing,
        );
        tracing::debug!(
            from = key.from,
            to = key.to,
            chan = key.chan,
            "CUDA connection through the relay"
        );
        let route = Route {
            base: m.host,
            fifo,
            outgoing,
            slots: shape.slots as u64,
            slot_bytes: shape.slot_bytes,
            moved: 0,
        };
        self.routes
            .lock()
            .map_err(|_| setup("relay bridge poisoned"))?
            .push(route);
        Ok(())
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn run(routes: &Mutex<Vec<Route>>, stop: &AtomicBool) {
    serve_until(stop, || {
        let mut routes = routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.iter_mut().fold(false, |m, r| r.step() | m)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank of a node judges the whole map, in one order: the
    /// list's length, then the first GPU that is not there; sharing is
    /// found on the placement, default or mapped.
    #[test]
    fn a_node_placement_is_judged_whole() {
        assert_eq!(node_placement(None, 5, 2).unwrap(), [0, 1, 0, 1, 0]);
        assert_eq!(
            node_placement(Some(&[2, 0, 1, 7]), 3, 3).unwrap(),
            [2, 0, 1]
        );
        // Ranks 0 and 1 alike would have said different things before.
        let short = node_placement(Some(&[9]), 2, 8).unwrap_err();
        assert!(
            short.contains("lists 1 GPU(s), but this node runs 2"),
            "{short}"
        );
        let missing = node_placement(Some(&[0, 9, 8]), 3, 8).unwrap_err();
        assert!(missing.contains("GPU 9 for node rank 1"), "{missing}");
        assert!(missing.contains("sees 8 GPU(s) (0..7)"), "{missing}");
        assert_eq!(first_shared(&[0, 1, 2]), None);
        assert_eq!(first_shared(&[1, 0, 1, 0]), Some((1, vec![0, 2])));
        let said = shared_gpu_refusal(&[0, 2], 1);
        assert!(
            said.starts_with("ranks [0, 2] would share GPU 1:"),
            "{said}"
        );
    }

    #[test]
    fn connection_keys_survive_their_message() {
        let k = ConnKey {
            from: 3,
            to: 70000,
            chan: 513,
        };
        let mut msg = encode_key(k);
        msg.extend_from_slice(b"emu 1 2 3");
        let (back, handle) = decode_key(&msg).unwrap();
        assert_eq!(back, k);
        assert_eq!(handle, b"emu 1 2 3");
        assert!(decode_key(&msg[..19]).is_none());
    }

    /// A sender's connection memory, the bridge's two routes joined by one
    /// FIFO (the relay's part, skipped), and a receiver's memory: played as
    /// the kernels would, in a scrambled order, every message arrives in
    /// order with its length, and no side ever overruns the other.
    #[test]
    fn the_bridge_moves_slots_with_their_lengths_in_order() {
        let shape = ConnShape {
            slots: 4,
            slot_bytes: 256,
            ll_slot_bytes: 512,
            ll128_slot_bytes: 384,
        };
        let words = shape.bytes() / 8 + 1;
        let (mut send_mem, mut recv_mem) = (vec![0u64; words], vec![0u64; words]);
        let fifo = Arc::new(Fifo::new(shape.slots, shape.slot_bytes).unwrap());
        let route = |mem: &mut Vec<u64>, outgoing: bool| Route {
            base: mem.as_mut_ptr() as *mut u8,
            fifo: Arc::clone(&fifo),
            outgoing,
            slots: shape.slots as u64,
            slot_bytes: shape.slot_bytes,
            moved: 0,
        };
        let mut out = route(&mut send_mem, true);
        let mut inc = route(&mut recv_mem, false);
        let len_of = |i: u64| ((i * 37) % 256 + 1) as usize;
        let (total, mut sent, mut got) = (60u64, 0u64, 0u64);
        let mut rng = 12345u64;
        while got < total {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            match rng >> 62 {
                0 if sent < total => {
                    // The sending kernel: room while tail - head < slots.
                    let (tail, head) = (
                        out.flag(0).load(Ordering::Relaxed),
                        out.flag(FLAG_LINE).load(Ordering::Acquire),
                    );
                    assert!(tail - head <= shape.slots as u64);
                    if tail - head < shape.slots as u64 {
                        let len = len_of(sent);
                        // SAFETY: the slot is the sender's until head passes it.
                        unsafe { std::ptr::write_bytes(out.slot(tail), sent as u8, len) };
                        out.flag(8 * (1 + (tail % 4) as usize))
                            .store(len as u64, Ordering::Relaxed);
                        out.flag(0).store(tail + 1, Ordering::Release);
                        sent += 1;
                    }
                }
                1 => {
                    out.step();
                }
                2 => {
                    // The relay carries exactly the posted length.
                    if let Some(m) = fifo.peek() {
                        assert_eq!(m.len, len_of(inc.moved), "message {}", inc.moved);
                    }
                    inc.step();
                }
                _ => {
                    // The receiving kernel: a message while tail > head.
                    let (tail, head) = (
                        inc.flag(0).load(Ordering::Acquire),
                        inc.flag(FLAG_LINE).load(Ordering::Relaxed),
                    );
                    assert!(tail - head <= shape.slots as u64);
                    if tail > head {
                        let len = len_of(head);
                        // SAFETY: the slot holds the message until head moves.
                        let bytes = unsafe { std::slice::from_raw_parts(inc.slot(head), len) };
                        assert!(bytes.iter().all(|&b| b == head as u8), "message {head}");
                        inc.flag(FLAG_LINE).store(head + 1, Ordering::Release);
                        got += 1;
                    }
                }
            }
        }
        assert_eq!(
            (sent, got, out.moved, inc.moved),
            (total, total, total, total)
        );
        assert!(fifo.drained());
    }

    #[test]
    fn placement_cards_round_trip() {
        let c = Card {
            host: "node 7".into(),
            bus: "0000:1b:00.0".into(),
            ordinal: 3,
        };
        let d = Card::decode(c.encode().as_bytes()).unwrap();
        assert_eq!((d.host, d.bus, d.ordinal), (c.host, c.bus, c.ordinal));
        assert!(Card::decode(b"x y").is_none());
    }
}
