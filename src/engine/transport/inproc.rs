//! In-process FIFOs: one per (sender, receiver, channel), `slots` slots deep.
//! A slot is posted by storing its sequence number in the slot's flag with
//! release ordering after its payload; the receiver acquires the flag, reads,
//! then publishes how many slots it has consumed (`head`). Payloads of up to
//! [`INLINE`] bytes travel in the flag's own cache line (the low-latency
//! protocol); larger ones in the slot's buffer, or as a pointer into the
//! sender's memory when the sender guarantees it stays unchanged until the
//! slot is consumed (a direct read, saving a copy).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Payload bytes carried in the flag's cache line.
pub const INLINE: usize = 40;

#[repr(C, align(64))]
struct Header {
    /// Sequence number + 1 of the message in this slot.
    ready: AtomicU64,
    /// Payload bytes.
    len: AtomicUsize,
    /// Address of the payload in the sender's memory, or 0: in the slot.
    ptr: AtomicUsize,
    inline: UnsafeCell<[u8; INLINE]>,
}

#[repr(C, align(64))]
struct Padded<T>(T);

/// One direction of one connection.
pub struct Fifo {
    headers: Box<[Header]>,
    data: NonNull<u8>,
    layout: Layout,
    slot_bytes: usize,
    /// Messages consumed (receiver writes).
    head: Padded<AtomicU64>,
    /// Sender-private: messages posted, and the last head it saw.
    sent: Padded<(AtomicU64, AtomicU64)>,
    /// Receiver-private: messages consumed so far.
    taken: Padded<AtomicU64>,
}

// SAFETY: the payload area is only written by the single sender while it
// owns a slot (head says the receiver is done with it) and only read by the
// single receiver after acquiring the slot's flag.
unsafe impl Send for Fifo {}
unsafe impl Sync for Fifo {}

/// Where a received payload is.
#[derive(Clone, Copy, Debug)]
pub struct Incoming {
    pub ptr: *const u8,
    pub len: usize,
}

impl Fifo {
    /// A FIFO of `slots` slots of `slot_bytes` each.
    pub fn new(slots: usize, slot_bytes: usize) -> Result<Fifo, std::alloc::LayoutError> {
        let headers = (0..slots)
            .map(|_| Header {
                ready: AtomicU64::new(0),
                len: AtomicUsize::new(0),
                ptr: AtomicUsize::new(0),
                inline: UnsafeCell::new([0; INLINE]),
            })
            .collect();
        let layout = Layout::from_size_align((slots * slot_bytes).max(64), 64)?;
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let data = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Ok(Fifo {
            headers,
            data,
            layout,
            slot_bytes,
            head: Padded(AtomicU64::new(0)),
            sent: Padded((AtomicU64::new(0), AtomicU64::new(0))),
            taken: Padded(AtomicU64::new(0)),
        })
    }

    pub fn slots(&self) -> usize {
        self.headers.len()
    }

    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    fn header(&self, seq: u64) -> &Header {
        &self.headers[(seq % self.headers.len() as u64) as usize]
    }

    /// Sender: whether a slot is free (never blocks).
    pub fn can_send(&self) -> bool {
        let sent = self.sent.0 .0.load(Ordering::Relaxed);
        let slots = self.headers.len() as u64;
        if sent - self.sent.0 .1.load(Ordering::Relaxed) < slots {
            return true;
        }
        let head = self.head.0.load(Ordering::Acquire);
        self.sent.0 .1.store(head, Ordering::Relaxed);
        sent - head < slots
    }

    /// Sender: where to write a payload of `len` bytes for the next message.
    /// Only valid after `can_send()` returned true.
    pub fn send_buffer(&self, len: usize) -> *mut u8 {
        let seq = self.sent.0 .0.load(Ordering::Relaxed);
        if len <= INLINE {
            self.header(seq).inline.get() as *mut u8
        } else {
            let slot = (seq % self.headers.len() as u64) as usize;
            // SAFETY: slot < slots, so the offset is inside the allocation.
            unsafe { self.data.as_ptr().add(slot * self.slot_bytes) }
        }
    }

    /// Sender: posts the next message: its payload is in `send_buffer(len)`
    /// (`direct` = None) or at `direct` in the sender's memory.
    pub fn post(&self, len: usize, direct: Option<*const u8>) {
        let seq = self.sent.0 .0.load(Ordering::Relaxed);
        let h = self.header(seq);
        h.len.store(len, Ordering::Relaxed);
        h.ptr
            .store(direct.map_or(0, |p| p as usize), Ordering::Relaxed);
        h.ready.store(seq + 1, Ordering::Release);
        self.sent.0 .0.store(seq + 1, Ordering::Relaxed);
    }

    /// Receiver: the next message, if it has arrived (never blocks).
    pub fn peek(&self) -> Option<Incoming> {
        let seq = self.taken.0.load(Ordering::Relaxed);
        let h = self.header(seq);
        if h.ready.load(Ordering::Acquire) != seq + 1 {
            return None;
        }
        let len = h.len.load(Ordering::Relaxed);
        let direct = h.ptr.load(Ordering::Relaxed);
        let ptr = if direct != 0 {
            direct as *const u8
        } else if len <= INLINE {
            h.inline.get() as *const u8
        } else {
            let slot = (seq % self.headers.len() as u64) as usize;
            // SAFETY: slot < slots, inside the allocation.
            unsafe { self.data.as_ptr().add(slot * self.slot_bytes) }
        };
        Some(Incoming { ptr, len })
    }

    /// Receiver: done with the message `peek` returned; its slot is free.
    pub fn release(&self) {
        let seq = self.taken.0.load(Ordering::Relaxed) + 1;
        self.taken.0.store(seq, Ordering::Relaxed);
        self.head.0.store(seq, Ordering::Release);
    }

    /// Sender: whether every posted message has been consumed.
    pub fn drained(&self) -> bool {
        self.head.0.load(Ordering::Acquire) == self.sent.0 .0.load(Ordering::Relaxed)
    }

    /// Messages posted but not yet consumed (for diagnostics).
    pub fn in_flight(&self) -> u64 {
        self.sent.0 .0.load(Ordering::Relaxed) - self.head.0.load(Ordering::Acquire)
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.data.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn messages_arrive_in_order_across_threads() {
        let fifo = Arc::new(Fifo::new(2, 256).unwrap());
        let tx = Arc::clone(&fifo);
        let sender = std::thread::spawn(move || {
            for i in 0..2000u32 {
                while !tx.can_send() {
                    std::hint::spin_loop();
                }
                let len = if i % 3 == 0 { 4 } else { 200 };
                let buf = tx.send_buffer(len);
                // SAFETY: the slot is ours until posted; len <= slot size.
                unsafe { std::ptr::write_bytes(buf, (i % 251) as u8, len) };
                tx.post(len, None);
            }
        });
        for i in 0..2000u32 {
            let msg = loop {
                if let Some(m) = fifo.peek() {
                    break m;
                }
                std::hint::spin_loop();
            };
            let want = if i % 3 == 0 { 4 } else { 200 };
            assert_eq!(msg.len, want);
            // SAFETY: the message is ours until released.
            let bytes = unsafe { std::slice::from_raw_parts(msg.ptr, msg.len) };
            assert!(bytes.iter().all(|&b| b == (i % 251) as u8));
            fifo.release();
        }
        sender.join().unwrap();
        assert!(fifo.drained());
    }

    #[test]
    fn a_full_fifo_refuses_more() {
        let fifo = Fifo::new(2, 64).unwrap();
        for _ in 0..2 {
            assert!(fifo.can_send());
            fifo.post(8, None);
        }
        assert!(!fifo.can_send());
        assert_eq!(fifo.in_flight(), 2);
        assert!(fifo.peek().is_some());
        fifo.release();
        assert!(fifo.can_send());
    }
}
