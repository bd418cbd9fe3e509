//! The `mpi` engine (`engine::exec::mpi_coll`) against `check`: every
//! collective × type × operator × placement × root run through MPI's own
//! collectives and verified bit for bit, under `mpirun -np 1..=4` (and once
//! with in-place staging forced); then the timeout and abort paths, with
//! late peers.
//!
//! A plain `cargo test --features mpi` has no MPI world, so the launcher
//! tests re-run this very binary under `mpirun`, selecting one `worker_*`
//! test and marking the environment with `COLLBENCH_MPI_WORKER`; the workers
//! do nothing without that mark. Without `mpirun` the launchers say SKIPPED,
//! or fail when `COLLBENCH_REQUIRE_MPI=1`.
#![cfg(feature = "mpi")]

use collbench::check::{fill_input, poison, verify, Rule};
use collbench::engine::algo::{Layout, Slice};
use collbench::engine::exec::mpi_coll::{native_in_place, run_op, unsupported};
use collbench::engine::exec::{ExecError, HostBuf, OpDesc};
use collbench::engine::{Collective, Counts, Dtype, Placement, ReduceOp};
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set by the launcher on the processes it starts under mpirun.
const WORKER_ENV: &str = "COLLBENCH_MPI_WORKER";
/// The line a worker's rank 0 prints when every rank passed.
const PASSED: &str = "mpi_engine worker passed";
/// How long one mpirun may run before it is stopped.
const RUN_LIMIT: Duration = Duration::from_secs(300);

#[test]
fn mpi_engine_matches_checks_on_1_to_4_ranks() {
    let Some(mpirun) = Launcher::find() else {
        return;
    };
    for np in 1..=4 {
        mpirun.run(np, "worker_checks", &[]);
    }
    mpirun.run(3, "worker_checks", &[("COLLBENCH_MPI_IN_PLACE", "stage")]);
    // Open MPI without its saturating op/avx component: nothing is refused.
    if mpirun.open_mpi {
        let out = mpirun.run(4, "worker_checks", &[("OMPI_MCA_op", "^avx")]);
        assert!(out.contains("refused=0"), "{out}");
    }
}

#[test]
fn mpi_engine_times_out_and_aborts_with_late_peers() {
    let Some(mpirun) = Launcher::find() else {
        return;
    };
    mpirun.run(2, "worker_timeout", &[]);
    mpirun.run(3, "worker_timeout", &[]);
}

#[test]
fn unsupported_refuses_only_reductions_of_types_mpi_lacks() {
    for coll in Collective::ALL {
        for dtype in Dtype::ALL {
            for op in ReduceOp::ALL {
                let lacks = matches!(
                    dtype,
                    Dtype::F16 | Dtype::Bf16 | Dtype::F8E4M3 | Dtype::F8E5M2
                );
                let premul = op == ReduceOp::PreMulSum;
                let why = unsupported(coll, dtype, op);
                assert_eq!(
                    why.is_some(),
                    coll.reduces() && (lacks || premul),
                    "{coll} {dtype} {op}"
                );
                if let Some(why) = why {
                    let names = if premul { "premulsum" } else { dtype.name() };
                    assert!(why.contains(names), "{why}");
                }
            }
        }
    }
}

/// Runs the whole matrix on every rank, then agrees on the failure count.
#[test]
fn worker_checks() {
    let Some(universe) = worker() else {
        return;
    };
    let world = universe.world();
    let (cases, refused, failures) = check_matrix(&world);
    for f in failures.iter().take(8) {
        eprintln!("rank {}: {f}", world.rank());
    }
    let mut total = 0u64;
    world.all_reduce_into(&(failures.len() as u64), &mut total, SystemOperation::sum());
    if world.rank() == 0 {
        let mode = if native_in_place() {
            "MPI_IN_PLACE"
        } else {
            "staged"
        };
        println!(
            "np={} in-place={mode} cases={cases} per rank, failures={} refused={}",
            world.size(),
            total,
            refused.len()
        );
        for why in &refused {
            println!("  refused: {why}");
        }
        if total == 0 {
            println!("{PASSED}");
        }
    }
    assert_eq!(total, 0, "some ranks found wrong results");
}

/// Rank 0 starts two collectives that the other ranks join only late (when
/// rank 0 tells them to): the first must time out, the second be aborted;
/// both then complete in MPI as the late ranks arrive, and the late ranks'
/// results (made with rank 0's leaked buffers) must verify.
#[test]
fn worker_timeout() {
    let Some(universe) = worker() else {
        return;
    };
    let world = universe.world();
    let rank = world.rank() as usize;
    let mut problems = Vec::new();
    let mut all_reduce = Case::new(&world, Collective::AllReduce, Dtype::F32, ReduceOp::Sum);
    let mut all_gather = Case::new(&world, Collective::AllGather, Dtype::I32, ReduceOp::Sum);
    if rank == 0 {
        early_rank(&world, &mut all_reduce, &mut all_gather, &mut problems);
        // Now the others may join the operations rank 0 gave up on.
        for peer in 1..world.size() {
            world.process_at_rank(peer).send(&1u8);
        }
    } else {
        let (_go, _) = world.process_at_rank(0).receive::<u8>();
        for case in [&mut all_reduce, &mut all_gather] {
            match case.run(&world, Duration::from_secs(60), &|| false) {
                Ok(()) => problems.extend(case.verify(rank).err()),
                Err(e) => problems.push(format!("late {}: {e}", case.coll)),
            }
        }
    }
    // Progresses rank 0's abandoned operations, so the late ranks finish too.
    world.barrier();
    for p in &problems {
        eprintln!("rank {rank}: {p}");
    }
    let mut total = 0u64;
    world.all_reduce_into(&(problems.len() as u64), &mut total, SystemOperation::sum());
    if rank == 0 && total == 0 {
        println!("{PASSED}");
    }
    assert!(problems.is_empty(), "{problems:?}");
}

fn early_rank(
    world: &SimpleCommunicator,
    all_reduce: &mut Case,
    all_gather: &mut Case,
    problems: &mut Vec<String>,
) {
    let timeout = Duration::from_millis(500);
    let old = all_reduce.bufs[0].as_ptr();
    let t0 = Instant::now();
    match all_reduce.run(world, timeout, &|| false) {
        Err(ExecError::CollectiveTimeout {
            rank: 0,
            collective: "all-reduce",
            call: "MPI_Iallreduce",
            waited,
        }) if waited >= timeout && t0.elapsed() < timeout * 10 => {}
        other => problems.push(format!(
            "all-reduce: expected a timeout after {timeout:?}, got {other:?} after {:?}",
            t0.elapsed()
        )),
    }
    if all_reduce.bufs[0].as_ptr() == old {
        problems.push("the timed-out operation's buffers were not replaced".into());
    }
    if all_reduce.bufs[0].len() != all_reduce.layout.buf0 * 4 {
        problems.push("the replacement buffer has another size".into());
    }
    let t1 = Instant::now();
    let abort = || t1.elapsed() >= Duration::from_millis(300);
    match all_gather.run(world, Duration::from_secs(60), &abort) {
        Err(ExecError::Aborted) if t1.elapsed() < Duration::from_secs(5) => {}
        other => problems.push(format!(
            "all-gather: expected an abort after 300ms, got {other:?} after {:?}",
            t1.elapsed()
        )),
    }
}

/// Every supported case on this rank: (cases run, distinct reasons for
/// refusing types MPI has, failure descriptions).
fn check_matrix(world: &SimpleCommunicator) -> (u64, Vec<String>, Vec<String>) {
    let n = world.size() as usize;
    let rank = world.rank() as usize;
    let (mut cases, mut refused, mut failures) = (0u64, Vec::new(), Vec::new());
    for coll in Collective::ALL {
        let ops: &[ReduceOp] = if coll.reduces() {
            &ReduceOp::ALL
        } else {
            &[ReduceOp::Sum]
        };
        for dtype in Dtype::ALL {
            for &op in ops {
                if let Some(why) = unsupported(coll, dtype, op) {
                    // What MPI has no word for is not a refusal of this library.
                    let lacks =
                        why.contains("no half, bfloat16 or fp8") || why.contains("premulsum");
                    if !lacks && !refused.contains(&why) {
                        refused.push(why);
                    }
                    continue;
                }
                for placement in [Placement::OutOfPlace, Placement::InPlace] {
                    let roots = if coll.rooted() { n } else { 1 };
                    for root in 0..roots {
                        for per_rank in [1, 1037] {
                            let bytes = (per_rank * n * dtype.size()) as u64;
                            let mut case = Case::sized(coll, dtype, op, placement, n, rank, bytes);
                            case.root = root;
                            cases += 1;
                            let run = case.run(world, Duration::from_secs(60), &|| false);
                            let result = run.map_err(|e| e.to_string());
                            if let Err(e) = result.and_then(|()| case.verify(rank)) {
                                failures.push(format!("{} {per_rank}/rank: {e}", case.name()));
                            }
                        }
                    }
                }
            }
        }
    }
    (cases, refused, failures)
}

/// One case with this rank's buffers, inputs written and outputs poisoned.
struct Case {
    coll: Collective,
    dtype: Dtype,
    op: ReduceOp,
    placement: Placement,
    root: usize,
    counts: Counts,
    layout: Layout,
    rule: Rule,
    bufs: [HostBuf; 3],
}

impl Case {
    /// A small out-of-place case on `world`.
    fn new(world: &SimpleCommunicator, coll: Collective, dtype: Dtype, op: ReduceOp) -> Case {
        let n = world.size() as usize;
        let bytes = (64 * n * dtype.size()) as u64;
        Case::sized(
            coll,
            dtype,
            op,
            Placement::OutOfPlace,
            n,
            world.rank() as usize,
            bytes,
        )
    }

    fn sized(
        coll: Collective,
        dtype: Dtype,
        op: ReduceOp,
        placement: Placement,
        n: usize,
        rank: usize,
        bytes: u64,
    ) -> Case {
        let es = dtype.size();
        let counts = coll.counts(bytes, es, n);
        let layout = Layout::new(coll, counts, placement, rank);
        let alloc = |elems: usize| HostBuf::new(elems * es).expect("test buffers fit in memory");
        let rule = Rule {
            seed: 0xC0_11BE,
            dtype,
            op,
            nranks: n,
            scalar: 0,
        };
        let mut bufs = [alloc(layout.buf0), alloc(layout.buf1), alloc(0)];
        for b in bufs.iter_mut().take(2) {
            poison(dtype, b.as_mut_slice());
        }
        let (b, off) = layout.resolve(Slice::send(0));
        fill_input(
            &rule,
            rank,
            &mut bufs[b].as_mut_slice()[off * es..][..counts.send * es],
        );
        Case {
            coll,
            dtype,
            op,
            placement,
            root: 0,
            counts,
            layout,
            rule,
            bufs,
        }
    }

    fn name(&self) -> String {
        format!(
            "{} {} {} {}-of-place root {}",
            self.coll,
            self.dtype,
            self.op,
            self.placement.name(),
            self.root
        )
    }

    fn run(
        &mut self,
        world: &SimpleCommunicator,
        timeout: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<(), ExecError> {
        let desc = OpDesc {
            coll: self.coll,
            dtype: self.dtype,
            op: self.op,
            scalar: 0,
            counts: self.counts,
            root: self.root,
            nranks: world.size() as usize,
            layout: self.layout,
        };
        run_op(world, &desc, &mut self.bufs, timeout, abort)
    }

    fn verify(&self, rank: usize) -> Result<(), String> {
        let es = self.dtype.size();
        let (b, off) = self.layout.resolve(Slice::recv(0));
        let recv = &self.bufs[b].as_slice()[off * es..][..self.counts.recv * es];
        let v = verify(&self.rule, self.coll, self.counts, self.root, rank, recv);
        match v.first {
            None if v.ok() => Ok(()),
            first => Err(format!("{} wrong of {}: {first:?}", v.wrong, v.checked)),
        }
    }
}

/// MPI, when this process is a worker the launcher started.
fn worker() -> Option<mpi::environment::Universe> {
    std::env::var_os(WORKER_ENV)?;
    Some(mpi::initialize().expect("MPI initialises once per worker"))
}

/// How to start this test binary under mpirun.
struct Launcher {
    open_mpi: bool,
}

impl Launcher {
    /// The launcher, or None (after saying SKIPPED) without mpirun; inside
    /// a worker, None quietly.
    fn find() -> Option<Launcher> {
        if std::env::var_os(WORKER_ENV).is_some() {
            return None;
        }
        let version = Command::new("mpirun").arg("--version").output();
        match version {
            Ok(out) if out.status.success() => Some(Launcher {
                open_mpi: String::from_utf8_lossy(&out.stdout).contains("Open MPI"),
            }),
            _ if std::env::var("COLLBENCH_REQUIRE_MPI").is_ok_and(|v| v == "1") => {
                panic!("mpirun not found, and COLLBENCH_REQUIRE_MPI=1 requires it")
            }
            _ => {
                // Straight to stderr, past the test harness's capture.
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: mpirun not found (set COLLBENCH_REQUIRE_MPI=1 to fail instead)"
                );
                None
            }
        }
    }

    /// Runs `test` of this binary on `np` ranks; fails unless it passed.
    /// Returns what the ranks printed.
    fn run(&self, np: usize, test: &str, env: &[(&str, &str)]) -> String {
        let exe = std::env::current_exe().expect("the test binary knows its path");
        let log = tempfile::NamedTempFile::new().expect("a temporary file");
        let mut cmd = Command::new("mpirun");
        if self.open_mpi {
            cmd.args(["--allow-run-as-root", "--oversubscribe"]);
        }
        cmd.args(["-np", &np.to_string()])
            .arg(&exe)
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(WORKER_ENV, "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.reopen().expect("log file"))
            .stderr(log.reopen().expect("log file"));
        let what = format!("mpirun -np {np} {} {test} {env:?}", exe.display());
        let mut child = cmd.spawn().expect("mpirun starts");
        let t0 = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("mpirun can be waited for") {
                break Some(status);
            }
            if t0.elapsed() > RUN_LIMIT {
                stop(&mut child);
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let out = std::fs::read_to_string(log.path()).unwrap_or_default();
        eprintln!("{what} ({:?}):\n{out}", t0.elapsed());
        match status {
            Some(s) if s.success() && out.contains(PASSED) => out,
            Some(s) => panic!("{what} failed ({s}):\n{out}"),
            None => panic!("{what} ran past {RUN_LIMIT:?} and was stopped:\n{out}"),
        }
    }
}

/// Stops mpirun: SIGTERM (which it forwards to its ranks), then SIGKILL.
fn stop(child: &mut std::process::Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: signalling a child process this test started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        std::thread::sleep(Duration::from_secs(3));
    }
    let _ = child.kill();
    let _ = child.wait();
}
