//! How executors report progress while they run: an observer the flight
//! recorder implements. Calls are cheap and never block.

/// What a blocked step waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// Data from the peer.
    Recv,
    /// A free FIFO slot towards the peer.
    Send,
    /// The peer to finish reading this rank's buffers.
    Drain,
}

impl WaitKind {
    pub fn name(self) -> &'static str {
        match self {
            WaitKind::Recv => "recv",
            WaitKind::Send => "send",
            WaitKind::Drain => "drain",
        }
    }
}

/// Receives an executor's progress on one rank.
pub trait Observer: Send + Sync {
    /// An operation starts; `steps[c]` steps on channel `c`.
    fn begin(&self, _steps: &[usize]) {}
    /// Channel `channel` completed step `step`.
    fn step_done(&self, _channel: usize, _step: usize) {}
    /// Channel `channel` is blocked on `peer`.
    fn waiting(&self, _channel: usize, _peer: usize, _kind: WaitKind) {}
}

/// An observer that keeps nothing.
pub struct Unobserved;

impl Observer for Unobserved {}

/// What one rank measured of one directed link (`from` -> `to`, this rank
/// being `to`) over the operations since it was last asked (`--links`):
/// the bytes received, how long this rank waited for `from`'s data, and how
/// long moving it took once it was there.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkSample {
    pub from: usize,
    pub to: usize,
    pub bytes: u64,
    pub wait_ns: u64,
    pub transfer_ns: u64,
    /// GB/s of each operation: the median over its steps of each step's
    /// bytes over its time, so that a step the OS descheduled (or one
    /// operation it did) cannot move the link's figure.
    #[serde(default)]
    pub op_gbps: Vec<f64>,
}

impl LinkSample {
    /// Adds `other` (the same link, later operations or another case).
    pub fn merge(&mut self, other: &LinkSample) {
        self.bytes += other.bytes;
        self.wait_ns += other.wait_ns;
        self.transfer_ns += other.transfer_ns;
        self.op_gbps.extend_from_slice(&other.op_gbps);
    }

    /// The sample of link `from` -> `to` in `list`, added if missing.
    pub fn of(list: &mut Vec<LinkSample>, from: usize, to: usize) -> &mut LinkSample {
        let at = match list.iter().position(|l| (l.from, l.to) == (from, to)) {
            Some(at) => at,
            None => {
                list.push(LinkSample {
                    from,
                    to,
                    ..LinkSample::default()
                });
                list.len() - 1
            }
        };
        &mut list[at]
    }

    /// Merges every sample of `samples` into the one of the same link in `list`.
    pub fn merge_all(list: &mut Vec<LinkSample>, samples: &[LinkSample]) {
        for s in samples {
            LinkSample::of(list, s.from, s.to).merge(s);
        }
    }
}
