//! A rank's side: joining the parent's hub, all-gathers and barriers with
//! timeouts, messages by tag, and the world as the executors see it
//! ([`ProcessPeers`]).

use super::*;

#[derive(Default)]
pub(super) struct State {
    gathered: HashMap<u32, Result<Vec<Vec<u8>>, String>>,
    messages: HashMap<i32, VecDeque<(usize, Vec<u8>)>>,
    next_gather: u32,
    closed: bool,
    /// The first rank the launcher said died, and how.
    lost: Option<(usize, String)>,
}

pub(super) struct Link {
    /// Ranks in the world (bounds each rank's all-gather record).
    size: usize,
    writer: Mutex<UnixStream>,
    state: Mutex<State>,
    cv: Condvar,
}

/// Says whether the launcher told of a rank whose process died: which
/// rank, and how it ended.
pub type LostProbe = Box<dyn Fn() -> Option<(usize, String)> + Send>;

/// This process's place in a `--procs` world.
pub struct Procs {
    rank: usize,
    size: usize,
    hosts: Vec<String>,
    link: Arc<Link>,
}

/// This process's rank when the `--procs` parent started it as one (from
/// [`ENV`], as [`init`] reads it; `init` checks the rest).
pub fn rank_here() -> Option<usize> {
    std::env::var(ENV).ok()?.split(' ').next()?.parse().ok()
}

/// Whether this process is the first of its `--procs` launch to say
/// `text` (an error line): ranks that meet the same error (a refusal every
/// rank finds for itself) say it once between them, not once a rank. The
/// first to enter its hash in the launch's table says it; a process that
/// is no rank, or cannot tell (no table), says it.
pub fn say_once(text: &str) -> bool {
    if std::env::var_os(ENV).is_none() {
        return true;
    }
    let Some(fd) = std::env::var(SAID_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    else {
        return true;
    };
    // Only the launch's own memory file: a descriptor of another file
    // (the variable set by hand) is never written.
    let ours = std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok_and(|l| {
        l.to_string_lossy()
            .starts_with(&format!("/memfd:{SAID_NAME}"))
    });
    if !ours {
        return true;
    }
    let len = SAID_SLOTS * 8;
    // SAFETY: a shared mapping of `len` bytes of the launch's memory file,
    // which the parent sized to `len`; unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return true;
    }
    // SAFETY: the mapping holds SAID_SLOTS aligned u64 words, which every
    // process of the launch accesses only atomically.
    let slots =
        unsafe { std::slice::from_raw_parts(p as *const std::sync::atomic::AtomicU64, SAID_SLOTS) };
    let first = first_to_say(slots, text);
    // SAFETY: unmapping the mapping made above; `slots` is not used after.
    unsafe { libc::munmap(p, len) };
    first
}

/// Whether `text`'s hash is this call's to enter in `slots` (see
/// [`say_once`]); a full table says everything.
pub(super) fn first_to_say(slots: &[std::sync::atomic::AtomicU64], text: &str) -> bool {
    use std::sync::atomic::Ordering;
    // A stable hash: the same words give the same hash in every process
    // (std's hasher is only guaranteed within one); never 0.
    let h = crate::engine::exec::cuda::kernels::Fnv1a::new()
        .write(text.as_bytes())
        .finish()
        .max(1);
    let n = slots.len();
    for k in 0..n {
        let slot = &slots[(h as usize).wrapping_add(k) % n];
        match slot.compare_exchange(0, h, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(v) if v == h => return false,
            Err(_) => {}
        }
    }
    true
}

/// Joins the `--procs` world when the parent started this process as a rank.
pub fn init() -> Result<Option<Procs>, MpiError> {
    let Ok(v) = std::env::var(ENV) else {
        return Ok(None);
    };
    let bad = || MpiError(format!("{ENV}='{v}': not set by collbench --procs"));
    let mut w = v.splitn(3, ' ');
    let rank: usize = w.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let size: usize = w.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let path = w.next().ok_or_else(bad)?;
    if rank >= size || size > super::MAX_PROCS {
        return Err(bad());
    }
    // A rank whose launcher is killed (a `timeout`, a job manager) stops
    // too, with its dump, rather than running on alone.
    // SAFETY: prctl with plain integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
    connect(rank, size, Path::new(path)).map(Some)
}

pub(super) fn connect(rank: usize, size: usize, path: &Path) -> Result<Procs, MpiError> {
    let mut s = UnixStream::connect(path).map_err(|e| {
        MpiError(format!(
            "--procs: the launcher's socket {}: {e}",
            path.display()
        ))
    })?;
    write_frame(&mut s, Kind::Hello, rank as u32, 0, &[])
        .map_err(|e| MpiError(format!("--procs: {e}")))?;
    let mut reader = s
        .try_clone()
        .map_err(|e| MpiError(format!("--procs: {e}")))?;
    let link = Arc::new(Link {
        size,
        writer: Mutex::new(s),
        state: Mutex::new(State::default()),
        cv: Condvar::new(),
    });
    let l = Arc::clone(&link);
    std::thread::Builder::new()
        .name("procs-link".into())
        .spawn(move || {
            while let Ok(f) = read_frame(&mut reader) {
                let mut st = l.state.lock().unwrap_or_else(|e| e.into_inner());
                match f.kind {
                    Kind::Gathered => {
                        let r = decode_records(&f.payload, size)
                            .ok_or_else(|| "a malformed all-gather from the launcher".to_string());
                        st.gathered.insert(f.a, r);
                    }
                    Kind::Failed => {
                        st.gathered.insert(f.a, Err(format!("rank {} exited", f.b)));
                    }
                    Kind::Message => st
                        .messages
                        .entry(f.b as i32)
                        .or_default()
                        .push_back((f.a as usize, f.payload)),
                    Kind::Lost => {
                        let how = String::from_utf8_lossy(&f.payload).into_owned();
                        st.lost.get_or_insert((f.a as usize, how));
                    }
                    _ => {}
                }
                drop(st);
                l.cv.notify_all();
            }
            l.state.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
            l.cv.notify_all();
        })
        .map_err(|e| MpiError(format!("--procs: {e}")))?;
    let me = super::super::hostname();
    let mut p = Procs {
        rank,
        size,
        hosts: Vec::new(),
        link,
    };
    p.hosts = p
        .all_gather(me.as_bytes())?
        .into_iter()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .collect();
    tracing::info!(rank, size, "--procs: joined the world");
    Ok(p)
}

impl Procs {
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// Every rank's `mine`, by rank.
    pub fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, MpiError> {
        self.link.gather(mine, GATHER_WAIT, &|| false)
    }

    /// A barrier that gives up after `timeout` or when `abort()` says so.
    pub fn barrier(&self, timeout: Duration, abort: &dyn Fn() -> bool) -> Result<(), MpiError> {
        self.link.gather(&[], timeout, abort).map(|_| ())
    }

    /// The barrier as a value other threads can call.
    pub fn barrier_fn(&self) -> crate::engine::transport::node::Barrier {
        let link = Arc::clone(&self.link);
        Box::new(move |timeout, abort| {
            link.gather(&[], timeout, abort)
                .map(|_| ())
                .map_err(|e| BarrierError(e.0))
        })
    }

    pub fn send(&self, to: usize, tag: i32, bytes: &[u8]) {
        if let Err(e) = self.link.send(to, tag, bytes) {
            tracing::warn!(to, tag, error = %e, "--procs: a message was not sent");
        }
    }

    pub fn try_receive(&self, tag: i32) -> Option<(usize, Vec<u8>)> {
        self.link.try_receive(tag)
    }

    /// Rank 0's `bytes` on every rank.
    pub fn broadcast(&self, bytes: &[u8]) -> Result<Vec<u8>, MpiError> {
        let all = self.all_gather(if self.rank == 0 { bytes } else { &[] })?;
        Ok(all.into_iter().next().unwrap_or_default())
    }

    /// Asks whether the launcher said a rank's process died: which, and how.
    pub fn lost_probe(&self) -> LostProbe {
        let link = Arc::clone(&self.link);
        Box::new(move || link.state.lock().ok()?.lost.clone())
    }

    /// This world as the executors see it.
    pub fn peers(&self) -> Arc<dyn ProcessPeers> {
        Arc::new(ProcsPeers {
            rank: self.rank,
            size: self.size,
            hosts: self.hosts.clone(),
            link: Arc::clone(&self.link),
        })
    }
}

impl Drop for Procs {
    /// Closes the connection: the hub counts this rank gone.
    fn drop(&mut self) {
        if let Ok(w) = self.link.writer.lock() {
            let _ = w.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Procs {
    /// Links to every other rank through the node's shared memory.
    pub fn node_links(
        &self,
        shape: crate::engine::transport::node::Shape,
    ) -> Result<crate::engine::transport::node::NodeLinks, MpiError> {
        super::super::node_links(&*self.peers(), &|| self.barrier_fn(), shape)
    }
}

impl Link {
    pub(super) fn gather(
        &self,
        mine: &[u8],
        timeout: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<Vec<Vec<u8>>, MpiError> {
        // Every rank's record comes back in one frame.
        if mine.len() > ((MAX_FRAME - 9) / self.size.max(1)).saturating_sub(4) {
            return Err(MpiError(format!(
                "a record of {} bytes is too long",
                mine.len()
            )));
        }
        let seq = {
            let mut st = self
                .state
                .lock()
                .map_err(|_| MpiError("--procs state poisoned".into()))?;
            st.next_gather += 1;
            st.next_gather - 1
        };
        {
            let mut w = self
                .writer
                .lock()
                .map_err(|_| MpiError("--procs socket poisoned".into()))?;
            write_frame(&mut *w, Kind::Gather, seq, 0, mine)
                .map_err(|e| MpiError(format!("--procs: the launcher is gone ({e})")))?;
        }
        let start = Instant::now();
        let mut st = self
            .state
            .lock()
            .map_err(|_| MpiError("--procs state poisoned".into()))?;
        loop {
            if let Some(r) = st.gathered.remove(&seq) {
                return r.map_err(MpiError);
            }
            if st.closed {
                return Err(MpiError("--procs: the launcher is gone".into()));
            }
            if abort() {
                return Err(MpiError("aborted".into()));
            }
            if start.elapsed() > timeout {
                return Err(MpiError(format!(
                    "--procs barrier waited {:?}",
                    start.elapsed()
                )));
            }
            st = self
                .cv
                .wait_timeout(st, Duration::from_millis(20))
                .map_err(|_| MpiError("--procs state poisoned".into()))?
                .0;
        }
    }

    pub(super) fn send(&self, to: usize, tag: i32, bytes: &[u8]) -> Result<(), MpiError> {
        if bytes.len() > MAX_FRAME - 9 {
            return Err(MpiError(format!(
                "a message of {} bytes is too long for --procs",
                bytes.len()
            )));
        }
        let mut w = self
            .writer
            .lock()
            .map_err(|_| MpiError("--procs socket poisoned".into()))?;
        write_frame(&mut *w, Kind::Send, to as u32, tag as u32, bytes)
            .map_err(|e| MpiError(format!("--procs: the launcher is gone ({e})")))
    }

    pub(super) fn try_receive(&self, tag: i32) -> Option<(usize, Vec<u8>)> {
        let mut st = self.state.lock().ok()?;
        st.messages.get_mut(&tag)?.pop_front()
    }
}

/// A `--procs` world as the executors see it.
pub(super) struct ProcsPeers {
    rank: usize,
    size: usize,
    hosts: Vec<String>,
    link: Arc<Link>,
}

impl ProcessPeers for ProcsPeers {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn hosts(&self) -> &[String] {
        &self.hosts
    }
    fn maps(&self, _r: usize) -> bool {
        true
    }
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BarrierError> {
        self.all_gather_until(mine, None, &|| false)
    }
    fn all_gather_until(
        &self,
        mine: &[u8],
        limit: Option<Duration>,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Vec<u8>>, BarrierError> {
        self.link
            .gather(mine, limit.unwrap_or(GATHER_WAIT), stop)
            .map_err(|e| BarrierError(e.0))
    }
    fn send(&self, to: usize, tag: i32, bytes: &[u8]) -> Result<(), BarrierError> {
        self.link
            .send(to, tag, bytes)
            .map_err(|e| BarrierError(e.0))
    }
    fn try_receive(&self, tag: i32) -> Option<(usize, Vec<u8>)> {
        self.link.try_receive(tag)
    }
    fn relay(&self) -> Option<Arc<dyn Relay>> {
        None
    }
    fn lost(&self) -> Option<usize> {
        Some(self.link.state.lock().ok()?.lost.as_ref()?.0)
    }
}
