//! Host memory: 64-byte aligned buffers, and how much memory is free.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::path::Path;
use std::ptr::NonNull;

/// Why a host buffer could not be allocated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// Past what one allocation may be (`isize::MAX`).
    #[error("{len} bytes in one buffer: more than a process can address")]
    Layout {
        len: usize,
        #[source]
        source: std::alloc::LayoutError,
    },
    #[error("{len} bytes could not be allocated")]
    OutOfMemory { len: usize },
}

/// Allocations from this size up are anonymous mappings of their own.
const MAP_MIN: usize = 64 << 10;

/// Zeroed, 64-byte aligned memory this process owns: from [`MAP_MIN`] up an
/// anonymous mapping of its own, whose pages the kernel zeroes as they are
/// first touched (the allocator's zeroing of a 64-byte aligned block writes
/// every page at once: a connection of 1 MiB carrying a 4-byte message held
/// 1 MiB, 4 GB at 64 ranks), else the heap's.
pub struct Zeroed {
    ptr: NonNull<u8>,
    backing: Backing,
}

enum Backing {
    Heap(Layout),
    #[cfg(unix)]
    Mapped(usize),
}

impl Zeroed {
    /// `len` zeroed bytes (at least 64), or why not.
    pub fn new(len: usize) -> Result<Zeroed, AllocError> {
        let len = len.max(64);
        // Past what one allocation may be: said as such, whichever backing.
        let layout = Layout::from_size_align(len, 64)
            .map_err(|source| AllocError::Layout { len, source })?;
        #[cfg(unix)]
        if len >= MAP_MIN {
            // SAFETY: a fresh private anonymous mapping, no file, no fixed address.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if raw == libc::MAP_FAILED {
                return Err(AllocError::OutOfMemory { len });
            }
            let ptr = NonNull::new(raw.cast::<u8>()).ok_or(AllocError::OutOfMemory { len })?;
            return Ok(Zeroed {
                ptr,
                backing: Backing::Mapped(len),
            });
        }
        // SAFETY: non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(AllocError::OutOfMemory { len })?;
        Ok(Zeroed {
            ptr,
            backing: Backing::Heap(layout),
        })
    }

    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }
}

impl Drop for Zeroed {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: allocated in `new` with this layout.
            Backing::Heap(layout) => unsafe { dealloc(self.ptr.as_ptr(), layout) },
            #[cfg(unix)]
            // SAFETY: mapped in `new` with this length, unmapped once.
            Backing::Mapped(len) => unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), len);
            },
        }
    }
}

// SAFETY: Zeroed owns its memory; who writes it is the owner's business.
unsafe impl Send for Zeroed {}
unsafe impl Sync for Zeroed {}

/// A zeroed, 64-byte aligned allocation. Pages are touched first by whoever
/// writes them (the rank's own thread), which places them near it.
pub struct HostBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// The allocation, when this buffer owns its memory (not a view).
    _owned: Option<Zeroed>,
}

// SAFETY: HostBuf owns its allocation; sharing happens through raw pointers
// whose use the executor's protocol orders.
unsafe impl Send for HostBuf {}
unsafe impl Sync for HostBuf {}

impl HostBuf {
    /// Allocates `len` bytes, or says why not.
    pub fn new(len: usize) -> Result<HostBuf, AllocError> {
        let owned = Zeroed::new(len)?;
        Ok(HostBuf {
            ptr: owned.ptr(),
            len,
            _owned: Some(owned),
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
            _owned: None,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn non_null(&self) -> NonNull<u8> {
        self.ptr
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

/// Bytes of memory available to new allocations: the tightest of
/// [`MemLimits`], if any is known.
pub fn available_bytes() -> Option<u64> {
    MemLimits::read().available()
}

/// What limits the memory this process may still take, each `None` when
/// unknown or unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemLimits {
    /// The kernel's estimate for the whole machine (`MemAvailable`).
    pub mem_available: Option<u64>,
    /// Room left in this process's memory cgroup and its ancestors: v2
    /// `memory.max - memory.current`, v1 `memory.limit_in_bytes - memory.usage_in_bytes`.
    pub cgroup: Option<u64>,
    /// Address space left: `RLIMIT_AS` (`ulimit -v`) minus the process's
    /// current virtual size. Reservations count here, touched or not.
    pub address_space: Option<u64>,
}

impl MemLimits {
    /// Reads the limits of this process (Linux; elsewhere all unknown).
    pub fn read() -> MemLimits {
        let file = |p: &str| std::fs::read_to_string(p).ok();
        let limits = MemLimits {
            mem_available: file("/proc/meminfo").as_deref().and_then(parse_meminfo),
            cgroup: file("/proc/self/cgroup").and_then(|c| {
                cgroup_room(&c, |p| {
                    std::fs::read_to_string(Path::new(CGROUP_ROOT).join(p)).ok()
                })
            }),
            address_space: address_space_room(
                rlimit_as(),
                file("/proc/self/status").as_deref().and_then(parse_vm_size),
            ),
        };
        tracing::debug!(
            mem_available = ?limits.mem_available,
            cgroup = ?limits.cgroup,
            address_space = ?limits.address_space,
            "memory limits (bytes; None: unknown or unlimited)"
        );
        limits
    }

    /// The resident limits' minimum (memory that can be touched).
    pub fn resident(&self) -> Option<u64> {
        [self.mem_available, self.cgroup]
            .into_iter()
            .flatten()
            .min()
    }

    /// Every limit's minimum.
    pub fn available(&self) -> Option<u64> {
        [self.resident(), self.address_space]
            .into_iter()
            .flatten()
            .min()
    }
}

/// Where cgroup file systems are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn parse_meminfo(text: &str) -> Option<u64> {
    kib_field(text, "MemAvailable:")
}

/// `VmSize` of `/proc/self/status`, in bytes.
pub fn parse_vm_size(text: &str) -> Option<u64> {
    kib_field(text, "VmSize:")
}

fn kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Room left under the memory cgroups `/proc/self/cgroup` (`cgroup`)
/// names, reading their files through `read` (paths relative to the cgroup
/// root): the tightest of the process's cgroup and its ancestors, v2 or v1.
pub fn cgroup_room(cgroup: &str, read: impl Fn(&Path) -> Option<String>) -> Option<u64> {
    let mut room: Option<u64> = None;
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (base, max_file, used_file) = if controllers.is_empty() {
            ("", "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            ("memory", "memory.limit_in_bytes", "memory.usage_in_bytes")
        } else {
            continue;
        };
        let mut dir = Path::new(base).join(path.trim_start_matches('/'));
        loop {
            let limit = read(&dir.join(max_file)).as_deref().and_then(parse_limit);
            if let Some(limit) = limit {
                let used = read(&dir.join(used_file))
                    .and_then(|t| t.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                let left = limit.saturating_sub(used);
                room = Some(room.map_or(left, |r| r.min(left)));
            }
            if !dir.pop() || dir.as_os_str().is_empty() {
                break;
            }
        }
    }
    room
}

/// A cgroup limit file: bytes, or None for `max` (v2) or a v1 "unlimited"
/// (the largest page-aligned value, about 2^63).
pub fn parse_limit(text: &str) -> Option<u64> {
    let t = text.trim();
    if t == "max" {
        return None;
    }
    t.parse::<u64>().ok().filter(|&v| v < 1 << 60)
}

/// Address space left: the limit minus what the process maps already.
pub fn address_space_room(limit: Option<u64>, vm_size: Option<u64>) -> Option<u64> {
    limit.map(|l| l.saturating_sub(vm_size.unwrap_or(0)))
}

/// `RLIMIT_AS`'s soft limit, None when unlimited.
fn rlimit_as() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } != 0 || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(r.rlim_cur)
}

/// Address space each extra thread reserves beyond the memory it touches:
/// its stack (Rust's default, 2 MiB) and, for the first `8 x cores`
/// threads that allocate, a glibc malloc arena (64 MiB reserved). Counts
/// against `RLIMIT_AS`, not against resident memory.
pub fn thread_reservation(threads: usize) -> u64 {
    let cores = crate::engine::cpus::cores();
    let arenas = threads.min(8 * cores) as u64;
    threads as u64 * (2 << 20) + arenas * (64 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of `len` bytes at `p` the kernel holds in memory.
    #[cfg(target_os = "linux")]
    fn resident_pages(p: *mut u8, len: usize) -> usize {
        // SAFETY: the page size is always known.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap();
        let mut v = vec![0u8; len.div_ceil(page)];
        // SAFETY: p is page-aligned (a mapping) and v holds a byte a page.
        let rc = unsafe { libc::mincore(p.cast(), len, v.as_mut_ptr()) };
        assert_eq!(rc, 0);
        v.iter().filter(|&&b| b & 1 == 1).count()
    }

    /// A large zeroed block holds no memory until it is written, a page at
    /// a time (a connection of 1 MiB for a 4-byte message had held 1 MiB).
    #[cfg(target_os = "linux")]
    #[test]
    fn large_blocks_take_memory_as_they_are_written() {
        let len = 4 << 20;
        let b = Zeroed::new(len).unwrap();
        let p = b.ptr().as_ptr();
        assert_eq!(p as usize % 64, 0);
        // A machine whose transparent huge pages are `always` would fault in
        // 2 MiB at the first write: what is measured here is the zeroing.
        // SAFETY: the block's own mapping.
        unsafe { libc::madvise(p.cast(), len, libc::MADV_NOHUGEPAGE) };
        assert_eq!(resident_pages(p, len), 0);
        // SAFETY: inside the block.
        unsafe {
            assert_eq!(*p.add(len / 2), 0);
            *p.add(len / 2) = 7;
        }
        assert!(resident_pages(p, len) <= 2, "{}", resident_pages(p, len));
    }

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        let mut b = HostBuf::new(1000).unwrap();
        assert_eq!(b.as_ptr() as usize % 64, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[999] = 7;
        assert_eq!(b.as_slice()[999], 7);
    }

    #[test]
    fn huge_buffers_are_an_error_not_an_abort() {
        // The size and the buffer escape, so an optimised build cannot
        // elide the allocation and report a success that never happened.
        let r = HostBuf::new(std::hint::black_box(usize::MAX / 4));
        if let Ok(b) = &r {
            std::hint::black_box(b.as_ptr());
        }
        let e = r.err();
        assert!(matches!(e, Some(AllocError::OutOfMemory { .. })), "{e:?}");
        assert!(HostBuf::new(usize::MAX).is_err());
    }

    #[test]
    fn meminfo_and_status_fields_are_bytes() {
        let meminfo =
            "MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(parse_meminfo(meminfo), Some(8_000_000 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
        let status = "Name:\tcollbench\nVmPeak:\t  300000 kB\nVmSize:\t  250000 kB\n";
        assert_eq!(parse_vm_size(status), Some(250_000 * 1024));
        assert_eq!(
            address_space_room(Some(3_000_000 * 1024), Some(250_000 * 1024)),
            Some(2_750_000 * 1024)
        );
        assert_eq!(address_space_room(Some(1024), Some(4096)), Some(0));
        assert_eq!(address_space_room(None, Some(4096)), None);
    }

    fn files<'a>(list: &'a [(&'a str, &'a str)]) -> impl Fn(&Path) -> Option<String> + 'a {
        move |p: &Path| {
            list.iter()
                .find(|(k, _)| Path::new(k) == p)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn cgroup_v2_limits_are_the_tightest_ancestor_less_its_usage() {
        let cg = "0::/user.slice/job.scope\n";
        let fs = [
            ("user.slice/job.scope/memory.max", "max\n"),
            ("user.slice/job.scope/memory.current", "1000\n"),
            ("user.slice/memory.max", "8589934592\n"),
            ("user.slice/memory.current", "1073741824\n"),
        ];
        assert_eq!(cgroup_room(cg, files(&fs)), Some(7 << 30));
        let tight = [
            ("user.slice/job.scope/memory.max", "2147483648\n"),
            ("user.slice/job.scope/memory.current", "536870912\n"),
            ("user.slice/memory.max", "8589934592\n"),
            ("user.slice/memory.current", "1073741824\n"),
        ];
        assert_eq!(cgroup_room(cg, files(&tight)), Some(1536 << 20));
        // Unlimited everywhere, or no files at all: unknown.
        assert_eq!(
            cgroup_room(cg, files(&[("user.slice/memory.max", "max")])),
            None
        );
        assert_eq!(cgroup_room("0::/\n", files(&[])), None);
        // Usage above the limit leaves nothing.
        let over = [("memory.max", "100"), ("memory.current", "200")];
        assert_eq!(cgroup_room("0::/\n", files(&over)), Some(0));
    }

    #[test]
    fn cgroup_v1_memory_controller_is_read_and_unlimited_ignored() {
        let cg = "12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n1:name=systemd:/docker/abc\n";
        let fs = [
            ("memory/docker/abc/memory.limit_in_bytes", "4294967296\n"),
            ("memory/docker/abc/memory.usage_in_bytes", "1073741824\n"),
            (
                "memory/docker/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ];
        assert_eq!(cgroup_room(cg, files(&fs)), Some(3 << 30));
        assert_eq!(parse_limit("9223372036854771712"), None);
        assert_eq!(parse_limit("max"), None);
        assert_eq!(parse_limit("garbage"), None);
        assert_eq!(parse_limit(" 4096\n"), Some(4096));
    }

    #[test]
    fn the_tightest_limit_binds() {
        let l = MemLimits {
            mem_available: Some(8 << 30),
            cgroup: Some(4 << 30),
            address_space: Some(2 << 30),
        };
        assert_eq!(l.available(), Some(2 << 30));
        assert_eq!(l.resident(), Some(4 << 30));
        assert_eq!(MemLimits::default().available(), None);
        assert!(thread_reservation(64) > thread_reservation(4));
    }

    #[test]
    fn available_memory_is_known_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(available_bytes().unwrap_or(0) > 0);
        }
    }
}
