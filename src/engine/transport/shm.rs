//! Shared memory between processes of one node: anonymous memory files
//! (`memfd_create`) that peers map through `/proc/<pid>/fd/<fd>`. Pages are
//! allocated on first touch, so a large, mostly unused segment costs little.

use std::ffi::CString;
use std::io;
use std::ptr::NonNull;

/// A shared mapping, created here or opened from a peer.
pub struct Segment {
    ptr: NonNull<u8>,
    len: usize,
    /// The memory file, when this process created it.
    fd: Option<libc::c_int>,
}

// SAFETY: the mapping is plain memory; who writes where is the users' protocol.
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

fn map(fd: libc::c_int, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: mapping a file descriptor we hold, shared, read-write.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len.max(1),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p as *mut u8).ok_or_else(|| io::Error::other("mmap returned null"))
}

impl Segment {
    /// A new zero-filled segment of `len` bytes.
    pub fn create(name: &str, len: usize) -> io::Result<Segment> {
        let cname = CString::new(name).map_err(io::Error::other)?;
        // SAFETY: valid C string; flags are plain values.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is ours.
        if unsafe { libc::ftruncate(fd, len.max(1) as libc::off_t) } != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: closing our own fd.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        let ptr = map(fd, len).inspect_err(|_| {
            // SAFETY: closing our own fd.
            unsafe { libc::close(fd) };
        })?;
        Ok(Segment {
            ptr,
            len,
            fd: Some(fd),
        })
    }

    /// A new zero-filled segment whose pages are all allocated now
    /// (`fallocate`): too little memory is an error here, not a SIGBUS later.
    pub fn create_reserved(name: &str, len: usize) -> io::Result<Segment> {
        let seg = Segment::create(name, len)?;
        if let Some(fd) = seg.fd {
            // SAFETY: fd is ours; mode 0 allocates the range.
            if unsafe { libc::fallocate(fd, 0, 0, len.max(1) as libc::off_t) } != 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(
                    e.kind(),
                    format!("not enough memory: reserving {len} bytes of rank buffers: {e}"),
                ));
            }
        }
        Ok(seg)
    }

    /// Maps the segment process `pid` created as file descriptor `fd`.
    pub fn open(pid: u32, fd: i32, len: usize) -> io::Result<Segment> {
        let path = CString::new(format!("/proc/{pid}/fd/{fd}")).map_err(io::Error::other)?;
        // SAFETY: valid C string.
        let local = unsafe { libc::open(path.as_ptr(), libc::O_RDWR) };
        if local < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("cannot open rank memory /proc/{pid}/fd/{fd}: {e}"),
            ));
        }
        // A file shorter than the mapping faults (SIGBUS) where it ends: a
        // peer that sized its memory otherwise (other arguments, another
        // build) is an error here.
        // SAFETY: an fstat of the descriptor just opened into a zeroed stat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let held = match unsafe { libc::fstat(local, &mut st) } {
            0 => u64::try_from(st.st_size).unwrap_or(0),
            _ => 0,
        };
        if held < len as u64 {
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(local) };
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "rank memory /proc/{pid}/fd/{fd} holds {held} bytes, {len} expected: was the peer started with the same arguments and the same collbench?"
                ),
            ));
        }
        let mapped = map(local, len);
        // SAFETY: the mapping keeps the file alive; our descriptor is no longer needed.
        unsafe { libc::close(local) };
        Ok(Segment {
            ptr: mapped?,
            len,
            fd: None,
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The descriptor peers open (when this process created the segment).
    pub fn fd(&self) -> Option<i32> {
        self.fd
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping and closing our own descriptor.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len.max(1));
            if let Some(fd) = self.fd {
                libc::close(fd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_opened_again_shares_its_bytes() {
        let a = Segment::create("collbench-test", 1 << 20).unwrap();
        let b = Segment::open(std::process::id(), a.fd().unwrap(), 1 << 20).unwrap();
        assert_ne!(a.as_ptr(), b.as_ptr());
        // SAFETY: both map the same 1 MiB.
        unsafe {
            *a.as_ptr().add(12345) = 42;
            assert_eq!(*b.as_ptr().add(12345), 42);
            assert_eq!(*b.as_ptr().add(99), 0);
        }
        assert!(Segment::open(std::process::id(), 987_654, 64).is_err());
    }

    /// A peer's memory shorter than this rank maps (a peer sized otherwise)
    /// is an error, not a fault where the file ends.
    #[test]
    fn a_peer_segment_shorter_than_the_mapping_is_refused() {
        let a = Segment::create("collbench-test", 4096).unwrap();
        let fd = a.fd().unwrap();
        let err = Segment::open(std::process::id(), fd, 1 << 20)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("holds 4096 bytes, 1048576 expected"), "{err}");
        assert!(Segment::open(std::process::id(), fd, 4096).is_ok());
    }
}
