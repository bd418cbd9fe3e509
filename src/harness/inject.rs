//! Fault injection (`--inject SPEC`), to prove the diagnostics end to end:
//!
//! - `hang:rank=R,seq=S`: rank R never enters collective S;
//! - `delay:rank=R,seq=S,ms=M`: rank R enters collective S M ms late;
//! - `nan:rank=R[,seq=S]`: a NaN in rank R's input from collective S on
//!   (floating-point types; the checks report it);
//! - `corrupt:rank=R[,seq=S]`: a flipped bit in rank R's output from
//!   collective S on (the checks report it);
//! - `slow:rank=R,factor=F`: everything rank R sends takes F times as long
//!   to move (`--links` names it);
//! - `slow-link:from=A,to=B,factor=F`: the same for one directed link.
//!
//! Sequence numbers are the ones the flight recorder writes (group "0").
//! The grammar is parsed by `cli::values::inject`.

use crate::engine::types::{Collective, Dtype};
use half::{bf16, f16};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    Hang,
    Delay {
        ms: u64,
    },
    Nan,
    Corrupt,
    /// Every transfer from `rank` (to `to`, or to anyone) takes `factor`
    /// times as long.
    Slow {
        to: Option<usize>,
        factor: f64,
    },
}

/// One injected fault.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Inject {
    pub fault: Fault,
    /// The rank it hits (for a slowed link: the sender).
    pub rank: usize,
    /// The collective it hits (hang, delay) or from which on (nan, corrupt).
    pub seq: u64,
}

impl std::fmt::Display for Inject {
    /// The spec as `--inject` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (r, s) = (self.rank, self.seq);
        match self.fault {
            Fault::Hang => write!(f, "hang:rank={r},seq={s}"),
            Fault::Delay { ms } => write!(f, "delay:rank={r},seq={s},ms={ms}"),
            Fault::Nan => write!(f, "nan:rank={r},seq={s}"),
            Fault::Corrupt => write!(f, "corrupt:rank={r},seq={s}"),
            Fault::Slow { to: None, factor } => write!(f, "slow:rank={r},factor={factor}"),
            Fault::Slow {
                to: Some(t),
                factor,
            } => write!(f, "slow-link:from={r},to={t},factor={factor}"),
        }
    }
}

impl Inject {
    /// Whether this fault, hitting `rank` in an operation of `coll` with
    /// `root`, lands where no check can see it: a NaN in the input of a
    /// broadcast's or scatter's non-root rank (the root's alone is sent), a
    /// corrupted output of a reduce's or gather's non-root rank (the root's
    /// alone is the result). It does not count as fired there.
    pub fn unseen(&self, coll: Collective, rank: usize, root: Option<usize>) -> bool {
        let non_root = root.is_some_and(|r| r != rank);
        match self.fault {
            Fault::Nan => non_root && matches!(coll, Collective::Broadcast | Collective::Scatter),
            Fault::Corrupt => non_root && matches!(coll, Collective::Reduce | Collective::Gather),
            _ => false,
        }
    }

    /// Whether this fault hits rank `rank` at collective `seq`.
    pub fn hits(&self, rank: usize, seq: u64) -> bool {
        self.rank == rank
            && match self.fault {
                Fault::Hang | Fault::Delay { .. } => seq == self.seq,
                Fault::Nan | Fault::Corrupt => seq >= self.seq,
                // Not an event: it acts on every transfer (see `pace_rule`).
                Fault::Slow { .. } => false,
            }
    }

    /// The transports' slowing rule of a `slow` or `slow-link` fault.
    pub fn pace_rule(&self) -> Option<crate::engine::exec::world::PaceRule> {
        match self.fault {
            Fault::Slow { to, factor } => Some(crate::engine::exec::world::PaceRule {
                from: self.rank,
                to,
                factor,
            }),
            _ => None,
        }
    }
}

/// Writes a NaN over element `index` of `buf` (no-op for integer types).
pub fn poke_nan(dtype: Dtype, buf: &mut [u8], index: usize) {
    let bytes: Vec<u8> = match dtype {
        Dtype::F16 => f16::NAN.to_ne_bytes().to_vec(),
        Dtype::Bf16 => bf16::NAN.to_ne_bytes().to_vec(),
        Dtype::F32 => f32::NAN.to_ne_bytes().to_vec(),
        Dtype::F64 => f64::NAN.to_ne_bytes().to_vec(),
        Dtype::F8E4M3 | Dtype::F8E5M2 => vec![0x7f],
        _ => return,
    };
    let at = index * dtype.size();
    if let Some(dst) = buf.get_mut(at..at + bytes.len()) {
        dst.copy_from_slice(&bytes);
    }
}

/// Flips the lowest bit of element `index` of `buf`.
pub fn flip_bit(dtype: Dtype, buf: &mut [u8], index: usize) {
    if let Some(b) = buf.get_mut(index * dtype.size()) {
        *b ^= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_hit_their_rank_and_sequence() {
        let h = Inject {
            fault: Fault::Hang,
            rank: 1,
            seq: 4,
        };
        assert!(h.hits(1, 4) && !h.hits(1, 5) && !h.hits(0, 4));
        let n = Inject {
            fault: Fault::Nan,
            ..h
        };
        assert!(n.hits(1, 4) && n.hits(1, 40) && !n.hits(1, 3));
    }

    #[test]
    fn nan_and_flip_change_the_element() {
        let mut b = vec![0u8; 16];
        poke_nan(Dtype::F32, &mut b, 2);
        assert!(f32::from_ne_bytes(b[8..12].try_into().unwrap()).is_nan());
        flip_bit(Dtype::F32, &mut b, 0);
        assert_eq!(b[0], 1);
        let mut i = vec![0u8; 8];
        poke_nan(Dtype::I32, &mut i, 0);
        assert_eq!(i, vec![0; 8]);
    }
}
