//! `--procs N`: a launcher of our own for one node. The process the user
//! started (the parent) starts N copies of itself, one rank each, and
//! serves as their hub over a Unix socket: all-gathers (and barriers, which
//! are empty all-gathers) and tagged point-to-point messages, the few
//! things the ranks need from a launcher to bootstrap; after that the ranks
//! talk through the node's shared memory (the host engine's segments, the
//! CUDA executor's IPC memory) exactly as under MPI. The parent passes
//! stop signals on and exits with the ranks' worst exit code.
//!
//! A rank that dies is noticed by the hub (its socket closes): every
//! all-gather it never joined then fails at once on the other ranks, rather
//! than at their timeout. A rank killed by a signal (or ending with an exit
//! code collbench never uses) is reported by the parent, which tells the
//! other ranks: those waiting on it inside a collective stop at once with
//! their dumps, which name the rank that died and how.

use super::MpiError;
use crate::engine::transport::node::{BarrierError, ProcessPeers, Relay};
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The variable that makes a process a rank: "RANK SIZE SOCKET".
pub const ENV: &str = "COLLBENCH_PROCS";

/// The longest a record or message may be.
const MAX_FRAME: usize = 256 << 20;

/// How long the ranks may take to start and connect.
const CONNECT: Duration = Duration::from_secs(60);

/// How long an all-gather without a timeout of its own waits.
const GATHER_WAIT: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    /// rank -> hub: I am rank `a`.
    Hello = 1,
    /// rank -> hub: my record for all-gather number `a`.
    Gather = 2,
    /// rank -> hub: deliver to rank `a` under tag `b`.
    Send = 3,
    /// hub -> rank: every record of all-gather `a`.
    Gathered = 4,
    /// hub -> rank: all-gather `a` cannot complete: rank `b` is gone.
    Failed = 5,
    /// hub -> rank: a message from rank `a` under tag `b`.
    Message = 6,
    /// hub -> rank: rank `a`'s process died; the payload says how.
    Lost = 7,
}

impl Kind {
    fn from(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Gather,
            3 => Kind::Send,
            4 => Kind::Gathered,
            5 => Kind::Failed,
            6 => Kind::Message,
            7 => Kind::Lost,
            _ => return None,
        })
    }
}

struct Frame {
    kind: Kind,
    a: u32,
    b: u32,
    payload: Vec<u8>,
}

fn write_frame(
    w: &mut impl Write,
    kind: Kind,
    a: u32,
    b: u32,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(13 + payload.len());
    buf.extend_from_slice(&((9 + payload.len()) as u32).to_le_bytes());
    buf.push(kind as u8);
    buf.extend_from_slice(&a.to_le_bytes());
    buf.extend_from_slice(&b.to_le_bytes());
    buf.extend_from_slice(payload);
    w.write_all(&buf)
}

fn read_frame(r: &mut impl Read) -> std::io::Result<Frame> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if !(9..=MAX_FRAME).contains(&len) {
        return Err(std::io::Error::other(format!("bad frame of {len} bytes")));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    let kind = Kind::from(buf[0])
        .ok_or_else(|| std::io::Error::other(format!("bad frame kind {}", buf[0])))?;
    let word = |i: usize| u32::from_le_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
    Ok(Frame {
        kind,
        a: word(1),
        b: word(5),
        payload: buf[9..].to_vec(),
    })
}

fn encode_records(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        out.extend_from_slice(&(r.len() as u32).to_le_bytes());
        out.extend_from_slice(r);
    }
    out
}

fn decode_records(mut b: &[u8], n: usize) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
        out.push(b.get(4..4 + len)?.to_vec());
        b = &b[4 + len..];
    }
    b.is_empty().then_some(out)
}

// ---------------------------------------------------------------- the parent

/// The exit code that speaks for all ranks: an interrupt, then a hang,
/// then bad input, then a failed check, then anything else.
fn worst(codes: &[i32]) -> i32 {
    for want in [130, 3, 2, 1] {
        if codes.contains(&want) {
            return want;
        }
    }
    codes.iter().copied().find(|&c| c != 0).unwrap_or(0)
}

/// How a rank process ended, in words, when it died rather than exited as
/// collbench does (0, 1, 2, 3, 130): killed by a signal, or an exit code
/// collbench never uses (a library's `exit`, an abort handler).
fn died(status: &std::process::ExitStatus) -> Option<String> {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        let core = if status.core_dumped() {
            ", core dumped"
        } else {
            ""
        };
        return Some(match signal_name(sig) {
            Some(name) => format!("killed by signal {sig} ({name}{core})"),
            None => format!("killed by signal {sig}{core}"),
        });
    }
    match status.code() {
        Some(0 | 1 | 2 | 3 | 130) | None => None,
        Some(c) => Some(format!("exited with code {c}, not one of collbench's")),
    }
}

/// The name of a signal a process is commonly killed by.
fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}

/// Starts `n` rank processes running this program with the same arguments,
/// serves them until they all exit, and returns the run's exit code.
/// `signalled`: the stop signal the launcher got (SIGINT, SIGTERM), if any;
/// the ranks get the same. `on_death(rank, pid, how)`: a rank's process
/// died (see [`died`]) while the world ran; the other ranks are told.
pub fn launch(
    n: usize,
    signalled: &dyn Fn() -> Option<i32>,
    on_death: &dyn Fn(usize, u32, &str),
) -> Result<i32, MpiError> {
    let exe = std::env::current_exe()
        .map_err(|e| MpiError(format!("--procs: this program's path: {e}")))?;
    // The ranks are started under the name this program was run by: run
    // as an nccl-tests binary (`all_reduce_perf`, a link to collbench),
    // they read nccl-tests' flags as it did.
    let name = std::env::args_os()
        .next()
        .unwrap_or_else(|| exe.clone().into_os_string());
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let path = std::env::temp_dir().join(format!(
        "collbench-procs-{}-{}.sock",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let listener = UnixListener::bind(&path)
        .map_err(|e| MpiError(format!("--procs: a socket at {}: {e}", path.display())))?;
    let cleanup = Cleanup(path.clone());
    let mut children: Vec<Child> = Vec::with_capacity(n);
    for rank in 0..n {
        let child = Command::new(&exe)
            .arg0(&name)
            .args(&args)
            .env(ENV, format!("{rank} {n} {}", path.display()))
            .spawn()
            .map_err(|e| MpiError(format!("--procs: starting rank {rank}: {e}")));
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                stop_all(&mut children, libc::SIGKILL);
                return Err(e);
            }
        }
    }
    tracing::info!(procs = n, socket = %path.display(), "--procs: rank processes started");
    let streams = match accept_all(&listener, n, &mut children) {
        Ok(s) => s,
        Err(e) => {
            stop_all(&mut children, libc::SIGTERM);
            let codes = wait_all(&mut children, signalled, &|_, _| {});
            tracing::info!(?codes, "--procs: the world did not form");
            return Err(MpiError(format!("--procs: {e}")));
        }
    };
    // Every rank is connected: the socket's name is no longer needed (and
    // would outlive a parent that is killed).
    drop(listener);
    drop(cleanup);
    let (tx, rx) = mpsc::channel();
    let deaths = tx.clone();
    let hub = std::thread::Builder::new()
        .name("procs-hub".into())
        .spawn(move || serve(streams, tx, rx));
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    let codes = wait_all(&mut children, signalled, &|rank, status| {
        if let Some(how) = died(status) {
            tracing::info!(rank, %how, "--procs: a rank process died");
            on_death(rank, pids.get(rank).copied().unwrap_or(0), &how);
            let _ = deaths.send(Event::Died(rank, how));
        }
    });
    // The hub ends when every rank is gone and nothing more can come.
    drop(deaths);
    if let Ok(h) = hub {
        let _ = h.join();
    }
    tracing::info!(?codes, "--procs: every rank exited");
    Ok(worst(&codes))
}

/// Removes the socket file when the launch ends, however it ends.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn stop_all(children: &mut [Child], sig: libc::c_int) {
    for c in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            // SAFETY: signalling a child we started and have not reaped.
            unsafe { libc::kill(c.id() as libc::pid_t, sig) };
        }
    }
}

/// Each rank's connection, by rank (a rank says which it is first).
fn accept_all(
    listener: &UnixListener,
    n: usize,
    children: &mut [Child],
) -> Result<Vec<UnixStream>, String> {
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("socket: {e}"))?;
    let mut streams: Vec<Option<UnixStream>> = (0..n).map(|_| None).collect();
    let start = Instant::now();
    let mut got = 0;
    while got < n {
        match listener.accept() {
            Ok((mut s, _)) => {
                s.set_nonblocking(false)
                    .map_err(|e| format!("socket: {e}"))?;
                s.set_read_timeout(Some(Duration::from_secs(10)))
                    .map_err(|e| format!("socket: {e}"))?;
                let f = read_frame(&mut s).map_err(|e| format!("a rank's greeting: {e}"))?;
                let r = f.a as usize;
                if f.kind != Kind::Hello || r >= n || streams[r].is_some() {
                    return Err(format!("a bad greeting (rank {r})"));
                }
                s.set_read_timeout(None)
                    .map_err(|e| format!("socket: {e}"))?;
                streams[r] = Some(s);
                got += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Some((r, status)) = children
                    .iter_mut()
                    .enumerate()
                    .find_map(|(r, c)| c.try_wait().ok().flatten().map(|s| (r, s)))
                {
                    return Err(format!(
                        "rank {r} exited ({status}) before the world formed"
                    ));
                }
                if start.elapsed() > CONNECT {
                    return Err(format!(
                        "only {got} of {n} ranks connected within {CONNECT:?}"
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(format!("socket: {e}")),
        }
    }
    Ok(streams.into_iter().flatten().collect())
}

/// Waits for every child, passing a stop signal on once; their exit codes.
/// `ended(rank, status)` hears of each as it ends.
fn wait_all(
    children: &mut [Child],
    signalled: &dyn Fn() -> Option<i32>,
    ended: &dyn Fn(usize, &std::process::ExitStatus),
) -> Vec<i32> {
    let mut codes: Vec<Option<i32>> = vec![None; children.len()];
    let mut forwarded = false;
    while codes.iter().any(Option::is_none) {
        for (i, c) in children.iter_mut().enumerate() {
            if codes[i].is_some() {
                continue;
            }
            match c.try_wait() {
                Ok(Some(s)) => {
                    use std::os::unix::process::ExitStatusExt;
                    codes[i] = Some(s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)));
                    ended(i, &s);
                }
                Ok(None) => {}
                Err(_) => codes[i] = Some(1),
            }
        }
        if let (false, Some(sig)) = (forwarded, signalled()) {
            // A terminal's Ctrl-C reached the ranks already; a signal sent to
            // the parent alone (a job manager's) reaches them now, the same.
            forwarded = true;
            stop_all(children, sig);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    codes.into_iter().map(|c| c.unwrap_or(1)).collect()
}

enum Event {
    Frame(usize, Frame),
    /// The rank's connection closed.
    Gone(usize),
    /// The rank's process died (the parent saw how).
    Died(usize, String),
}

/// The hub: forwards messages and completes all-gathers until every rank
/// has gone. `tx` and `rx`: its events' channel (the parent keeps a sender
/// for [`Event::Died`]).
fn serve(streams: Vec<UnixStream>, tx: mpsc::Sender<Event>, rx: mpsc::Receiver<Event>) {
    let n = streams.len();
    let mut writers = Vec::with_capacity(n);
    for (r, s) in streams.into_iter().enumerate() {
        let mut reader = match s.try_clone() {
            Ok(c) => c,
            Err(_) => {
                let _ = tx.send(Event::Gone(r));
                writers.push(None);
                continue;
            }
        };
        writers.push(Some(s));
        let tx = tx.clone();
        let _ = std::thread::Builder::new()
            .name(format!("procs-hub-{r}"))
            .spawn(move || loop {
                match read_frame(&mut reader) {
                    Ok(f) => {
                        if tx.send(Event::Frame(r, f)).is_err() {
                            return;
                        }
                    }
                    Err(_) => {
                        let _ = tx.send(Event::Gone(r));
                        return;
                    }
                }
            });
    }
    drop(tx);
    let mut gathers: HashMap<u32, Vec<Option<Vec<u8>>>> = HashMap::new();
    let mut joined: Vec<u32> = vec![0; n];
    let mut gone: Vec<bool> = vec![false; n];
    let send = |writers: &mut Vec<Option<UnixStream>>, to: usize, kind, a, b, p: &[u8]| {
        if let Some(w) = writers.get_mut(to).and_then(Option::as_mut) {
            if write_frame(w, kind, a, b, p).is_err() {
                writers[to] = None;
            }
        }
    };
    while let Ok(ev) = rx.recv() {
        match ev {
            Event::Frame(r, f) => match f.kind {
                Kind::Gather => {
                    let seq = f.a;
                    joined[r] = joined[r].max(seq + 1);
                    if let Some(d) = (0..n).find(|&d| gone[d] && joined[d] <= seq) {
                        send(&mut writers, r, Kind::Failed, seq, d as u32, &[]);
                        continue;
                    }
                    let slot = gathers.entry(seq).or_insert_with(|| vec![None; n]);
                    slot[r] = Some(f.payload);
                    if slot.iter().all(Option::is_some) {
                        let records: Vec<Vec<u8>> = gathers
                            .remove(&seq)
                            .unwrap_or_default()
                            .into_iter()
                            .flatten()
                            .collect();
                        let all = encode_records(&records);
                        for to in 0..n {
                            send(&mut writers, to, Kind::Gathered, seq, 0, &all);
                        }
                    }
                }
                Kind::Send => {
                    send(
                        &mut writers,
                        f.a as usize,
                        Kind::Message,
                        r as u32,
                        f.b,
                        &f.payload,
                    );
                }
                _ => {}
            },
            Event::Died(r, how) => {
                // Ranks inside a collective with it wait on its shared
                // memory, not on the hub: tell every other rank.
                for to in (0..n).filter(|&to| to != r) {
                    send(&mut writers, to, Kind::Lost, r as u32, 0, how.as_bytes());
                }
            }
            Event::Gone(r) => {
                gone[r] = true;
                writers[r] = None;
                // Gathers it never joined cannot complete: tell who waits.
                let stuck: Vec<u32> = gathers
                    .iter()
                    .filter(|(&seq, slot)| joined[r] <= seq && slot.iter().any(Option::is_some))
                    .map(|(&seq, _)| seq)
                    .collect();
                for seq in stuck {
                    if let Some(slot) = gathers.remove(&seq) {
                        for (to, s) in slot.iter().enumerate() {
                            if s.is_some() {
                                send(&mut writers, to, Kind::Failed, seq, r as u32, &[]);
                            }
                        }
                    }
                }
                if gone.iter().all(|&g| g) {
                    return;
                }
            }
        }
    }
}

// ------------------------------------------------------------------ a rank

#[derive(Default)]
struct State {
    gathered: HashMap<u32, Result<Vec<Vec<u8>>, String>>,
    messages: HashMap<i32, VecDeque<(usize, Vec<u8>)>>,
    next_gather: u32,
    closed: bool,
    /// The first rank the launcher said died, and how.
    lost: Option<(usize, String)>,
}

struct Link {
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
    if rank >= size {
        return Err(bad());
    }
    // A rank whose launcher is killed (a `timeout`, a job manager) stops
    // too, with its dump, rather than running on alone.
    // SAFETY: prctl with plain integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
    connect(rank, size, Path::new(path)).map(Some)
}

fn connect(rank: usize, size: usize, path: &Path) -> Result<Procs, MpiError> {
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
    let me = super::hostname();
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
        super::node_links(&*self.peers(), &|| self.barrier_fn(), shape)
    }
}

impl Link {
    fn gather(
        &self,
        mine: &[u8],
        timeout: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<Vec<Vec<u8>>, MpiError> {
        // Every rank's record comes back in one frame.
        if mine.len() > (MAX_FRAME - 9) / self.size.max(1) - 4 {
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

    fn send(&self, to: usize, tag: i32, bytes: &[u8]) -> Result<(), MpiError> {
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

    fn try_receive(&self, tag: i32) -> Option<(usize, Vec<u8>)> {
        let mut st = self.state.lock().ok()?;
        st.messages.get_mut(&tag)?.pop_front()
    }
}

/// A `--procs` world as the executors see it.
struct ProcsPeers {
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
        self.all_gather_until(mine, &|| false)
    }
    fn all_gather_until(
        &self,
        mine: &[u8],
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Vec<u8>>, BarrierError> {
        self.link
            .gather(mine, GATHER_WAIT, stop)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_records_round_trip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, Kind::Send, 3, 7, b"hello").unwrap();
        let f = read_frame(&mut buf.as_slice()).unwrap();
        assert_eq!(
            (f.kind, f.a, f.b, f.payload.as_slice()),
            (Kind::Send, 3, 7, &b"hello"[..])
        );
        let recs = vec![b"a".to_vec(), Vec::new(), b"ccc".to_vec()];
        assert_eq!(
            decode_records(&encode_records(&recs), 3),
            Some(recs.clone())
        );
        assert_eq!(
            decode_records(&encode_records(&recs), 2),
            None,
            "trailing bytes"
        );
        assert_eq!(
            decode_records(&encode_records(&recs)[..5], 3),
            None,
            "short"
        );
        let mut bad = buf.clone();
        bad[4] = 99;
        assert!(read_frame(&mut bad.as_slice()).is_err());
    }

    #[test]
    fn deaths_are_told_from_collbench_exits() {
        use std::os::unix::process::ExitStatusExt;
        let exit = |c: i32| std::process::ExitStatus::from_raw(c << 8);
        for c in [0, 1, 2, 3, 130] {
            assert_eq!(died(&exit(c)), None, "collbench's own exit {c}");
        }
        assert_eq!(
            died(&exit(101)).as_deref(),
            Some("exited with code 101, not one of collbench's")
        );
        assert_eq!(
            died(&std::process::ExitStatus::from_raw(libc::SIGKILL)).as_deref(),
            Some("killed by signal 9 (SIGKILL)")
        );
        assert_eq!(
            died(&std::process::ExitStatus::from_raw(libc::SIGSEGV | 0x80)).as_deref(),
            Some("killed by signal 11 (SIGSEGV, core dumped)")
        );
        assert_eq!(
            died(&std::process::ExitStatus::from_raw(40)).as_deref(),
            Some("killed by signal 40")
        );
    }

    #[test]
    fn the_worst_exit_code_speaks_for_the_run() {
        assert_eq!(worst(&[0, 0, 0]), 0);
        assert_eq!(worst(&[0, 1, 3]), 3);
        assert_eq!(worst(&[2, 0, 130]), 130);
        assert_eq!(worst(&[0, 1, 0]), 1);
        assert_eq!(worst(&[0, 137]), 137);
    }

    /// A hub and three ranks in threads of this process: gathers complete
    /// in order, messages reach their rank, and a rank that goes fails the
    /// gathers it never joined at once.
    #[test]
    fn a_hub_serves_ranks_and_notices_one_that_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let n = 3;
        let joins: Vec<_> = (0..n)
            .map(|r| {
                let p = path.clone();
                std::thread::spawn(move || connect(r, n, &p).unwrap())
            })
            .collect();
        let mut streams: Vec<Option<UnixStream>> = (0..n).map(|_| None).collect();
        for _ in 0..n {
            let (mut s, _) = listener.accept().unwrap();
            let f = read_frame(&mut s).unwrap();
            streams[f.a as usize] = Some(s);
        }
        let (tx, rx) = mpsc::channel();
        let deaths = tx.clone();
        let hub =
            std::thread::spawn(move || serve(streams.into_iter().flatten().collect(), tx, rx));
        let mut ranks: Vec<Procs> = joins.into_iter().map(|j| j.join().unwrap()).collect();
        assert!(ranks.iter().all(|p| p.hosts().len() == n));
        let last = ranks.pop().unwrap();
        let peer = std::thread::spawn(move || {
            let all = last.all_gather(b"two").unwrap();
            last.send(0, 9, b"from two");
            (all, last)
        });
        let others: Vec<_> = ranks
            .into_iter()
            .map(|p| {
                std::thread::spawn(move || {
                    let all = p.all_gather(format!("r{}", p.rank()).as_bytes()).unwrap();
                    (all, p)
                })
            })
            .collect();
        let mut ranks: Vec<Procs> = Vec::new();
        for o in others {
            let (all, p) = o.join().unwrap();
            assert_eq!(all, vec![b"r0".to_vec(), b"r1".to_vec(), b"two".to_vec()]);
            ranks.push(p);
        }
        let (_, last) = peer.join().unwrap();
        let t = Instant::now();
        let got = loop {
            if let Some(m) = ranks[0].try_receive(9) {
                break m;
            }
            assert!(t.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(got, (2, b"from two".to_vec()));
        assert_eq!(ranks[0].try_receive(9), None);
        // The parent saw rank 2 die: every other rank hears which and how.
        let probes: Vec<_> = ranks.iter().map(Procs::lost_probe).collect();
        assert!(probes.iter().all(|p| p().is_none()), "nobody died yet");
        deaths
            .send(Event::Died(2, "killed by signal 9 (SIGKILL)".into()))
            .unwrap();
        drop(deaths);
        let t = Instant::now();
        while probes.iter().any(|p| p().is_none()) {
            assert!(t.elapsed() < Duration::from_secs(10), "not told in 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
        for p in &probes {
            assert_eq!(p(), Some((2, "killed by signal 9 (SIGKILL)".into())));
        }
        // Rank 2 goes: the others' next barrier fails at once, not at its timeout.
        drop(last);
        let t = Instant::now();
        let e = ranks[0]
            .barrier(Duration::from_secs(30), &|| false)
            .unwrap_err();
        assert!(e.0.contains("rank 2 exited"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
        drop(ranks);
        hub.join().unwrap();
    }
}
