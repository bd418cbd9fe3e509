//! Grouped operations (NCCL's group calls, PyTorch's coalescing): several
//! collectives issued together run as one program over one set of buffers.
//! Each member keeps its own buffers, laid end to end in the group's; its
//! program's slices move to its place there, and on every channel the
//! members' steps follow one another in issue order. Every rank issues the
//! same members in the same order, so each connection carries the members'
//! messages in the order both ends expect.
//!
//! A connection belongs to one channel of a program. Members that run the
//! same collective the same way (algorithm, root, channels) use their
//! connections on the same channels and share them; each other way of
//! running gets connections of its own (its channel tags moved past every
//! tag the ways before it may use), or a tree's turn-around could share a
//! connection with a ring's channel.

use super::program::{Buf, ChannelProgram, Layout, Program, Slice};
use super::{generate, AlgoError, Spec};
use crate::engine::types::Placement;

/// Where one member's views start in the group's views, in elements, and
/// what its connections' channel tags are moved by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shift {
    pub send: usize,
    pub recv: usize,
    pub scratch: usize,
    pub chan: u32,
}

impl Shift {
    /// A member's slice as the group's program sees it.
    pub fn apply(&self, s: Slice) -> Slice {
        let off = match s.buf {
            Buf::Send => self.send,
            Buf::Recv => self.recv,
            Buf::Scratch => self.scratch,
        };
        Slice {
            buf: s.buf,
            off: s.off + off,
        }
    }
}

/// The group's layout from its members' (issue order) and their scratch
/// elements, and each member's shift. Out of place the group's send view is
/// the members' send views end to end (likewise receive); in place, one
/// buffer holds the members' buffers end to end, and both views span it,
/// each member's reached at its own offsets.
pub fn layout(members: &[(Layout, usize)], placement: Placement) -> (Layout, Vec<Shift>, usize) {
    let mut shifts = Vec::with_capacity(members.len());
    let (mut b0, mut b1, mut scratch) = (0, 0, 0);
    for (l, s) in members {
        shifts.push(match placement {
            Placement::OutOfPlace => Shift {
                send: b0 + l.send_at.1,
                recv: b1 + l.recv_at.1,
                scratch,
                chan: 0,
            },
            Placement::InPlace => Shift {
                send: b0 + l.send_at.1,
                recv: b0 + l.recv_at.1,
                scratch,
                chan: 0,
            },
        });
        b0 += l.buf0;
        b1 += l.buf1;
        scratch += s;
    }
    let layout = Layout {
        placement,
        buf0: b0,
        buf1: b1,
        send_at: (0, 0),
        recv_at: match placement {
            Placement::OutOfPlace => (1, 0),
            Placement::InPlace => (0, 0),
        },
    };
    (layout, shifts, scratch)
}

/// Channel tags one way of running a collective with `channels` channels
/// may use (a tree all-reduce uses four per channel, the others fewer).
pub fn tags_per_way(channels: usize) -> u32 {
    4 * channels.max(1) as u32
}

/// Each member's channel-tag move, from what it runs: (collective,
/// algorithm, root, channels) in issue order. Every rank computes the same.
pub fn chan_shifts<K: PartialEq>(ways: &[K], channels: usize) -> Vec<u32> {
    let mut seen: Vec<&K> = Vec::new();
    ways.iter()
        .map(|w| {
            let i = seen.iter().position(|s| *s == w).unwrap_or_else(|| {
                seen.push(w);
                seen.len() - 1
            });
            i as u32 * tags_per_way(channels)
        })
        .collect()
}

/// The members' programs (issue order) as one, each moved by its shift.
pub fn merge(programs: &[Program], shifts: &[Shift]) -> Program {
    let channels = programs.iter().map(|p| p.channels.len()).max().unwrap_or(0);
    let mut merged = vec![ChannelProgram { steps: Vec::new() }; channels];
    for (p, sh) in programs.iter().zip(shifts) {
        for (c, ch) in p.channels.iter().enumerate() {
            merged[c].steps.extend(ch.steps.iter().map(|s| {
                let mut s = *s;
                s.src = s.src.map(|x| sh.apply(x));
                s.dst = s.dst.map(|x| sh.apply(x));
                if sh.chan > 0 {
                    let moved = |p: super::Peers| {
                        super::Peers::of(
                            p.iter()
                                .map(|q| (q.rank as usize, (q.chan + sh.chan) as usize)),
                        )
                    };
                    s.recv = moved(s.recv);
                    s.send = moved(s.send);
                }
                s
            }));
        }
    }
    Program {
        rank: programs.first().map_or(0, |p| p.rank),
        nranks: programs.first().map_or(0, |p| p.nranks),
        channels: merged,
        scratch: programs.iter().map(|p| p.scratch).sum(),
    }
}

/// One rank's group: the merged program, the group's layout and each
/// member's shift, from the members' specs (one rank, one placement).
pub fn generate_group(specs: &[Spec]) -> Result<(Program, Layout, Vec<Shift>), AlgoError> {
    let programs = specs.iter().map(generate).collect::<Result<Vec<_>, _>>()?;
    assemble(specs, &programs)
}

/// [`generate_group`] from programs already generated for `specs`.
pub fn assemble(
    specs: &[Spec],
    programs: &[Program],
) -> Result<(Program, Layout, Vec<Shift>), AlgoError> {
    let placement = specs
        .first()
        .map(|s| s.placement)
        .ok_or_else(|| AlgoError::Invalid("a group of no operations".into()))?;
    if specs.iter().any(|s| s.placement != placement) || specs.len() != programs.len() {
        return Err(AlgoError::Invalid(
            "a group's members share a placement, and each has a program".into(),
        ));
    }
    let members: Vec<(Layout, usize)> = specs
        .iter()
        .zip(programs)
        .map(|(s, p)| (Layout::new(s.coll, s.counts, placement, s.rank), p.scratch))
        .collect();
    let (layout, mut shifts, _) = self::layout(&members, placement);
    let ways: Vec<_> = specs
        .iter()
        .map(|s| (s.coll.even(), s.algo, s.root, s.channels))
        .collect();
    let channels = specs.iter().map(|s| s.channels).max().unwrap_or(1);
    for (sh, c) in shifts.iter_mut().zip(chan_shifts(&ways, channels)) {
        sh.chan = c;
    }
    Ok((merge(programs, &shifts), layout, shifts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::types::{Algo, Collective};

    #[test]
    fn members_lie_end_to_end_and_keep_their_in_place_offsets() {
        let ag = Collective::AllGather.counts(96, 4, 3); // 8 per rank, 24 gathered
        let ar = Collective::AllReduce.counts(40, 4, 3); // 10
        let rank = 2;
        let l = |c: Collective, k, pl| Layout::new(c, k, pl, rank);
        let out = [
            (l(Collective::AllGather, ag, Placement::OutOfPlace), 0),
            (l(Collective::AllReduce, ar, Placement::OutOfPlace), 5),
        ];
        let (g, sh, scratch) = layout(&out, Placement::OutOfPlace);
        assert_eq!((g.buf0, g.buf1, scratch), (8 + 10, 24 + 10, 5));
        assert_eq!((sh[1].send, sh[1].recv, sh[1].scratch), (8, 24, 0));
        let inp = [
            (l(Collective::AllGather, ag, Placement::InPlace), 0),
            (l(Collective::AllReduce, ar, Placement::InPlace), 0),
        ];
        let (g, sh, _) = layout(&inp, Placement::InPlace);
        assert_eq!((g.buf0, g.buf1), (24 + 10, 0));
        // All-gather in place: this rank's input at its block of the output.
        assert_eq!((sh[0].send, sh[0].recv), (16, 0));
        assert_eq!((sh[1].send, sh[1].recv), (24, 24));
        assert_eq!(g.resolve(sh[1].apply(Slice::recv(3))), (0, 27));
    }

    #[test]
    fn each_way_of_running_gets_its_own_connections() {
        let ways = [
            (Collective::AllReduce, Algo::Ring),
            (Collective::AllReduce, Algo::Tree),
            (Collective::AllReduce, Algo::Ring),
            (Collective::AllGather, Algo::Ring),
        ];
        assert_eq!(chan_shifts(&ways, 2), vec![0, 8, 0, 16]);
    }
}
