//! In-process FIFOs: one per (sender, receiver, channel), `slots` slots deep.
//! A slot is posted by storing its sequence number in the slot's flag with
//! release ordering after its payload; the receiver acquires the flag, reads,
//! then publishes how many slots it has consumed (`head`). Payloads of up to
//! [`INLINE`] bytes travel in the flag's own cache line (the low-latency
//! protocol); larger ones in the slot's buffer, or as a pointer into the
//! sender's memory when the sender guarantees it stays unchanged until the
//! slot is consumed (a direct read, saving a copy).

use super::mem::{AllocError, Zeroed};
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
    /// Where the payload is in the sender's memory (offset from the sender's
    /// direct base, plus 1), or 0: in the slot.
    ptr: AtomicUsize,
    inline: UnsafeCell<[u8; INLINE]>,
}

#[repr(C, align(64))]
struct Padded<T>(T);

/// How addresses of direct payloads translate between the two ends: the
/// sender posts `address - send_base`, the receiver reads at
/// `recv_base + offset`. Within one process both bases are 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectMap {
    pub send_base: usize,
    pub recv_base: usize,
}

/// One direction of one connection. Its shared state is one region (head,
/// slot headers, slot data) that may live in this process's heap or in a
/// mapping shared with another process; the counters each side keeps for
/// itself stay in this struct.
pub struct Fifo {
    region: NonNull<u8>,
    /// The allocation when this FIFO owns its region.
    _owned: Option<Zeroed>,
    slots: usize,
    slot_bytes: usize,
    direct: DirectMap,
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

const HEAD: usize = 64;

impl Fifo {
    /// Bytes of the shared region of a FIFO of this shape.
    pub fn region_bytes(slots: usize, slot_bytes: usize) -> usize {
        HEAD + slots * std::mem::size_of::<Header>() + slots * slot_bytes.next_multiple_of(64)
    }

    /// A FIFO of `slots` slots of `slot_bytes` each, in this process's heap;
    /// an error, not an abort, when the memory cannot be had.
    pub fn new(slots: usize, slot_bytes: usize) -> Result<Fifo, AllocError> {
        // A slot's pages are touched only as far as its messages reach.
        let owned = Zeroed::new(Fifo::region_bytes(slots, slot_bytes))?;
        Ok(Fifo::with_region(
            owned.ptr(),
            Some(owned),
            slots,
            slot_bytes,
            DirectMap::default(),
        ))
    }

    /// A FIFO over a zero-initialised region of [`Fifo::region_bytes`] bytes
    /// shared with the other end (a mapping both processes see).
    ///
    /// # Safety
    /// `region` is 64-byte aligned, valid for the FIFO's whole life, and
    /// used by exactly one sender and one receiver of this shape.
    pub unsafe fn in_region(
        region: NonNull<u8>,
        slots: usize,
        slot_bytes: usize,
        direct: DirectMap,
    ) -> Fifo {
        Fifo::with_region(region, None, slots, slot_bytes, direct)
    }

    fn with_region(
        region: NonNull<u8>,
        owned: Option<Zeroed>,
        slots: usize,
        slot_bytes: usize,
        direct: DirectMap,
    ) -> Fifo {
        Fifo {
            region,
            _owned: owned,
            slots,
            slot_bytes: slot_bytes.next_multiple_of(64),
            direct,
            sent: Padded((AtomicU64::new(0), AtomicU64::new(0))),
            taken: Padded(AtomicU64::new(0)),
        }
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: the region starts with the head counter (zeroed = 0).
        unsafe { &*(self.region.as_ptr() as *const AtomicU64) }
    }

    fn slot(&self, seq: u64) -> usize {
        (seq % self.slots as u64) as usize
    }

    fn header(&self, seq: u64) -> &Header {
        let at = HEAD + self.slot(seq) * std::mem::size_of::<Header>();
        // SAFETY: inside the region; a zeroed Header is valid.
        unsafe { &*(self.region.as_ptr().add(at) as *const Header) }
    }

    fn data(&self, seq: u64) -> *mut u8 {
        let at =
            HEAD + self.slots * std::mem::size_of::<Header>() + self.slot(seq) * self.slot_bytes;
        // SAFETY: inside the region.
        unsafe { self.region.as_ptr().add(at) }
    }

    /// Sender: whether a slot is free (never blocks).
    pub fn can_send(&self) -> bool {
        let sent = self.sent.0 .0.load(Ordering::Relaxed);
        let slots = self.slots as u64;
        if sent - self.sent.0 .1.load(Ordering::Relaxed) < slots {
            return true;
        }
        let head = self.head().load(Ordering::Acquire);
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
            self.data(seq)
        }
    }

    /// Sender: posts the next message: its payload is in `send_buffer(len)`
    /// (`direct` = None) or at `direct` in the sender's memory.
    pub fn post(&self, len: usize, direct: Option<*const u8>) {
        let seq = self.sent.0 .0.load(Ordering::Relaxed);
        let h = self.header(seq);
        h.len.store(len, Ordering::Relaxed);
        let off = direct.map_or(0, |p| {
            (p as usize)
                .wrapping_sub(self.direct.send_base)
                .wrapping_add(1)
        });
        h.ptr.store(off, Ordering::Relaxed);
        h.ready.store(seq + 1, Ordering::Release);
        self.sent.0 .0.store(seq + 1, Ordering::Relaxed);
    }

    /// Sender: the slot area of the next message, where a payload of up to
    /// [`Fifo::slot_bytes`] bytes can be received from elsewhere (a relay).
    /// Only valid after `can_send()` returned true.
    pub fn receive_area(&self) -> *mut u8 {
        self.data(self.sent.0 .0.load(Ordering::Relaxed))
    }

    /// Sender: posts the `len` bytes written into [`Fifo::receive_area`].
    pub fn post_received(&self, len: usize) {
        if len <= INLINE {
            let seq = self.sent.0 .0.load(Ordering::Relaxed);
            // SAFETY: both areas belong to the slot this sender owns; len <= INLINE.
            unsafe { std::ptr::copy_nonoverlapping(self.data(seq), self.send_buffer(len), len) };
        }
        self.post(len, None);
    }

    /// Receiver: the next message, if it has arrived (never blocks).
    pub fn peek(&self) -> Option<Incoming> {
        let seq = self.taken.0.load(Ordering::Relaxed);
        let h = self.header(seq);
        if h.ready.load(Ordering::Acquire) != seq + 1 {
            return None;
        }
        let len = h.len.load(Ordering::Relaxed);
        let off = h.ptr.load(Ordering::Relaxed);
        let ptr = if off != 0 {
            self.direct.recv_base.wrapping_add(off - 1) as *const u8
        } else if len <= INLINE {
            h.inline.get() as *const u8
        } else {
            self.data(seq)
        };
        Some(Incoming { ptr, len })
    }

    /// Receiver: done with the message `peek` returned; its slot is free.
    pub fn release(&self) {
        let seq = self.taken.0.load(Ordering::Relaxed) + 1;
        self.taken.0.store(seq, Ordering::Relaxed);
        self.head().store(seq, Ordering::Release);
    }

    /// Sender: whether every posted message has been consumed.
    pub fn drained(&self) -> bool {
        self.head().load(Ordering::Acquire) == self.sent.0 .0.load(Ordering::Relaxed)
    }

    /// Messages posted but not yet consumed (for diagnostics).
    pub fn in_flight(&self) -> u64 {
        self.sent.0 .0.load(Ordering::Relaxed) - self.head().load(Ordering::Acquire)
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
    fn direct_payloads_translate_between_address_spaces() {
        let region = Fifo::new(2, 64).unwrap();
        // The same region seen by a sender whose buffers start at 0x1000 and
        // a receiver that maps them at 0x9000.
        let send = unsafe {
            Fifo::in_region(
                region.region,
                2,
                64,
                DirectMap {
                    send_base: 0x1000,
                    recv_base: 0,
                },
            )
        };
        let recv = unsafe {
            Fifo::in_region(
                region.region,
                2,
                64,
                DirectMap {
                    send_base: 0,
                    recv_base: 0x9000,
                },
            )
        };
        send.post(4096, Some(0x1010 as *const u8));
        assert_eq!(recv.peek().unwrap().ptr as usize, 0x9010);
        recv.release();
        assert!(send.drained());
    }

    #[test]
    fn relayed_payloads_of_any_size_arrive() {
        let fifo = Fifo::new(2, 256).unwrap();
        for len in [4, 200] {
            assert!(fifo.can_send());
            // SAFETY: the slot area holds 256 bytes.
            unsafe { std::ptr::write_bytes(fifo.receive_area(), len as u8, len) };
            fifo.post_received(len);
            let m = fifo.peek().unwrap();
            // SAFETY: the message is ours until released.
            let got = unsafe { std::slice::from_raw_parts(m.ptr, m.len) };
            assert!(got.len() == len && got.iter().all(|&b| b == len as u8));
            fifo.release();
        }
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
