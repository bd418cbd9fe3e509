//! Host memory: 64-byte aligned buffers, and how much memory is free.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Why a host buffer could not be allocated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("cannot lay out {len} bytes: {source}")]
    Layout {
        len: usize,
        source: std::alloc::LayoutError,
    },
    #[error("out of memory allocating {len} bytes")]
    OutOfMemory { len: usize },
}

/// A zeroed, 64-byte aligned allocation. Pages are touched first by whoever
/// writes them (the rank's own thread), which places them near it.
pub struct HostBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// The allocation, when this buffer owns its memory (not a view).
    layout: Option<Layout>,
}

// SAFETY: HostBuf owns its allocation; sharing happens through raw pointers
// whose use the executor's protocol orders.
unsafe impl Send for HostBuf {}
unsafe impl Sync for HostBuf {}

impl HostBuf {
    /// Allocates `len` bytes, or says why not.
    pub fn new(len: usize) -> Result<HostBuf, AllocError> {
        let layout = Layout::from_size_align(len.max(64), 64)
            .map_err(|source| AllocError::Layout { len, source })?;
        // SAFETY: non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(AllocError::OutOfMemory { len })?;
        Ok(HostBuf {
            ptr,
            len,
            layout: Some(layout),
        })
    }

    /// A buffer over `len` bytes of memory owned elsewhere (a shared segment).
    ///
    /// # Safety
    /// The memory is valid, zero-initialised or written, and outlives the buffer.
    pub unsafe fn view(ptr: NonNull<u8>, len: usize) -> HostBuf {
        HostBuf {
            ptr,
            len,
            layout: None,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: len bytes are allocated and initialised (zeroed).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        if let Some(layout) = self.layout {
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

/// Bytes of memory available to new allocations (`MemAvailable`), if known.
pub fn available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        let mut b = HostBuf::new(1000).unwrap();
        assert_eq!(b.as_ptr() as usize % 64, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[999] = 7;
        assert_eq!(b.as_slice()[999], 7);
    }

    #[test]
    fn available_memory_is_known_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(available_bytes().unwrap_or(0) > 0);
        }
    }
}
