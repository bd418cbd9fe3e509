//! Why kernels stopped early: one [`CbStatus`] record per device of the
//! world, in host-mapped memory. The ranks of a device claim their
//! record's `abort` with an atomic compare-and-swap and write where they
//! gave up; the host reads every record and, when one gave up or the run
//! stops, sets `stop` in all of them. Each word has one writer side,
//! because atomics on host-mapped memory are atomic among one GPU's
//! threads but not between the host and a GPU, nor between GPUs (PCIe).

use super::super::abi::CbStatus;
use super::super::dev::{DevPtr, Mapped};

pub(super) struct Board {
    memory: Mapped,
}

impl Board {
    /// Records in `memory`: as many as fit, zeroed by the allocation.
    pub(super) fn new(memory: Mapped) -> Board {
        Board { memory }
    }

    /// The memory, to free once no kernel runs.
    pub(super) fn memory(&self) -> Mapped {
        self.memory
    }

    fn len(&self) -> usize {
        self.memory.bytes / std::mem::size_of::<CbStatus>()
    }

    fn record(&self, di: usize) -> *mut CbStatus {
        debug_assert!(di < self.len(), "status record {di} of {}", self.len());
        // SAFETY: the memory holds `len()` records; an index past them is
        // clamped to the last (the world makes one per device).
        unsafe { (self.memory.host as *mut CbStatus).add(di.min(self.len().saturating_sub(1))) }
    }

    /// Device `di`'s record as its kernels address it.
    pub(super) fn dev(&self, di: usize) -> DevPtr {
        debug_assert!(di < self.len(), "status record {di} of {}", self.len());
        let di = di.min(self.len().saturating_sub(1));
        self.memory.dev + (di * std::mem::size_of::<CbStatus>()) as u64
    }

    /// Device `di`'s record, read now.
    pub(super) fn read(&self, di: usize) -> CbStatus {
        // SAFETY: the record is live until the world frees it; kernels
        // write it with system-scope stores, so a volatile read sees them.
        unsafe { std::ptr::read_volatile(self.record(di)) }
    }

    fn each(&self) -> impl Iterator<Item = CbStatus> + '_ {
        (0..self.len()).map(|di| self.read(di))
    }

    /// Whether a rank of some device gave up (its record's `abort`).
    pub(super) fn gave_up(&self) -> bool {
        self.each().any(|s| s.abort != 0)
    }

    /// Whether the kernels are told to stop: a rank gave up, or the host
    /// stopped them.
    pub(super) fn stopping(&self) -> bool {
        self.each().any(|s| s.abort != 0 || s.stop != 0)
    }

    /// Tells every kernel to stop (the host gives up, or carries one
    /// device's abort to the others): writes `stop` only, never `abort`.
    pub(super) fn stop(&self) {
        for di in 0..self.len() {
            let r = self.record(di);
            // SAFETY: the record is live; only the host writes `stop`.
            unsafe {
                let stop = std::ptr::addr_of_mut!((*r).stop);
                if std::ptr::read_volatile(stop) == 0 {
                    std::ptr::write_volatile(stop, 1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(records: &mut [CbStatus]) -> Board {
        Board::new(Mapped {
            host: records.as_mut_ptr().cast(),
            dev: 0x1000,
            bytes: std::mem::size_of_val(records),
        })
    }

    #[test]
    fn each_device_has_a_record_of_its_own() {
        let mut recs = [CbStatus::default(); 3];
        let b = board(&mut recs);
        assert_eq!(b.dev(0), 0x1000);
        assert_eq!(b.dev(2), 0x1000 + 128);
        assert!(!b.gave_up() && !b.stopping());
    }

    #[test]
    fn one_device_giving_up_is_seen_and_stop_reaches_every_record_without_touching_abort() {
        let mut recs = [CbStatus::default(); 3];
        recs[1] = CbStatus {
            abort: 2,
            rank: 5,
            channel: 1,
            step: 7,
            peer: 4,
            kind: 1,
            waited_ns: 9,
            stop: 0,
        };
        let b = board(&mut recs);
        assert!(b.gave_up() && b.stopping());
        b.stop();
        let after: Vec<CbStatus> = (0..3).map(|d| b.read(d)).collect();
        assert!(after.iter().all(|s| s.stop == 1));
        // The host never writes a GPU's words: device 1's record stays
        // whole, and the others' `abort` stays 0 (theirs to claim).
        assert_eq!(after[1].abort, 2);
        assert_eq!((after[1].rank, after[1].step, after[1].peer), (5, 7, 4));
        assert_eq!((after[0].abort, after[2].abort), (0, 0));
    }

    #[test]
    fn a_host_stop_alone_is_stopping_but_no_rank_gave_up() {
        let mut recs = [CbStatus::default(); 2];
        let b = board(&mut recs);
        b.stop();
        assert!(b.stopping());
        assert!(!b.gave_up());
    }
}
