//! Inputs and verification on a device: the `#[repr(C)]` twins of the
//! structs `kernels/data.cu` takes, what the host computes for them, and
//! the way back from the kernels' counters to a [`Verdict`].
//!
//! The kernels compute exactly what [`super::fill_input`] and
//! [`super::verify`] compute, with everything heavy done here once per
//! rule: the salts, the scheme's parameters, every family's raw values and
//! the per-family reductions. The device hashes, looks up and transforms in
//! 64-bit integers. That suffices because every value the host holds in 128
//! bits fits 64 once reduced as the device needs it:
//! - raw values: u64 hashes (Wrap), `|w| <= m <= 2^64 - 1` unit counts whose
//!   sign matters only for signed types and floats, where `|w| <= 2^63 - 1`
//!   (Units), a sign bit and a two (Pow2), keys `<= kmax / 2` (Keys);
//! - per-family reductions: Wrap sums are already wrapped; Units sums and
//!   Avg quotients are within the budget `U` (`u64::MAX` for u64, unsigned,
//!   `i64::MAX` for i64, `2^53` for floats), so their low 64 bits are the
//!   value (two's complement where signed); Pow2 counts are at most `n`;
//!   Keys minima and maxima are keys.
//!
//! This module does no I/O: the executor uploads [`DeviceGen::words`],
//! patches the address into [`DeviceGen::header`], launches, and turns the
//! counters it reads back into a verdict with [`DeviceGen::verdict_from`].

use super::data::{max_finite, with_kind, Gen, Kind, Rule, Scheme, Stats, FAMILIES};
use super::verify::{bad_elem, describe_got, tolerance, Verdict};
use crate::engine::{Collective, Counts, Dtype};

/// `CB_SCHEME_*` of data.cu.
const SCHEME_WRAP: u32 = 0;
const SCHEME_UNITS: u32 = 1;
const SCHEME_POW2: u32 = 2;
const SCHEME_KEYS: u32 = 3;

/// `CB_EXPECT_*` of data.cu: what a receive buffer must hold.
pub const EXPECT_REDUCED: u64 = 0;
pub const EXPECT_INPUT: u64 = 1;
pub const EXPECT_BLOCKS: u64 = 2;

/// The input function of one rule, as the kernels take it (`struct CbGen`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CbGen {
    /// Device address of [`DeviceGen::words`].
    pub words: u64,
    pub salt: u64,
    pub kmax: u64,
    pub mid: u64,
    pub nranks: u64,
    pub scheme: u32,
    pub op: u32,
    pub flips: u32,
    pub lo_exp: i32,
    pub exps: u32,
    pub ulps: u32,
    pub dtype: u32,
    /// PreMulSum: the scale exponent of the scalar (inputs are scaled by
    /// `2^-mul_exp`); 0 otherwise.
    pub mul_exp: i32,
    /// PreMulSum: the multiplier of expected values (two's complement); 1
    /// otherwise.
    pub mul: u64,
}

/// What a receive buffer must hold (`struct CbExpect`): element `k` is
/// - [`EXPECT_REDUCED`]: the reduction over all ranks of element `src + k`;
/// - [`EXPECT_INPUT`]: element `src + k` of rank `rank`'s input;
/// - [`EXPECT_BLOCKS`]: element `src + k % block` of rank `k / block`'s input.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CbExpect {
    pub kind: u64,
    pub rank: u64,
    pub src: u64,
    pub block: u64,
}

/// One stretch of a receive buffer and what it must hold: `count`
/// elements from element `at`, element `k` of them as `e` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub at: usize,
    pub count: usize,
    pub e: CbExpect,
}

/// What `cb_verify` counts (`struct CbVerdict`); start from [`CbVerdict::CLEAN`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbVerdict {
    /// Elements differing from the expectation beyond the tolerance.
    pub wrong: u64,
    /// Non-finite elements among the wrong ones.
    pub nan: u64,
    /// Lowest wrong index, `u64::MAX` if none.
    pub first: u64,
    pub pad: u64,
}

impl CbVerdict {
    /// Nothing found yet: what the counters hold before a launch.
    pub const CLEAN: CbVerdict = CbVerdict {
        wrong: 0,
        nan: 0,
        first: u64::MAX,
        pad: 0,
    };
}

impl Default for CbVerdict {
    fn default() -> Self {
        CbVerdict::CLEAN
    }
}

/// Everything the device needs for one rule, and the host's own view of it
/// (to name the expected value of a bad element).
pub struct DeviceGen {
    rule: Rule,
    gen: Gen,
    stats: Stats,
    header: CbGen,
    words: Vec<u64>,
}

impl DeviceGen {
    /// Builds the tables of `rule`: O(32 × nranks).
    pub fn new(rule: &Rule) -> DeviceGen {
        let gen = Gen::new(rule, usize::MAX);
        let stats = gen.stats();
        let mut words: Vec<u64> = stats
            .iter()
            .flat_map(|&(a, b)| [a as u64, b as u64])
            .collect();
        debug_assert_eq!(words.len(), 2 * FAMILIES);
        words.extend(gen.raw_table());
        let dtype = rule.dtype;
        let (scheme, kmax, lo_exp, exps) = match gen.scheme {
            Scheme::Wrap => (SCHEME_WRAP, 0, 0, 0),
            Scheme::Units { lo_exp, exps, .. } => (SCHEME_UNITS, 0, lo_exp, exps as u32),
            Scheme::Pow2 { .. } => (SCHEME_POW2, 0, 0, 0),
            Scheme::Keys { kmax } => (SCHEME_KEYS, kmax, 0, 0),
        };
        let header = CbGen {
            words: 0,
            salt: gen.salt,
            kmax,
            mid: if dtype.is_float() {
                max_finite(dtype)
            } else {
                0
            },
            nranks: gen.nranks() as u64,
            scheme,
            op: gen.op as u32,
            flips: u32::from(gen.flips),
            lo_exp,
            exps,
            ulps: tolerance(rule) as u32,
            dtype: dtype as u32,
            mul_exp: gen.mul_exp,
            mul: gen.mul as u64,
        };
        DeviceGen {
            rule: *rule,
            gen,
            stats,
            header,
            words,
        }
    }

    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// What to upload: `2 × 32` words of per-family reductions, then the
    /// `32 × nranks` raw values.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// The kernels' argument, given the device address of [`Self::words`].
    pub fn header(&self, words_addr: u64) -> CbGen {
        CbGen {
            words: words_addr,
            ..self.header
        }
    }

    /// What rank `rank`'s receive buffer must hold after `coll` with
    /// `counts` and `root`, as [`super::verify`] checks it: one region for
    /// the even collectives, one per rank's block for all-gather-v and
    /// all-to-all-v; none where it checks nothing (non-roots of reduce and
    /// gather).
    pub fn regions(
        &self,
        coll: Collective,
        counts: Counts,
        root: usize,
        rank: usize,
    ) -> Vec<Region> {
        let n = self.gen.nranks();
        let r = self.gen.rank(rank);
        let input = |q: usize, src: usize, (at, count): (usize, usize)| Region {
            at,
            count,
            e: CbExpect {
                kind: EXPECT_INPUT,
                rank: q as u64,
                src: src as u64,
                block: 0,
            },
        };
        match coll {
            Collective::AllGatherV => counts
                .blocks(n)
                .into_iter()
                .enumerate()
                .map(|(q, span)| input(q, 0, span))
                .collect(),
            Collective::AllToAllV => counts
                .recvs(r, n)
                .into_iter()
                .enumerate()
                .map(|(s, span)| input(s, counts.sends(s, n)[r].0, span))
                .collect(),
            Collective::ReduceScatterV => vec![Region {
                at: 0,
                count: counts.recv_of(r),
                e: CbExpect {
                    kind: EXPECT_REDUCED,
                    rank: 0,
                    src: counts.blocks(n)[r].0 as u64,
                    block: 0,
                },
            }],
            _ => self
                .expect(coll, counts, root, rank)
                .map(|e| Region {
                    at: 0,
                    count: counts.recv,
                    e,
                })
                .into_iter()
                .collect(),
        }
    }

    /// The single region of an even collective (see [`Self::regions`]).
    fn expect(
        &self,
        coll: Collective,
        counts: Counts,
        root: usize,
        rank: usize,
    ) -> Option<CbExpect> {
        let n = self.gen.nranks();
        let (r, root) = (self.gen.rank(rank), root % n);
        let b = counts.block as u64;
        let (kind, rank, src) = match coll {
            Collective::AllReduce => (EXPECT_REDUCED, 0, 0),
            Collective::ReduceScatter => (EXPECT_REDUCED, 0, r as u64 * b),
            Collective::Reduce if r == root => (EXPECT_REDUCED, 0, 0),
            Collective::AllGather => (EXPECT_BLOCKS, 0, 0),
            Collective::Gather if r == root => (EXPECT_BLOCKS, 0, 0),
            Collective::Reduce | Collective::Gather => return None,
            Collective::AllToAll => (EXPECT_BLOCKS, 0, r as u64 * b),
            Collective::Broadcast => (EXPECT_INPUT, root as u64, 0),
            Collective::Scatter => (EXPECT_INPUT, root as u64, r as u64 * b),
            Collective::SendRecv => (
                EXPECT_INPUT,
                crate::engine::types::send_recv_peers(r, n, root).1 as u64,
                0,
            ),
            Collective::AllToAllV | Collective::AllGatherV | Collective::ReduceScatterV => {
                return None
            }
        };
        Some(CbExpect {
            kind,
            rank,
            src,
            block: b,
        })
    }

    /// What rank `rank`'s own input holds (for [`super::verify_input`]'s
    /// scan on the device: the send view against its fill).
    pub fn own_input(&self, rank: usize) -> CbExpect {
        CbExpect {
            kind: EXPECT_INPUT,
            rank: self.gen.rank(rank) as u64,
            src: 0,
            block: 0,
        }
    }

    /// The bits element `k` of a receive buffer must hold under `e` (what
    /// `cb_verify` compares with; float Avg within the tolerance).
    pub fn expected_bits(&self, e: &CbExpect, k: u64) -> u64 {
        with_kind!(self.rule.dtype, expected_as, self, e, k)
    }

    /// The verdict [`super::verify`] gives on the same buffer, from
    /// `cb_verify`'s counters over `count` elements of rank `rank`'s receive
    /// buffer and the bits of element `counters.first` read back (`None`:
    /// not read back).
    pub fn verdict_from(
        &self,
        e: &CbExpect,
        count: u64,
        rank: usize,
        counters: &CbVerdict,
        first_got_bits: Option<u64>,
    ) -> Verdict {
        let dtype: Dtype = self.rule.dtype;
        let first = (counters.wrong > 0 && counters.first != u64::MAX).then(|| {
            let got = match first_got_bits {
                Some(bits) => describe_got(dtype, bits),
                None => "not read back".to_string(),
            };
            let expected = self.expected_bits(e, counters.first);
            bad_elem(dtype, rank, counters.first as usize, expected, got)
        });
        Verdict {
            checked: count,
            wrong: counters.wrong,
            nan: counters.nan,
            first,
        }
    }
}

fn expected_as<K: Kind>(d: &DeviceGen, e: &CbExpect, k: u64) -> u64 {
    let i = e.src.wrapping_add(match e.kind {
        EXPECT_BLOCKS => k % e.block.max(1),
        _ => k,
    }) as usize;
    match e.kind {
        EXPECT_REDUCED => d.gen.reduced::<K>(&d.stats, i),
        EXPECT_INPUT => d.gen.input::<K>(d.gen.rank(e.rank as usize), i),
        _ => {
            let q = (k / e.block.max(1)) as usize;
            d.gen.input::<K>(d.gen.rank(q), i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{fill_input, verify};
    use crate::engine::ReduceOp;

    #[test]
    fn layouts_match_data_cu() {
        assert_eq!(std::mem::size_of::<CbGen>(), 80);
        assert_eq!(std::mem::size_of::<CbExpect>(), 32);
        assert_eq!(std::mem::size_of::<CbVerdict>(), 32);
        assert_eq!(std::mem::offset_of!(CbGen, nranks), 32);
        assert_eq!(std::mem::offset_of!(CbGen, scheme), 40);
        assert_eq!(std::mem::offset_of!(CbGen, mul_exp), 68);
        assert_eq!(std::mem::offset_of!(CbGen, mul), 72);
    }

    fn bits_at(dtype: Dtype, buf: &[u8], k: usize) -> u64 {
        let s = dtype.size();
        let mut raw = [0u8; 8];
        raw[..s].copy_from_slice(&buf[k * s..(k + 1) * s]);
        u64::from_le_bytes(raw)
    }

    /// Expectations of inputs are the inputs, and the header says what the
    /// words hold.
    #[test]
    fn expected_inputs_are_fill_input() {
        for dtype in Dtype::ALL {
            for op in ReduceOp::ALL {
                let rule = Rule {
                    seed: 9,
                    dtype,
                    op,
                    nranks: 3,
                    scalar: crate::engine::elem::Scalar::parse("3")
                        .and_then(|s| s.bits(dtype).ok())
                        .unwrap_or(1),
                };
                let d = DeviceGen::new(&rule);
                assert_eq!(d.words().len(), 2 * 32 + 32 * 3);
                assert_eq!(d.header(0x1000).words, 0x1000);
                let mut buf = vec![0u8; 100 * dtype.size()];
                fill_input(&rule, 2, &mut buf);
                let e = CbExpect {
                    kind: EXPECT_INPUT,
                    rank: 2,
                    src: 10,
                    block: 0,
                };
                for k in 0..90 {
                    assert_eq!(
                        d.expected_bits(&e, k),
                        bits_at(dtype, &buf, k as usize + 10)
                    );
                }
            }
        }
    }

    /// A verdict from counters equals the host's on the same buffer.
    #[test]
    fn verdict_from_counters_is_the_hosts() {
        let rule = Rule {
            seed: 1,
            dtype: Dtype::F32,
            op: ReduceOp::Sum,
            nranks: 2,
            scalar: 0,
        };
        let d = DeviceGen::new(&rule);
        let counts = Collective::SendRecv.counts(64 * 4, 4, 2);
        let mut recv = vec![0u8; 64 * 4];
        fill_input(&rule, 0, &mut recv);
        recv[20 * 4..21 * 4].copy_from_slice(&0xFFE5_A5A5u32.to_le_bytes());
        let host = verify(&rule, Collective::SendRecv, counts, 0, 1, &recv);
        let e = d.expect(Collective::SendRecv, counts, 0, 1);
        let Some(e) = e else {
            panic!("send-recv checks every rank");
        };
        let counters = CbVerdict {
            wrong: 1,
            nan: 1,
            first: 20,
            pad: 0,
        };
        let got = bits_at(Dtype::F32, &recv, 20);
        assert_eq!(d.verdict_from(&e, 64, 1, &counters, Some(got)), host);
        assert_eq!(
            d.verdict_from(&e, 64, 1, &CbVerdict::CLEAN, None),
            Verdict {
                checked: 64,
                ..Verdict::default()
            }
        );
        assert!(d.expect(Collective::Gather, counts, 0, 1).is_none());
    }
}
