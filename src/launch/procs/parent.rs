//! The parent: starts the ranks, serves as their hub (all-gathers,
//! messages, deaths told to the others), passes stop signals on and
//! speaks for the ranks' exit codes.

use super::*;
use std::os::fd::AsRawFd;

/// The exit code that speaks for all ranks: an interrupt, then a hang,
/// then bad input, then a failed check, then anything else.
pub(super) fn worst(codes: &[i32]) -> i32 {
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
pub(super) fn died(status: &std::process::ExitStatus) -> Option<String> {
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
pub(super) fn signal_name(sig: i32) -> Option<&'static str> {
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

/// What the parent hears of its own process and says of its ranks'.
pub struct Hooks<'a> {
    /// The stop signal the launcher got (SIGINT, SIGTERM), if any; the
    /// ranks get the same.
    pub signalled: &'a dyn Fn() -> Option<i32>,
    /// Whether SIGUSR1 came since the last call: the ranks get it (each
    /// writes a snapshot of its flight recorder).
    pub snapshot: &'a dyn Fn() -> bool,
    /// `(rank, pid, how)`: a rank's process died (see [`died`]) while the
    /// world ran; the other ranks are told.
    pub on_death: &'a dyn Fn(usize, u32, &str),
}

/// What the other ranks are told of a rank that exited with an error (exit
/// 2) while they ran: they stop at once, as for a rank that died, rather
/// than wait for it until their timeout.
const FAILED: &str = "exited with code 2 after the error above";

/// How long after a rank's exit 2 the others are told of it: ranks that
/// met the same error (a refusal every rank meets) end on their own by
/// then, with their own message, rather than as stopped by a peer.
const FAILED_NEWS: Duration = Duration::from_millis(500);

/// Starts `n` rank processes running this program with the same arguments,
/// serves them until they all exit, and returns the run's exit code: the
/// worst of theirs (see [`worst`]), but that of a rank that failed with an
/// error while the others ran, for whose ending it stands.
pub fn launch(n: usize, hooks: &Hooks) -> Result<i32, MpiError> {
    let signalled = hooks.signalled;
    let exe = std::env::current_exe()
        .map_err(|e| MpiError(format!("--procs: this program's path: {e}")))?;
    // The ranks are started under the name this program was run by: run
    // as an nccl-tests binary (`all_reduce_perf`, a link to collbench),
    // they read nccl-tests' flags as it did.
    let name = std::env::args_os()
        .next()
        .unwrap_or_else(|| exe.clone().into_os_string());
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let socket = format!(
        "collbench-procs-{}-{}.sock",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    // A socket's path holds at most 107 bytes: under a longer TMPDIR, /tmp.
    let path = match std::env::temp_dir().join(&socket) {
        p if p.as_os_str().len() < 100 => p,
        _ => std::path::Path::new("/tmp").join(&socket),
    };
    let listener = UnixListener::bind(&path)
        .map_err(|e| MpiError(format!("--procs: a socket at {}: {e}", path.display())))?;
    let cleanup = Cleanup(path.clone());
    // The ranks' table of errors said (see `say_once`), open until every
    // rank has exited; without it each rank says its own.
    let said = said_table();
    let mut children: Vec<Child> = Vec::with_capacity(n);
    for rank in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.arg0(&name)
            .args(&args)
            .env(ENV, format!("{rank} {n} {}", path.display()));
        match &said {
            Some(fd) => cmd.env(SAID_ENV, fd.as_raw_fd().to_string()),
            None => cmd.env_remove(SAID_ENV),
        };
        let child = cmd
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
            // No rank may join late (and wait for a world that will not form).
            drop(listener);
            drop(cleanup);
            stop_all(&mut children, libc::SIGTERM);
            let codes = wait_all(&mut children, signalled, &|| false, &|_, _, _| {});
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
    let failed: std::cell::Cell<Option<usize>> = std::cell::Cell::new(None);
    let codes = wait_all(
        &mut children,
        signalled,
        hooks.snapshot,
        &|rank, status, ours| {
            if let Some(how) = died(status) {
                let how = match ours {
                    Some(why) => format!("{how}, {why}"),
                    None => how,
                };
                tracing::info!(rank, %how, "--procs: a rank process died");
                (hooks.on_death)(rank, pids.get(rank).copied().unwrap_or(0), &how);
                let _ = deaths.send(Event::Died(rank, how));
            } else if status.code() == Some(2) && failed.get().is_none() {
                tracing::info!(rank, "--procs: a rank process failed; the others are told");
                failed.set(Some(rank));
                let tell = deaths.clone();
                let _ = std::thread::Builder::new()
                    .name("procs-failed".into())
                    .spawn(move || {
                        std::thread::sleep(FAILED_NEWS);
                        let _ = tell.send(Event::Died(rank, FAILED.into()));
                    });
            }
        },
    );
    // The hub ends when every rank is gone and nothing more can come.
    drop(deaths);
    if let Ok(h) = hub {
        let _ = h.join();
    }
    tracing::info!(?codes, "--procs: every rank exited");
    // The others stopped because it failed (a hang, 3, said so): its error
    // speaks for the run, unless a signal stopped it.
    match failed.get() {
        Some(_) if !codes.contains(&130) => Ok(2),
        _ => Ok(worst(&codes)),
    }
}

/// Removes the socket file when the launch ends, however it ends.
pub(super) struct Cleanup(PathBuf);

/// The launch's table of errors said ([`super::say_once`]): a zeroed
/// memory file the ranks inherit open (not closed on exec), or `None`
/// where it cannot be made.
fn said_table() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let name = std::ffi::CString::new(SAID_NAME).ok()?;
    // SAFETY: memfd_create with a NUL-terminated name and no flags.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
    if fd < 0 {
        tracing::info!(error = %std::io::Error::last_os_error(), "--procs: no table of errors said once");
        return None;
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: sizing the memory file just made; it reads as zeros.
    let sized = unsafe { libc::ftruncate(fd.as_raw_fd(), (SAID_SLOTS * 8) as libc::off_t) } == 0;
    sized.then_some(fd)
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub(super) fn stop_all(children: &mut [Child], sig: libc::c_int) {
    for c in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            // SAFETY: signalling a child we started and have not reaped.
            unsafe { libc::kill(c.id() as libc::pid_t, sig) };
        }
    }
}

/// Each rank's connection, by rank (a rank says which it is first).
pub(super) fn accept_all(
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

/// How long ranks have to stop after a stop signal before the parent kills
/// them: longer than a rank's own wind-down (the watchdog's 10 s of grace,
/// then its dumps).
const SIGNAL_GRACE: Duration = Duration::from_secs(20);

/// How long ranks have to end after another rank ended the run (it failed,
/// or it found a hang) before the parent kills them: their wind-down (5 s),
/// their wait for the others' dumps (12 s), then rank 0's results written.
const ENDED_GRACE: Duration = Duration::from_secs(30);

/// Waits for every child, passing a stop signal and SIGUSR1 (`snapshot`)
/// on; their exit codes. `ended(rank, status)` hears of each as it ends.
/// Once a stop signal came ([`SIGNAL_GRACE`]) or a rank ended other than
/// well ([`ENDED_GRACE`]), the ranks still running get that long to end;
/// then they are killed (one stopped, or stuck in a driver call, held the
/// run for ever).
pub(super) fn wait_all(
    children: &mut [Child],
    signalled: &dyn Fn() -> Option<i32>,
    snapshot: &dyn Fn() -> bool,
    ended: &dyn Fn(usize, &std::process::ExitStatus, Option<&str>),
) -> Vec<i32> {
    let mut codes: Vec<Option<i32>> = vec![None; children.len()];
    // Why the ranks this loop killed were killed, in words.
    let mut ours: Vec<Option<String>> = vec![None; children.len()];
    let mut forwarded = false;
    // Since when the run is ending, why, and the grace the ranks get.
    let mut ending: Option<(Instant, &str, Duration)> = None;
    let mut killed = false;
    while codes.iter().any(Option::is_none) {
        for (i, c) in children.iter_mut().enumerate() {
            if codes[i].is_some() {
                continue;
            }
            match c.try_wait() {
                Ok(Some(s)) => {
                    use std::os::unix::process::ExitStatusExt;
                    let code = s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0));
                    codes[i] = Some(code);
                    if code != 0 && ending.is_none() {
                        ending = Some((Instant::now(), "another rank ended the run", ENDED_GRACE));
                    }
                    ended(i, &s, ours[i].as_deref());
                }
                Ok(None) => {}
                Err(_) => codes[i] = Some(1),
            }
        }
        if let (false, Some(sig)) = (forwarded, signalled()) {
            // A terminal's Ctrl-C reached the ranks already; a signal sent to
            // the parent alone (a job manager's) reaches them now, the same.
            forwarded = true;
            // The signal's shorter grace holds from now, whatever came first.
            let grace = ending.map_or(SIGNAL_GRACE, |(at, _, g)| {
                SIGNAL_GRACE.min(g.saturating_sub(at.elapsed()))
            });
            ending = Some((Instant::now(), "the stop signal", grace));
            stop_all(children, sig);
        }
        if snapshot() {
            stop_all(children, libc::SIGUSR1);
        }
        if let (Some((at, why, grace)), false) = (ending, killed) {
            if at.elapsed() > grace {
                killed = true;
                let left: Vec<usize> = (0..children.len())
                    .filter(|&i| codes[i].is_none())
                    .collect();
                // Their deaths are said as any rank's, saying who killed them.
                tracing::warn!(
                    ranks = ?left,
                    "--procs: rank(s) still running {:?} after {why}: killed",
                    at.elapsed()
                );
                for &i in &left {
                    // One that ended since it was looked at is said as it ended.
                    let running = matches!(children[i].try_wait(), Ok(None));
                    if running && children[i].kill().is_ok() {
                        ours[i] = Some(format!(
                            "by collbench: still running {:.0?} after {why}",
                            at.elapsed()
                        ));
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    codes.into_iter().map(|c| c.unwrap_or(1)).collect()
}

pub(super) enum Event {
    Frame(usize, Frame),
    /// The rank's connection closed.
    Gone(usize),
    /// The rank's process died (the parent saw how).
    Died(usize, String),
}

/// The hub: forwards messages and completes all-gathers until every rank
/// has gone. `tx` and `rx`: its events' channel (the parent keeps a sender
/// for [`Event::Died`]).
pub(super) fn serve(streams: Vec<UnixStream>, tx: mpsc::Sender<Event>, rx: mpsc::Receiver<Event>) {
    let n = streams.len();
    let mut hub = Hub {
        writers: spawn_readers(streams, tx),
        gathers: HashMap::new(),
        joined: vec![0; n],
        gone: vec![false; n],
    };
    while let Ok(ev) = rx.recv() {
        match ev {
            Event::Frame(r, f) => match f.kind {
                Kind::Gather => hub.gather(r, f.a, f.payload),
                Kind::Send => hub.send(f.a as usize, Kind::Message, r as u32, f.b, &f.payload),
                _ => {}
            },
            Event::Died(r, how) => {
                // Ranks inside a collective with it wait on its shared
                // memory, not on the hub: tell every other rank.
                for to in (0..n).filter(|&to| to != r) {
                    hub.send(to, Kind::Lost, r as u32, 0, how.as_bytes());
                }
            }
            Event::Gone(r) => {
                hub.gone(r);
                if hub.gone.iter().all(|&g| g) {
                    return;
                }
            }
        }
    }
}

/// One reader thread a rank, each turning its frames into events on `tx`;
/// the writers, `None` for a rank whose stream could not be shared.
fn spawn_readers(streams: Vec<UnixStream>, tx: mpsc::Sender<Event>) -> Vec<Option<UnixStream>> {
    let mut writers = Vec::with_capacity(streams.len());
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
    writers
}

/// The hub's state: a writer a rank, the all-gathers under way (a slot a
/// rank), how far each rank joined them, and the ranks gone.
struct Hub {
    writers: Vec<Option<UnixStream>>,
    gathers: HashMap<u32, Vec<Option<Vec<u8>>>>,
    joined: Vec<u32>,
    gone: Vec<bool>,
}

impl Hub {
    /// Writes a frame to rank `to`; a rank that cannot be written to is
    /// written to no more.
    fn send(&mut self, to: usize, kind: Kind, a: u32, b: u32, p: &[u8]) {
        if let Some(w) = self.writers.get_mut(to).and_then(Option::as_mut) {
            if write_frame(w, kind, a, b, p).is_err() {
                self.writers[to] = None;
            }
        }
    }

    /// Rank `r` joins all-gather `seq`; the last to join sends every rank
    /// the records. A rank already gone that never joined fails it.
    fn gather(&mut self, r: usize, seq: u32, payload: Vec<u8>) {
        let n = self.writers.len();
        self.joined[r] = self.joined[r].max(seq.saturating_add(1));
        if let Some(d) = (0..n).find(|&d| self.gone[d] && self.joined[d] <= seq) {
            self.send(r, Kind::Failed, seq, d as u32, &[]);
            return;
        }
        let slot = self.gathers.entry(seq).or_insert_with(|| vec![None; n]);
        slot[r] = Some(payload);
        if slot.iter().all(Option::is_some) {
            let records: Vec<Vec<u8>> = self
                .gathers
                .remove(&seq)
                .unwrap_or_default()
                .into_iter()
                .flatten()
                .collect();
            let all = encode_records(&records);
            for to in 0..n {
                self.send(to, Kind::Gathered, seq, 0, &all);
            }
        }
    }

    /// Rank `r` has gone: the gathers it never joined cannot complete, so
    /// those waiting in them are told.
    fn gone(&mut self, r: usize) {
        self.gone[r] = true;
        self.writers[r] = None;
        let joined = self.joined[r];
        let stuck: Vec<u32> = self
            .gathers
            .iter()
            .filter(|(&seq, slot)| joined <= seq && slot.iter().any(Option::is_some))
            .map(|(&seq, _)| seq)
            .collect();
        for seq in stuck {
            if let Some(slot) = self.gathers.remove(&seq) {
                for (to, s) in slot.iter().enumerate() {
                    if s.is_some() {
                        self.send(to, Kind::Failed, seq, r as u32, &[]);
                    }
                }
            }
        }
    }
}
