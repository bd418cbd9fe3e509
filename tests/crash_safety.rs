//! A Rust program must not crash: interrupting a sweep at any moment never
//! ends in a segfault or an abort (peers read each other's buffers, which
//! must outlive every reader), and running out of memory is a clear error
//! (exit 2), not an allocation abort.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn bin() -> std::path::PathBuf {
    assert_cmd::cargo::cargo_bin("collbench")
}

/// A small xorshift generator: random moments without a crate.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Rng(t ^ (u64::from(std::process::id()) << 32) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A crash: killed by SIGSEGV, SIGBUS, SIGABRT, SIGILL or SIGFPE, or the
/// shell's 128+N codes for them (139, 138, 134, 132, 136).
fn crashed(s: &ExitStatus) -> bool {
    let crash = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGABRT,
        libc::SIGILL,
        libc::SIGFPE,
    ];
    s.signal().is_some_and(|n| crash.contains(&n))
        || s.code().is_some_and(|c| crash.iter().any(|n| c == 128 + n))
}

/// A 4-rank host sweep of sizes up to a few MiB writing into `dir` (the
/// host engine: its ranks read each other's buffers directly).
fn sweep(dir: &std::path::Path) -> std::process::Child {
    Command::new(bin())
        .args([
            "all-reduce",
            "--device",
            "host",
            "--sizes",
            "8B:4M",
            "--ranks",
            "4",
            "-q",
            "--iters",
            "600",
        ])
        .arg("--json")
        .arg(dir.join("r.json"))
        .arg("--dump-dir")
        .arg(dir.join("dumps"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("collbench starts")
}

/// Waits until the sweep writing into `dir` has opened its result file,
/// which it does just before the sweep starts.
fn wait_started(dir: &std::path::Path) {
    let start = Instant::now();
    let jsonl = dir.join("r.jsonl");
    while !jsonl.exists() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How long the sweep runs here and now, from its start to its exit: the
/// span the signals are aimed into (a fixed span ended after the sweep on
/// a fast node, so that most runs were no test of an interruption). The
/// test aims into the shorter of two.
fn sweep_span() -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let child = sweep(dir.path());
    wait_started(dir.path());
    let t = Instant::now();
    let out = child.wait_with_output().expect("collbench ends");
    assert!(
        out.status.success(),
        "an uninterrupted sweep: {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    t.elapsed()
}

/// Starts the sweep, waits until it is running plus `delay`, sends `sig`;
/// returns its status and stderr.
fn interrupt(sig: i32, delay: Duration, dir: &std::path::Path) -> (ExitStatus, String) {
    let child = sweep(dir);
    wait_started(dir);
    std::thread::sleep(delay);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
    let out = child.wait_with_output().expect("collbench ends");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn interrupted_sweeps_never_crash() {
    let mut rng = Rng::new();
    let mut interrupted = 0;
    let runs = 12;
    let span = sweep_span().min(sweep_span());
    // Signals from 50 ms in to four fifths of the way through.
    let late = (span.as_millis() as u64 * 4 / 5).max(100);
    println!("an uninterrupted sweep: {span:?}; signals 50..{late} ms in");
    for i in 0..runs {
        let dir = tempfile::tempdir().unwrap();
        let sig = if i % 2 == 0 {
            libc::SIGINT
        } else {
            libc::SIGTERM
        };
        // Early (setup, small sizes) to late (the largest sizes, where ranks
        // read each other's buffers directly).
        let delay = Duration::from_millis(50 + rng.below(late - 50));
        let (status, err) = interrupt(sig, delay, dir.path());
        assert!(
            !crashed(&status),
            "run {i}: signal {sig} after {delay:?} crashed it: {status:?}\n{err}"
        );
        assert!(!err.contains("panicked"), "run {i}: {err}");
        match status.code() {
            // Interrupted: a signal is never reported as a hang.
            Some(130) => interrupted += 1,
            // Finished before the signal came.
            Some(0) => {}
            other => panic!("run {i}: signal {sig} after {delay:?}: exit {other:?}\n{err}"),
        }
    }
    assert!(
        interrupted >= runs / 2,
        "only {interrupted} of {runs} runs were interrupted: the sweep is too short for the delays"
    );
}

/// Runs collbench under `ulimit -v kib`.
fn under_ulimit(kib: u64, args: &str) -> (ExitStatus, String) {
    let script = format!("ulimit -v {kib}; exec '{}' {args}", bin().display());
    let out = Command::new("bash")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("bash runs");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn too_little_memory_is_a_clear_error_not_an_abort() {
    let cases = [
        // 64 ranks of all-to-all: 64 x 63 FIFOs of 4 slots of 256 KiB plus
        // their headers (1,048,896 B each: 3.94 GiB, ranks squared), with
        // little in buffers.
        (
            3_000_000,
            "all-to-all --ranks 64 --sizes 64K:64K",
            "plus 3.94GiB of connections",
            "its connections alone do not fit, whatever the sizes: lower --ranks or --channels",
        ),
        // Buffers alone: 4 ranks x 2 x 512 MiB under 1.5 GB of address space.
        (
            1_500_000,
            "all-reduce --ranks 4 --sizes 512M:512M --placement out",
            "4 ranks x 1GiB of buffers",
            "lower --sizes' maximum or --ranks",
        ),
        // A group holds buffers for each of its operations: --group is
        // named among what to lower.
        (
            1_500_000,
            "all-reduce --ranks 2 --sizes 256M:256M --placement out --group 3",
            "2 ranks x 1.50GiB of buffers",
            "lower --sizes' maximum or --ranks, or --group",
        ),
        // Groups as long as --group-mix names (no --group): --group may
        // not be fewer, so the mix is what to shorten.
        (
            1_500_000,
            "all-reduce --ranks 2 --sizes 256M:256M --placement out --group-mix all-reduce,all-gather,broadcast",
            "of buffers",
            "lower --sizes' maximum or --ranks, or the collectives of --group-mix",
        ),
        // Each distinct collective of a group's mix has connections of
        // its own.
        (
            3_000_000,
            "all-to-all --ranks 40 --sizes 64K:64K --group 2 --group-mix all-to-all,all-gather",
            "of connections",
            "lower --ranks or --channels, or the distinct collectives of --group-mix",
        ),
    ];
    for (kib, args, why, advice) in cases {
        let (status, err) = under_ulimit(kib, args);
        assert!(!crashed(&status), "{args}: {status:?}\n{err}");
        assert_eq!(status.code(), Some(2), "{args}: {err}");
        assert!(err.contains("not enough memory"), "{args}: {err}");
        assert!(err.contains("RLIMIT_AS"), "{args}: {err}");
        assert!(err.contains(why), "{args}: expected '{why}' in: {err}");
        // What may be used, said as such (90% of what is free).
        assert!(
            err.contains("but may use ") && err.contains("(90% of the "),
            "{args}: {err}"
        );
        assert!(
            err.contains(advice),
            "{args}: expected '{advice}' in: {err}"
        );
        assert!(!err.contains("panicked"), "{args}: {err}");
    }
}
