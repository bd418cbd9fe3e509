//! Fault injection (`--inject SPEC`), to prove the diagnostics end to end:
//!
//! - `hang:rank=R,seq=S`: rank R never enters collective S;
//! - `delay:rank=R,seq=S,ms=M`: rank R enters collective S M ms late;
//! - `nan:rank=R[,seq=S]`: a NaN in rank R's input from collective S on
//!   (floating-point types; the checks report it);
//! - `corrupt:rank=R[,seq=S]`: a flipped bit in rank R's output from
//!   collective S on (the checks report it).
//!
//! Sequence numbers are the ones the flight recorder writes (group "0").

use crate::engine::types::Dtype;
use half::{bf16, f16};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Hang,
    Delay { ms: u64 },
    Nan,
    Corrupt,
}

/// One injected fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inject {
    pub fault: Fault,
    pub rank: usize,
    /// The collective it hits (hang, delay) or from which on (nan, corrupt).
    pub seq: u64,
}

impl Inject {
    /// Parses one SPEC; `nranks` bounds the rank.
    pub fn parse(spec: &str, nranks: usize) -> Result<Inject, String> {
        let bad = |why: &str| {
            format!("--inject '{spec}': {why} (forms: hang:rank=R,seq=S  delay:rank=R,seq=S,ms=M  nan:rank=R[,seq=S]  corrupt:rank=R[,seq=S])")
        };
        let (kind, rest) = spec.split_once(':').ok_or_else(|| bad("missing ':'"))?;
        let (mut rank, mut seq, mut ms) = (None, None, None);
        for kv in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(&format!("'{kv}' is not key=value")))?;
            let v: u64 = v
                .trim()
                .parse()
                .map_err(|_| bad(&format!("{k}={v} is not a whole number")))?;
            match k.trim() {
                "rank" => rank = Some(v),
                "seq" => seq = Some(v),
                "ms" => ms = Some(v),
                other => return Err(bad(&format!("unknown key '{other}'"))),
            }
        }
        let rank = rank.ok_or_else(|| bad("rank= is required"))? as usize;
        if rank >= nranks {
            return Err(bad(&format!("rank {rank} is outside the {nranks} ranks")));
        }
        let fault = match kind.trim() {
            "hang" => Fault::Hang,
            "delay" => Fault::Delay {
                ms: ms.ok_or_else(|| bad("ms= is required"))?,
            },
            "nan" => Fault::Nan,
            "corrupt" => Fault::Corrupt,
            other => return Err(bad(&format!("unknown fault '{other}'"))),
        };
        if matches!(fault, Fault::Hang | Fault::Delay { .. }) && seq.is_none() {
            return Err(bad("seq= is required"));
        }
        if ms.is_some() && !matches!(fault, Fault::Delay { .. }) {
            return Err(bad("ms= only goes with delay"));
        }
        let seq = seq.unwrap_or(1);
        if seq == 0 {
            return Err(bad("sequence numbers start at 1"));
        }
        Ok(Inject { fault, rank, seq })
    }

    /// Whether this fault hits rank `rank` at collective `seq`.
    pub fn hits(&self, rank: usize, seq: u64) -> bool {
        self.rank == rank
            && match self.fault {
                Fault::Hang | Fault::Delay { .. } => seq == self.seq,
                Fault::Nan | Fault::Corrupt => seq >= self.seq,
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
    fn parses_every_form() {
        assert_eq!(
            Inject::parse("hang:rank=2,seq=5", 4),
            Ok(Inject {
                fault: Fault::Hang,
                rank: 2,
                seq: 5
            })
        );
        assert_eq!(
            Inject::parse("delay:rank=1,seq=3,ms=8000", 4),
            Ok(Inject {
                fault: Fault::Delay { ms: 8000 },
                rank: 1,
                seq: 3
            })
        );
        assert_eq!(
            Inject::parse("nan:rank=0", 2),
            Ok(Inject {
                fault: Fault::Nan,
                rank: 0,
                seq: 1
            })
        );
        assert_eq!(
            Inject::parse("corrupt:rank=1,seq=9", 2),
            Ok(Inject {
                fault: Fault::Corrupt,
                rank: 1,
                seq: 9
            })
        );
    }

    #[test]
    fn rejects_bad_specs_with_reasons() {
        for (spec, why) in [
            ("hang:rank=2", "seq= is required"),
            ("hang:rank=9,seq=1", "outside"),
            ("delay:rank=0,seq=1", "ms= is required"),
            ("boom:rank=0", "unknown fault"),
            ("nan:rank=0,when=3", "unknown key"),
            ("nan", "missing ':'"),
            ("nan:rank=x", "not a whole number"),
            ("nan:rank=0,ms=4", "only goes with delay"),
            ("hang:rank=0,seq=0", "start at 1"),
        ] {
            let e = Inject::parse(spec, 4).unwrap_err();
            assert!(e.contains(why), "{spec}: {e}");
        }
    }

    #[test]
    fn faults_hit_their_rank_and_sequence() {
        let h = Inject::parse("hang:rank=1,seq=4", 2).unwrap();
        assert!(h.hits(1, 4) && !h.hits(1, 5) && !h.hits(0, 4));
        let n = Inject::parse("nan:rank=1,seq=4", 2).unwrap();
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
