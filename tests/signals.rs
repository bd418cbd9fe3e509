//! Signals and unfinished runs, end to end: SIGINT, SIGTERM and SIGHUP at random
//! moments on a node kept busy by CPU hogs always exit 130 with every
//! finished row in the JSON and `meta.partial` set; SIGTERM ends the run
//! within a second; every SIGUSR1 snapshot goes to new files, named on
//! stderr; a hang or a refusal never ends stdout with a passing verdict.
//!
//! `COLLBENCH_SOAK_RUNS=N` sets the number of interrupted runs (default 20;
//! `scripts/soak.sh N` runs N and prints the tally).

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The tests here time things and load the machine: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("collbench")
}

/// Two busy loops (the node of the issue: two CPU hogs), killed on drop.
struct Hogs(Vec<Child>);

impl Hogs {
    fn start() -> Hogs {
        Hogs(
            (0..2)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .expect("sh runs")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn kill(child: &Child, sig: i32) {
    // SAFETY: signalling our own child, which has not been waited for.
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// Waits until `path` has at least `lines` lines (the JSONL's head: the
/// sweep has started), or `limit` passed.
fn wait_lines(path: &Path, lines: usize, limit: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if std::fs::read_to_string(path).is_ok_and(|s| s.lines().count() >= lines) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// A tiny xorshift: random moments without a crate; the seed is printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The rows of the JSONL beside a results file (its first line is the head).
fn jsonl_rows(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("end").is_none())
        .collect()
}

/// Every documented key of `meta`, present even when empty.
fn assert_meta_keys(meta: &Value) {
    for key in [
        "version",
        "command",
        "host",
        "started_at",
        "world_size",
        "device",
        "devices",
        "iters",
        "warmup",
        "seed",
        "timing",
        "pid",
        "notes",
    ] {
        assert!(meta.get(key).is_some(), "meta.{key} missing: {meta}");
    }
}

/// The dumps in `dir` (not the temporary files).
fn dumps_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "json"));
    v.sort();
    v
}

/// How one interrupted run went.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum Tally {
    /// Exit 130, the JSON holds every finished row, partial says signal.
    Interrupted,
    /// The signal came after the sweep's end (exit 0): not a failure, not counted.
    FinishedFirst,
    /// Killed by a signal (139 segfault, 134 abort, or the signal's default).
    Crashed,
    /// Any other exit code, or results that do not hold.
    Wrong,
}

/// The sweep the interrupted runs start: `ranks` host ranks, 8B:4M,
/// results and dumps into `dir`.
fn sweep(dir: &Path, ranks: usize) -> Child {
    Command::new(bin())
        .args([
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            &ranks.to_string(),
        ])
        .args(["--sizes", "8B:4M", "--iters", "20", "--warmup", "2", "-q"])
        .args(["--json", dir.join("r.json").to_str().unwrap()])
        .args(["--dump-dir", dir.join("d").to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// How long the sweep of `ranks` ranks runs, here and now, from its first
/// JSONL line to its exit: the span the signals are aimed into (a fixed
/// span would land after the end on a fast node and be no test there).
fn sweep_span(ranks: usize) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let child = sweep(dir.path(), ranks);
    assert!(
        wait_lines(&dir.path().join("r.jsonl"), 1, Duration::from_secs(30)),
        "the sweep of {ranks} ranks never wrote its JSONL head"
    );
    let t = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "an uninterrupted sweep of {ranks} ranks: {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    t.elapsed()
}

/// One run of a sweep interrupted by `sig` `delay` after it started.
fn interrupted_run(dir: &Path, ranks: usize, sig: i32, delay: Duration) -> (Tally, String) {
    let json = dir.join("r.json");
    let dumps = dir.join("d");
    let child = sweep(dir, ranks);
    let started = wait_lines(&dir.join("r.jsonl"), 1, Duration::from_secs(30));
    std::thread::sleep(delay);
    kill(&child, sig);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let why = |what: &str| format!("{what} (sig {sig}, {delay:?}, started {started}): {err}");
    let code = match out.status.code() {
        Some(c) => c,
        None => return (Tally::Crashed, why(&format!("{:?}", out.status))),
    };
    if matches!(code, 134 | 139) {
        return (Tally::Crashed, why(&format!("exit {code}")));
    }
    if code == 0 {
        return (Tally::FinishedFirst, String::new());
    }
    if code != 130 {
        return (Tally::Wrong, why(&format!("exit {code}")));
    }
    let v: Value = match std::fs::read(&json)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => return (Tally::Wrong, why(&format!("r.json: {e}"))),
    };
    let rows = v["rows"].as_array().cloned().unwrap_or_default();
    let partial = &v["meta"]["partial"];
    // 4M over 8B..4M by x2: 20 sizes, two placements each.
    let checks = [
        (
            rows == jsonl_rows(&dir.join("r.jsonl")),
            "JSON rows == JSONL rows",
        ),
        (partial["reason"] == "signal", "partial.reason == signal"),
        (
            partial["missing_rows"].as_u64() == Some(40 - rows.len() as u64),
            "missing_rows == 40 - rows",
        ),
        (
            dumps_in(&dumps).len() == ranks
                && dumps_in(&dumps).iter().all(|p| {
                    let d: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
                    d["reason"] == "signal" && d["run_id"].is_string()
                }),
            "one dump per rank, each saying signal",
        ),
    ];
    for (ok, what) in checks {
        if !ok {
            return (Tally::Wrong, why(&format!("{what} fails in {v}")));
        }
    }
    assert_meta_keys(&v["meta"]);
    (Tally::Interrupted, String::new())
}

#[test]
fn interrupted_runs_on_a_busy_node_always_exit_130_with_their_rows() {
    let _one = serial();
    let runs: usize = std::env::var("COLLBENCH_SOAK_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    println!("seed {seed}");
    let mut rng = Rng(seed);
    let _hogs = Hogs::start();
    // Each run's signal lands within the first half of the span an
    // uninterrupted sweep of 2 ranks (the fewest, the quickest; the shorter
    // of two) takes under the same hogs, and within 1.2 s.
    let span = sweep_span(2).min(sweep_span(2));
    let aim = (span / 2).min(Duration::from_millis(1200));
    println!("an uninterrupted sweep of 2 ranks: {span:?}; signals within {aim:?}");
    let mut tally = std::collections::BTreeMap::<Tally, usize>::new();
    let mut failures = Vec::new();
    let t = Instant::now();
    for i in 0..runs {
        let dir = tempfile::tempdir().unwrap();
        // SIGHUP: the terminal or ssh session went away.
        let sig = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP][i % 3];
        let ranks = 2 + rng.below(3) as usize;
        let delay = Duration::from_micros(rng.below((aim.as_micros() as u64).max(1)));
        let (how, detail) = interrupted_run(dir.path(), ranks, sig, delay);
        *tally.entry(how).or_default() += 1;
        if matches!(how, Tally::Crashed | Tally::Wrong) {
            eprintln!("run {i}: {how:?}: {detail}");
            failures.push(format!("run {i}: {how:?}: {detail}"));
        }
    }
    println!("tally after {runs} runs in {:?}: {tally:?}", t.elapsed());
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        tally.get(&Tally::Interrupted).copied().unwrap_or(0) * 4 >= runs * 3,
        "most runs were interrupted mid-sweep: {tally:?}"
    );
}

/// Under `nohup` SIGHUP is ignored, and stays so: the run goes on to its
/// end (without it, SIGHUP stops it as SIGTERM does, tested above).
#[test]
fn sighup_under_nohup_does_not_stop_the_run() {
    let _one = serial();
    if !Command::new("nohup")
        .arg("true")
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("SKIPPED: nohup is not available here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mut child = Command::new("nohup")
        .arg(bin())
        .args(["all-reduce", "--device", "host", "--ranks", "2"])
        .args(["--sizes", "8B:1M", "--iters", "20", "--warmup", "2", "-q"])
        // Rank 0 waits 1.5 s in the second row: the signal lands in the run.
        .args(["--inject", "delay:rank=0,seq=30,ms=1500"])
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_lines(
        &dir.path().join("r.jsonl"),
        2,
        Duration::from_secs(30)
    ));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended before the signal"
    );
    kill(&child, libc::SIGHUP);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v["meta"]["partial"].is_null(), "{}", v["meta"]);
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(36));
}

#[test]
fn sigterm_ends_a_run_of_large_buffers_within_a_second() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    // Large buffers: ranks spend long stretches in element loops and checks
    // that do not look at the stop flag; the run must not wait for them.
    // 100 iterations: the sweep runs for many seconds after its first row
    // even on a node several times faster (5 took 1.3 s in all on 2 cores),
    // so the signal lands in it; the signal ends it, so they cost nothing.
    let child = Command::new(bin())
        .args(["all-reduce", "--device", "host", "--ranks", "4"])
        .args(["--sizes", "1M:32M", "--iters", "100", "-q"])
        .args(["--json", json.to_str().unwrap()])
        .args(["--dump-dir", dir.path().join("d").to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_lines(
        &dir.path().join("r.jsonl"),
        2,
        Duration::from_secs(60)
    ));
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    kill(&child, libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        took < Duration::from_secs(1),
        "SIGTERM took {took:?}: {err}"
    );
    assert!(err.contains("interrupted by SIGTERM"), "{err}");
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["meta"]["partial"]["reason"], "signal");
    assert!(!v["rows"].as_array().unwrap().is_empty());
    assert_eq!(
        v["rows"].as_array().unwrap(),
        &jsonl_rows(&dir.path().join("r.jsonl"))
    );
}

/// Reads `stderr` on a thread, line by line, into a shared list.
fn lines_of(stderr: std::process::ChildStderr) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l2 = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            l2.lock().unwrap().push(line);
        }
    });
    lines
}

/// The paths stderr has named as snapshots so far.
fn snapshot_paths(lines: &Mutex<Vec<String>>) -> Vec<PathBuf> {
    lines
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| l.strip_prefix("collbench: flight-recorder snapshot written: "))
        .map(PathBuf::from)
        .collect()
}

fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn every_sigusr1_goes_to_new_files_and_says_where() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("d");
    let mut child = Command::new(bin())
        .args(["all-reduce", "--device", "host", "--ranks", "2"])
        .args(["--sizes", "8B:64B", "--iters", "300000", "--no-check", "-q"])
        .args(["--json", dir.path().join("r.json").to_str().unwrap()])
        .args(["--dump-dir", dumps.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stderr.take().unwrap());
    assert!(wait_lines(
        &dir.path().join("r.jsonl"),
        1,
        Duration::from_secs(60)
    ));
    for k in 1..=2 {
        kill(&child, libc::SIGUSR1);
        assert!(
            wait_for(Duration::from_secs(20), || snapshot_paths(&lines).len()
                == 2 * k),
            "snapshot {k} named: {:?}",
            lines.lock().unwrap()
        );
    }
    kill(&child, libc::SIGINT);
    let status: ExitStatus = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let named = snapshot_paths(&lines);
    let on_disk = dumps_in(&dumps);
    for p in &named {
        assert!(
            on_disk.contains(p),
            "{} named and written: {on_disk:?}",
            p.display()
        );
        let d: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
        assert_eq!(d["reason"], "request");
    }
    let id = on_disk
        .iter()
        .find_map(|p| p.file_name()?.to_str()?.strip_suffix("-rank0.json"))
        .expect("the end-of-run dump of rank 0")
        .to_string();
    let mut names: Vec<String> = named
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            format!("{id}-rank0-request1.json"),
            format!("{id}-rank0-request2.json"),
            format!("{id}-rank1-request1.json"),
            format!("{id}-rank1-request2.json"),
        ]
    );
    assert_eq!(
        on_disk.len(),
        6,
        "four snapshots and two final dumps: {on_disk:?}"
    );
}

/// Runs collbench to the end; (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Lines a log parser would read as a pass.
fn passing_verdict(stdout: &str) -> Option<&str> {
    stdout.lines().find(|l| {
        l.contains("values : OK")
            || l.contains("values:** OK")
            || (l.contains("Out of bounds values") && l.contains(" OK"))
            || l.contains("test concluded")
    })
}

#[test]
fn a_hang_writes_partial_results_and_no_passing_verdict() {
    let _one = serial();
    for format in ["table", "nccl-tests"] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let (code, out, err) = run(&[
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "8B:1K",
            "--inject",
            "hang:rank=1,seq=100",
            "--timeout",
            "2s",
            "--format",
            format,
            "--json",
            json.to_str().unwrap(),
            "--dump-dir",
            dir.path().join("d").to_str().unwrap(),
        ]);
        assert_eq!(code, 3, "{err}");
        assert_eq!(passing_verdict(&out), None, "{format}:\n{out}");
        assert!(
            out.contains("FAILED (run interrupted: hang"),
            "{format}:\n{out}"
        );
        let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let rows = v["rows"].as_array().unwrap().len();
        assert!(rows > 0, "rows before the hang are kept");
        assert_eq!(v["meta"]["partial"]["reason"], "hang");
        // 8B..1K by x2: 8 sizes, two placements each.
        assert_eq!(v["meta"]["partial"]["missing_rows"], 16 - rows);
        assert_meta_keys(&v["meta"]);
    }
}

#[test]
fn a_refused_run_prints_no_passing_verdict() {
    let _one = serial();
    for format in ["table", "nccl-tests", "markdown"] {
        let (code, out, err) = run(&[
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "512G",
            "--format",
            format,
        ]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("not enough memory"), "{err}");
        assert_eq!(passing_verdict(&out), None, "{format}:\n{out}");
    }
}

/// `collbench ... | head` (and `2>&1 | head`): the reader goes away
/// early; the sweep stops as for a signal (exit 130, every finished row in
/// the JSON, `meta.partial`, but no dumps), where SIGPIPE used to kill it
/// before the JSON was written, and a closed stderr is no panic.
#[test]
fn a_closed_stdout_stops_the_sweep_with_its_rows_kept() {
    let _one = serial();
    for both in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let err = dir.path().join("err.txt");
        // Sizes up to 64M: seconds of sweep after the first row has been
        // read (the reader leaves at it, as `head` would after a few lines:
        // a first row, so one row at least is in the results).
        let script = format!(
            "'{}' all-reduce --device host --ranks 2 --sizes 8B:64M --iters 20 --json '{}' --dump-dir '{}' {} | grep -m1 -E '^ +[0-9]' > /dev/null; echo ${{PIPESTATUS[0]}}",
            bin().display(),
            json.display(),
            dir.path().join("d").display(),
            if both {
                "2>&1".to_string()
            } else {
                format!("2> '{}'", err.display())
            }
        );
        let out = Command::new("bash").args(["-c", &script]).output().unwrap();
        let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let said = std::fs::read_to_string(&err).unwrap_or_default();
        assert_eq!(code, "130", "2>&1: {both}: {said}");
        let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(v["meta"]["partial"]["reason"], "signal", "{}", v["meta"]);
        let rows = v["rows"].as_array().unwrap();
        assert!(!rows.is_empty() && rows.len() < 48, "{} rows", rows.len());
        assert_eq!(rows, &jsonl_rows(&dir.path().join("r.jsonl")));
        // A reader that went away leaves nothing to diagnose: no dumps.
        assert!(!dir.path().join("d").exists(), "dumps written");
        if !both {
            assert!(
                said.contains("interrupted by SIGPIPE (stdout was closed)"),
                "{said}"
            );
            assert!(!said.contains("panicked"), "{said}");
        }
    }
    // The CSV on stdout (`--csv - | head -1`): the same stop, where it was
    // exit 2, `writing results: Broken pipe`.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let script = format!(
        "'{}' all-reduce --device host --ranks 2 --sizes 8B:64M --iters 20 -q --csv - --json '{}' | head -1 > /dev/null; echo ${{PIPESTATUS[0]}}",
        bin().display(),
        json.display(),
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "130", "{said}");
    assert!(
        said.contains("interrupted by SIGPIPE (stdout was closed)"),
        "{said}"
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["meta"]["partial"]["reason"], "signal", "{}", v["meta"]);
}

#[test]
fn a_finished_run_has_no_partial_and_every_meta_key() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let (code, _, err) = run(&[
        "all-reduce",
        "--device",
        "host",
        "--ranks",
        "2",
        "--sizes",
        "8B:64B",
        "-q",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v["meta"].get("partial").is_none(), "{}", v["meta"]);
    assert_meta_keys(&v["meta"]);
}

/// `qualify` stopped by a signal in its first check exits 130 at once:
/// the second check is not begun, and the JUnit holds the one that ran.
#[test]
fn an_interrupted_qualify_exits_130_without_its_later_checks() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.toml");
    let check = |name: &str| {
        format!(
            "[[check]]\nname = \"{name}\"\ncollective = \"all-reduce\"\ndevice = \"host\"\nranks = 2\nsizes = \"1M:64M\"\niters = 200\nmin_busbw_gbps = 0.001\n\n"
        )
    };
    std::fs::write(&spec, check("first") + &check("second")).unwrap();
    let junit = dir.path().join("j.xml");
    let mut child = Command::new(bin())
        .current_dir(dir.path())
        .args([
            "qualify",
            spec.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stderr.take().unwrap());
    let started = wait_for(Duration::from_secs(60), || {
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("check 1/2"))
    });
    assert!(started, "{:?}", lines.lock().unwrap());
    std::thread::sleep(Duration::from_millis(500));
    kill(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    // The reader thread has the rest of stderr once the pipe closes.
    wait_for(Duration::from_secs(5), || {
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("interrupted by SIGTERM in check 1 of 2"))
    });
    let said = lines.lock().unwrap().join("\n");
    assert_eq!(status.code(), Some(130), "{said}");
    assert!(!said.contains("check 2/2"), "{said}");
    assert!(
        said.contains("interrupted by SIGTERM in check 1 of 2"),
        "{said}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), 1, "{xml}");
}
