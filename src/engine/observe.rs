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
