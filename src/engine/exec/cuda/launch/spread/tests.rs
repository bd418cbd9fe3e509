use super::bridge::Route;
use super::*;
use crate::engine::exec::cuda::abi::FLAG_LINE;
use crate::engine::transport::inproc::Fifo;
use crate::engine::transport::node::{BarrierError, Relay};
use std::sync::atomic::Ordering;

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

/// Two processes' ranks as rank 0 sees them: messages to it are queued
/// by the test; what it sends is dropped.
struct Mailbox {
    hosts: Vec<String>,
    inbox: Mutex<Vec<(usize, i32, Vec<u8>)>>,
}

impl ProcessPeers for Mailbox {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        2
    }
    fn hosts(&self) -> &[String] {
        &self.hosts
    }
    fn maps(&self, _: usize) -> bool {
        true
    }
    fn all_gather(&self, _: &[u8]) -> Result<Vec<Vec<u8>>, BarrierError> {
        Err(BarrierError("not in this test".into()))
    }
    /// Rank 1 never comes.
    fn all_gather_until(
        &self,
        _: &[u8],
        limit: Option<Duration>,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Vec<u8>>, BarrierError> {
        let start = Instant::now();
        while !stop() && limit.is_none_or(|l| start.elapsed() < l) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Err(BarrierError("gave up".into()))
    }
    fn send(&self, _: usize, _: i32, _: &[u8]) -> Result<(), BarrierError> {
        Ok(())
    }
    fn try_receive(&self, tag: i32) -> Option<(usize, Vec<u8>)> {
        let mut inbox = self.inbox.lock().unwrap();
        let i = inbox.iter().position(|m| m.1 == tag)?;
        let (from, _, msg) = inbox.remove(i);
        Some((from, msg))
    }
    fn relay(&self) -> Option<Arc<dyn Relay>> {
        None
    }
}

fn spread_of(procs: Arc<Mailbox>) -> Spread {
    Spread {
        procs,
        me: 0,
        kind: ShareKind::Device,
        sharing: 1,
        received: Mutex::new(HashMap::new()),
        made: Mutex::new(Vec::new()),
        opened: Mutex::new(Vec::new()),
        bridge: None,
    }
}

/// A sender waits for its receiver's handle: handles for other
/// connections that come first are kept for later; a handle that
/// never comes is a timeout naming the peer and the channel (a hang,
/// with dumps, not a setup failure); a stopped run leaves the wait.
#[test]
fn a_connection_handle_is_awaited_until_the_timeout() {
    let key = |chan| ConnKey {
        from: 0,
        to: 1,
        chan,
    };
    let message = |k: ConnKey, h: &[u8]| {
        let mut m = encode_key(k);
        m.extend_from_slice(h);
        (1, CONN_TAG, m)
    };
    let procs = Arc::new(Mailbox {
        hosts: vec!["a".into(), "a".into()],
        inbox: Mutex::new(vec![
            message(key(3), b"three"),
            (1, CLOSED_TAG, encode_key(key(9))),
            message(key(2), b"two"),
        ]),
    });
    let spread = spread_of(Arc::clone(&procs));
    let host = HostWorld::new(1, Default::default());
    let wait = Duration::from_millis(200);
    assert_eq!(spread.handle_for(key(2), &host, wait).unwrap(), b"two");
    assert_eq!(spread.handle_for(key(3), &host, wait).unwrap(), b"three");
    let start = Instant::now();
    let e = spread.handle_for(key(5), &host, wait).unwrap_err();
    assert!(start.elapsed() >= wait, "{:?}", start.elapsed());
    match &e {
        ExecError::SetupTimeout {
            rank: 0,
            what,
            waited,
        } => {
            assert_eq!(
                what,
                "rank 1's connection memory (channel 5): is that rank still running?"
            );
            assert!(*waited >= wait);
        }
        other => panic!("{other:?}"),
    }
    assert!(e.is_timeout());
    // A word of another tag is not taken for a handle.
    assert_eq!(procs.inbox.lock().unwrap().len(), 1);
    host.abort();
    let start = Instant::now();
    let e = spread.handle_for(key(5), &host, Duration::from_secs(60));
    assert_eq!(e, Err(ExecError::Aborted));
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// The auto-channel agreement with a rank that never comes gives up
/// at the timeout, a hang; a stopped run leaves it at once.
#[test]
fn an_agreement_a_rank_never_joins_is_a_timeout() {
    let spread = spread_of(Arc::new(Mailbox {
        hosts: vec!["a".into(), "b".into()],
        inbox: Mutex::new(Vec::new()),
    }));
    let host = HostWorld::new(1, Default::default());
    let wait = Duration::from_millis(100);
    let e = spread
        .agree(4, "auto channels", &host, wait, usize::min)
        .unwrap_err();
    assert!(e.is_timeout(), "{e:?}");
    assert!(
        e.to_string().starts_with("rank 0 waited ")
            && e.to_string().ends_with(
                "(timeout) for every rank's auto channels: is every rank still running?"
            ),
        "{e}"
    );
    host.abort();
    let e = spread.agree(
        4,
        "auto channels",
        &host,
        Duration::from_secs(60),
        usize::min,
    );
    assert_eq!(e, Err(ExecError::Aborted));
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
