//! kernels/data.cu under host emulation: for every dtype the kernel sources,
//! the emulated device's runtime (kernels/emu.cpp) and
//! tests/emu/data_driver.cpp are compiled by the host C++ compiler, the
//! kernels run in blocks of one thread and of many, and the test checks that `cb_fill` writes what
//! `check::fill_input` writes, `cb_poison` what `check::poison` writes, and
//! that `cb_verify`'s counters, turned into a verdict by
//! `DeviceGen::verdict_from`, equal `check::verify`'s verdict on correct and
//! corrupted receive buffers of every collective.
//!
//! Without a C++ compiler (`c++`) the test says so and passes, unless
//! `COLLBENCH_REQUIRE_CXX=1`.

use collbench::check::device::{CbExpect, CbGen, CbVerdict, DeviceGen, EXPECT_INPUT};
use collbench::check::{fill_input, poison, verify, Rule, Verdict};
use collbench::engine::{elem, Collective, Counts, Dtype, ReduceOp};
use std::path::Path;
use std::process::Command;

mod emu;

/// Elements per block of the collectives' buffers.
const BLOCK: usize = 53;
/// Elements filled per rank.
const FILL: usize = 2003;
/// An element index past 2^32.
const FAR: u64 = (1 << 32) + 12_345;

#[test]
fn data_kernels_match_the_host_under_emulation() {
    let Some(cxx) = emu::compiler("kernels_emu_data") else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = Dtype::ALL
            .into_iter()
            .map(|dt| {
                let (cxx, dir) = (cxx.as_str(), dir.path());
                s.spawn(move || check_dtype(cxx, dir, dt).err())
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| {
                h.join()
                    .unwrap_or_else(|_| Some("a thread panicked".into()))
            })
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Blocks of a launch, and threads of each (1, or whole groups of 8).
type Grid = (u64, u64);

/// A request to the driver, and what each of its answers must be.
#[derive(Default)]
struct Request {
    words: Vec<u8>,
    checks: Vec<Check>,
}

enum Check {
    /// Elements, bit for bit.
    Bytes { what: String, want: Vec<u8> },
    /// `cb_verify`'s counters: the verdict they make must be `want`.
    Verdict {
        what: String,
        gen: usize,
        expect: CbExpect,
        count: u64,
        rank: usize,
        recv: Vec<u8>,
        want: Verdict,
    },
}

impl Request {
    fn word(&mut self, w: u64) {
        self.words.extend_from_slice(&w.to_le_bytes());
    }

    fn gen(&mut self, g: &CbGen, words: &[u64]) {
        self.word(1);
        for w in [g.words, g.salt, g.kmax, g.mid, g.nranks] {
            self.word(w);
        }
        let (lo_exp, mul_exp) = (g.lo_exp as u32, g.mul_exp as u32);
        for w in [
            g.scheme, g.op, g.flips, lo_exp, g.exps, g.ulps, g.dtype, mul_exp,
        ] {
            self.words.extend_from_slice(&w.to_le_bytes());
        }
        self.word(g.mul);
        self.word(words.len() as u64);
        words.iter().for_each(|&w| self.word(w));
    }

    fn fill(&mut self, rank: usize, first: u64, count: usize, grid: Grid, check: Check) {
        for w in [2, rank as u64, first, count as u64, grid.0, grid.1] {
            self.word(w);
        }
        self.checks.push(check);
    }

    fn poison(&mut self, count: usize, grid: Grid, check: Check) {
        for w in [3, count as u64, grid.0, grid.1] {
            self.word(w);
        }
        self.checks.push(check);
    }

    fn verify(&mut self, e: &CbExpect, recv: &[u8], count: u64, grid: Grid, check: Check) {
        for w in [4, e.kind, e.rank, e.src, e.block, count, grid.0, grid.1] {
            self.word(w);
        }
        self.words.extend_from_slice(recv);
        let pad = (8 - recv.len() % 8) % 8;
        self.words.extend(std::iter::repeat_n(0u8, pad));
        self.checks.push(check);
    }
}

fn bits_at(dt: Dtype, buf: &[u8], k: usize) -> u64 {
    let s = dt.size();
    let mut raw = [0u8; 8];
    raw[..s].copy_from_slice(&buf[k * s..(k + 1) * s]);
    u64::from_le_bytes(raw)
}

fn set(dt: Dtype, buf: &mut [u8], k: usize, bits: u64) {
    let s = dt.size();
    buf[k * s..(k + 1) * s].copy_from_slice(&bits.to_le_bytes()[..s]);
}

/// One case's inputs, every rank's.
struct Case {
    rule: Rule,
    coll: Collective,
    counts: Counts,
    root: usize,
    inputs: Vec<Vec<u8>>,
}

impl Case {
    fn new(rule: Rule, coll: Collective, root: usize) -> Case {
        let (n, s) = (rule.nranks, rule.dtype.size());
        let counts = coll.counts((BLOCK * n * s) as u64, s, n);
        let inputs = (0..n)
            .map(|q| {
                let mut buf = vec![0u8; counts.send * s];
                fill_input(&rule, q, &mut buf);
                buf
            })
            .collect();
        Case {
            rule,
            coll,
            counts,
            root,
            inputs,
        }
    }

    /// OP over every rank's elements `from..from + len`, then its finish.
    fn reduce(&self, from: usize, len: usize) -> Vec<u8> {
        let (dt, op, s) = (self.rule.dtype, self.rule.op, self.rule.dtype.size());
        // Premulsum: every input scaled once, then summed.
        let scaled: Vec<Vec<u8>> = self
            .inputs
            .iter()
            .map(|b| {
                let mut c = b[from * s..(from + len) * s].to_vec();
                if op == ReduceOp::PreMulSum {
                    let p = c.as_mut_ptr();
                    // SAFETY: `c` holds `len` elements; dst is the input.
                    unsafe { elem::reduce_premul(dt, self.rule.scalar, p, &[p as *const u8], len) };
                }
                c
            })
            .collect();
        let ptrs: Vec<*const u8> = scaled.iter().map(|b| b.as_ptr()).collect();
        let mut out = vec![0u8; len * s];
        // SAFETY: every input holds `len` elements.
        unsafe {
            elem::reduce(dt, op, out.as_mut_ptr(), &ptrs, len);
            elem::finish(dt, op, self.rule.nranks, out.as_mut_ptr(), len);
        }
        out
    }

    /// Rank `r`'s receive buffer after a correct run.
    fn recv(&self, r: usize) -> Vec<u8> {
        let (n, b, s) = (self.rule.nranks, self.counts.block, self.rule.dtype.size());
        let whole = self.counts.recv;
        let mut recv = vec![0u8; whole * s];
        poison(self.rule.dtype, &mut recv);
        let mut put = |at: usize, q: usize, from: usize, len: usize| {
            recv[at * s..(at + len) * s]
                .copy_from_slice(&self.inputs[q][from * s..(from + len) * s]);
        };
        let root = self.root;
        match self.coll {
            Collective::AllGather => (0..n).for_each(|q| put(q * b, q, 0, b)),
            Collective::Gather if r == root => (0..n).for_each(|q| put(q * b, q, 0, b)),
            Collective::AllToAll => (0..n).for_each(|q| put(q * b, q, r * b, b)),
            Collective::Broadcast => put(0, root, 0, whole),
            Collective::Scatter => put(0, root, r * b, b),
            Collective::SendRecv => put(
                0,
                collbench::engine::types::send_recv_peers(r, n, root).1,
                0,
                whole,
            ),
            Collective::AllReduce => return self.reduce(0, whole),
            Collective::ReduceScatter => return self.reduce(r * b, b),
            Collective::Reduce if r == root => return self.reduce(0, whole),
            Collective::Reduce | Collective::Gather => {}
            // Built by `Collective::ALL` only: the v forms' device regions
            // are checked end to end in tests/cuda_emu.rs.
            Collective::AllToAllV | Collective::AllGatherV | Collective::ReduceScatterV => {
                panic!("{} is not a case of this test", self.coll)
            }
        }
        recv
    }
}

/// A quiet NaN of a float type, or another integer.
fn nan_or_other(dt: Dtype, bits: u64) -> u64 {
    match dt {
        Dtype::F16 => 0x7E00,
        Dtype::Bf16 => 0x7FC0,
        Dtype::F32 => 0x7FC0_0000,
        Dtype::F64 => 0x7FF8_0000_0000_0000,
        Dtype::F8E4M3 | Dtype::F8E5M2 => 0x7F,
        _ => bits ^ 0x5A,
    }
}

fn check_dtype(cxx: &str, dir: &Path, dt: Dtype) -> Result<(), String> {
    let bin = emu::build(cxx, dir, "data_driver.cpp", dt, ReduceOp::Sum)?;
    let mut req = Request::default();
    let mut gens = Vec::new();
    let s = dt.size();

    let mut want = vec![0u8; 1001 * s];
    poison(dt, &mut want);
    let what = format!("{dt}: cb_poison");
    req.poison(1001, (3, 8), Check::Bytes { what, want });

    for op in ReduceOp::ALL {
        for n in [1, 2, 3, 8] {
            // Premulsum with a scalar of the type (3, or 0.75 where it is
            // a float), which scales inputs and expectations.
            let scalar = if dt.is_float() { "0.75" } else { "3" };
            let rule = Rule {
                seed: 0xDA7A_0000 + n as u64,
                dtype: dt,
                op,
                nranks: n,
                scalar: collbench::engine::elem::Scalar::parse(scalar)
                    .and_then(|s| s.bits(dt).ok())
                    .unwrap_or(1),
            };
            let d = DeviceGen::new(&rule);
            req.gen(&d.header(0), d.words());
            let mut ranks = vec![0, n / 2, n - 1];
            ranks.dedup();
            for &q in &ranks {
                let mut want = vec![0u8; FILL * s];
                fill_input(&rule, q, &mut want);
                let what = format!("{dt} {op} n={n}: cb_fill of rank {q}");
                req.fill(q, 0, FILL, (3, 8), Check::Bytes { what, want });
                // Past 2^32, against the host's expectation of an input.
                let e = CbExpect {
                    kind: EXPECT_INPUT,
                    rank: q as u64,
                    src: FAR,
                    block: 0,
                };
                let want: Vec<u8> = (0..64)
                    .flat_map(|k| d.expected_bits(&e, k).to_le_bytes()[..s].to_vec())
                    .collect();
                let what = format!("{dt} {op} n={n}: cb_fill_at of rank {q} from {FAR}");
                req.fill(
                    q,
                    FAR,
                    64,
                    (2, 1),
                    Check::Bytes {
                        what,
                        want: want.clone(),
                    },
                );
                let what = format!("{dt} {op} n={n}: cb_verify of rank {q} from {FAR}");
                let check = Check::Verdict {
                    what,
                    gen: gens.len(),
                    expect: e,
                    count: 64,
                    rank: q,
                    recv: want.clone(),
                    want: Verdict {
                        checked: 64,
                        ..Verdict::default()
                    },
                };
                req.verify(&e, &want, 64, (2, 8), check);
            }
            for coll in Collective::ALL {
                let case = Case::new(rule, coll, n - 1);
                for &r in &ranks {
                    let what = format!("{dt} {op} n={n} {coll} rank {r}");
                    let regions = d.regions(coll, case.counts, case.root, r);
                    if regions.len() > 1 {
                        return Err(format!(
                            "{what}: an even collective in {} regions",
                            regions.len()
                        ));
                    }
                    let Some(e) = regions.first().map(|g| g.e) else {
                        let v = verify(&rule, coll, case.counts, case.root, r, &case.recv(r));
                        if v.checked != 0 {
                            return Err(format!("{what}: no expectation, but verify checks"));
                        }
                        continue;
                    };
                    let good = case.recv(r);
                    let count = case.counts.recv;
                    let mut bad = good.clone();
                    if count > 0 {
                        let (flip, nan, unwritten) = (count / 2, count / 3, count - 1);
                        let top = 1u64 << (8 * s - 2);
                        set(dt, &mut bad, flip, bits_at(dt, &good, flip) ^ top);
                        set(dt, &mut bad, nan, nan_or_other(dt, bits_at(dt, &good, nan)));
                        let mut p = vec![0u8; s];
                        poison(dt, &mut p);
                        bad[unwritten * s..].copy_from_slice(&p);
                    }
                    let mut variants = vec![(good.clone(), "correct", 0), (bad, "corrupted", 2)];
                    if op == ReduceOp::Avg && dt.is_float() && count > 0 {
                        // Float Avg is allowed 2 ULP: nudge magnitudes by 2, then 3.
                        let k = count / 4;
                        let bits = bits_at(dt, &good, k);
                        let (mut near, mut far) = (good.clone(), good);
                        set(dt, &mut near, k, bits + 2);
                        set(dt, &mut far, k, bits + 3);
                        variants.push((near, "2 ULP off", 0));
                        variants.push((far, "3 ULP off", 1));
                    }
                    for (recv, how, wrong) in variants {
                        let want = verify(&rule, coll, case.counts, case.root, r, &recv);
                        if want.ok() != (wrong == 0) || want.wrong < wrong {
                            return Err(format!("{what} {how}: host verdict {want:?}"));
                        }
                        let check = Check::Verdict {
                            what: format!("{what} {how}"),
                            gen: gens.len(),
                            expect: e,
                            count: count as u64,
                            rank: r,
                            recv: recv.clone(),
                            want,
                        };
                        // Blocks of one thread and of two groups of 8.
                        let threads = if r % 2 == 0 { 1 } else { 16 };
                        req.verify(&e, &recv, count as u64, (3, threads), check);
                    }
                }
            }
            gens.push(d);
        }
    }

    let req_path = dir.join(format!("request_{}", dt as u32));
    let resp_path = dir.join(format!("response_{}", dt as u32));
    std::fs::write(&req_path, &req.words).map_err(|e| e.to_string())?;
    let out = Command::new(&bin)
        .arg(&req_path)
        .arg(&resp_path)
        .output()
        .map_err(|e| format!("{dt}: running the driver: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{dt}: driver failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let resp = std::fs::read(&resp_path).map_err(|e| e.to_string())?;
    let mut at = 0usize;
    for check in &req.checks {
        let len = resp
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| format!("{dt}: response ends early"))? as usize;
        let body = resp
            .get(at + 8..at + 8 + len)
            .ok_or_else(|| format!("{dt}: response ends early"))?;
        at += 8 + len;
        match check {
            Check::Bytes { what, want } => {
                if body.len() != want.len() {
                    return Err(format!("{what}: {} bytes, not {}", body.len(), want.len()));
                }
                if body != want.as_slice() {
                    let k = (0..want.len() / s)
                        .find(|&k| body.get(k * s..(k + 1) * s) != Some(&want[k * s..(k + 1) * s]))
                        .unwrap_or(0);
                    return Err(format!(
                        "{what}: element {k} differs: device {:#x}, host {:#x}",
                        bits_at(dt, body, k),
                        bits_at(dt, want, k)
                    ));
                }
            }
            Check::Verdict {
                what,
                gen,
                expect,
                count,
                rank,
                recv,
                want,
            } => {
                let w: Vec<u64> = body
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect();
                let [wrong, nan, first, pad] = w[..] else {
                    return Err(format!("{what}: a verdict of {len} bytes"));
                };
                let counters = CbVerdict {
                    wrong,
                    nan,
                    first,
                    pad,
                };
                let got_bits = (first < *count).then(|| bits_at(dt, recv, first as usize));
                let v = gens[*gen].verdict_from(expect, *count, *rank, &counters, got_bits);
                if &v != want {
                    return Err(format!(
                        "{what}: device {counters:?} gives\n  {v:?}\nhost verify gives\n  {want:?}"
                    ));
                }
            }
        }
    }
    if at != resp.len() {
        return Err(format!("{dt}: response longer than the request asked"));
    }
    Ok(())
}
