//! A case made ready on a rank: its program generated (auto channels from
//! the rank's block budget, a group's programs assembled into one), loaded
//! on the runner (or NCCL's operations, laid out as the group lays them),
//! and each operation's data rule, with its generator on the device.

use super::*;

impl RankJob<'_> {
    pub(super) fn compile<'b>(
        &mut self,
        case: &'b Case,
        pl: Placement,
    ) -> Result<Ready<'b>, ExecError> {
        let rank = self.rank();
        let members = self.plan.members(case);
        let builtin = case.engine == Engine::Builtin;
        let (program, mut layout, mut shifts) = if builtin {
            let (p, l, sh) = self.program(case, &members, pl)?;
            (Some(p), l, sh)
        } else {
            let l = Layout::new(case.coll, case.counts, pl, rank);
            (None, l, vec![Shift::default(); members.len()])
        };
        let op = self.op_desc(case, layout);
        if case.engine == Engine::Nccl {
            let ops = if case.group == 0 {
                vec![op]
            } else {
                let (ops, l, sh) = self.library_group(&members, pl);
                (layout, shifts) = (l, sh);
                ops
            };
            self.runner.load_library(&ops, Engine::Nccl)?;
        }
        if let Some(p) = &program {
            self.runner.load(&op, p)?;
            self.mark_slowed(p);
        }
        let bytes: u64 = members.iter().map(|m| m.bytes).sum();
        let info = OpInfo {
            group: WORLD_GROUP,
            collective: if case.group == 0 {
                case.coll.name()
            } else {
                "group"
            },
            algo: if builtin {
                case.algo.name()
            } else {
                case.engine.name()
            },
            dtype: case.dtype.name(),
            count: bytes / case.dtype.size() as u64,
            bytes,
            root: case.root.map(|r| r as i64),
        };
        let parts = self.parts(members, shifts)?;
        Ok(Ready {
            case,
            on_runner: case.engine != Engine::Mpi,
            layout,
            desc: op,
            info,
            parts,
        })
    }

    /// The operation the runner loads for `case` laid out as `layout` (a
    /// group's: its whole buffers).
    fn op_desc(&self, case: &Case, layout: Layout) -> OpDesc {
        let counts = if case.group == 0 {
            case.counts
        } else {
            crate::engine::types::Counts {
                send: layout.buf0,
                recv: layout.buf1.max(layout.buf0 * usize::from(layout.aliased())),
                ..Default::default()
            }
        };
        OpDesc {
            coll: case.coll,
            dtype: case.dtype,
            op: case.op,
            scalar: case.scalar,
            counts,
            root: case.root.unwrap_or(0),
            nranks: self.plan.ranks,
            layout,
        }
    }

    /// Before the first launch, the builtin engine's program of the
    /// largest case of each (collective, algorithm, root, group, type,
    /// operator: a kernel variant's occupancy is its own) goes through the
    /// runner's load checks at every placement: a layout that cannot run
    /// (blocks that cannot all be resident at once) is refused before any
    /// row, not after the rows of the algorithms that fit.
    pub(super) fn preflight(&mut self) -> Result<(), ExecError> {
        if !self.runner.checks_load() {
            return Ok(());
        }
        let largest = crate::harness::plan::largest_builtin(
            self.cases,
            |c| (c.coll, c.algo, c.root, c.group, c.dtype, c.op),
            |c| c.bytes,
        );
        let auto = matches!(self.plan.algos, crate::harness::plan::AlgoChoice::Auto);
        for case in largest {
            let members = self.plan.members(case);
            for &pl in &self.plan.placements {
                let (program, layout, _) = self.program(case, &members, pl)?;
                let op = self.op_desc(case, layout);
                self.runner.check_load(&op, &program).map_err(|e| match e {
                    // What auto picked is not what the user named.
                    ExecError::Unfit(why) if auto => ExecError::Unfit(format!(
                        "--algo auto picks {} for {} at {}, which cannot run here: {why}; name the algorithms that can (--algo)",
                        case.algo.name(),
                        case.coll.name(),
                        crate::units::Bytes(case.bytes)
                    )),
                    ExecError::Unfit(why) => ExecError::Unfit(format!(
                        "{} over {} cannot run here: {why}",
                        case.coll.name(),
                        case.algo.name()
                    )),
                    e => e,
                })?;
            }
        }
        Ok(())
    }

    /// The builtin engine's program of `case` on this rank, with its layout
    /// and each member's shift in it (a group's programs assembled into
    /// one). Auto channels: as many as the rank's block budget holds (some
    /// algorithms run several blocks per channel).
    fn program(
        &mut self,
        case: &Case,
        members: &[Case],
        pl: Placement,
    ) -> Result<(Program, Layout, Vec<Shift>), ExecError> {
        let rank = self.rank();
        let chunk = self.runner.chunk_elems(case.dtype);
        let nranks = self.plan.ranks;
        let setup = |e: crate::engine::algo::AlgoError| ExecError::Setup(e.to_string());
        let mut channels = self.plan.channels;
        if channels == 0 {
            let budget = self.runner.auto_blocks(case.dtype, case.op)?.max(1);
            let specs: Vec<Spec> = members
                .iter()
                .map(|m| m.spec(nranks, rank, pl, budget, chunk))
                .collect();
            let programs = specs.iter().map(generate).collect::<Result<Vec<_>, _>>();
            let programs = programs.map_err(setup)?;
            // Blocks a channel: the most any member runs.
            let per = programs
                .iter()
                .map(|p| p.channels.len().div_ceil(budget))
                .max()
                .unwrap_or(1)
                .max(1);
            if per == 1 {
                return assembled(case, &specs, programs, pl, rank).map_err(setup);
            }
            channels = (budget / per).max(1);
        }
        program_with(case, members, nranks, rank, pl, channels, chunk).map_err(setup)
    }

    /// NCCL's group: each operation on its own buffers, laid out end to
    /// end as the builtin engine's group lays them; the layout and shifts.
    fn library_group(&self, members: &[Case], pl: Placement) -> (Vec<OpDesc>, Layout, Vec<Shift>) {
        let rank = self.rank();
        let each: Vec<(Layout, usize)> = members
            .iter()
            .map(|m| (Layout::new(m.coll, m.counts, pl, rank), 0))
            .collect();
        let (l, shifts, _) = group::layout(&each, pl);
        let ops = members
            .iter()
            .zip(&each)
            .zip(&shifts)
            .map(|((m, (own, _)), sh)| OpDesc {
                coll: m.coll,
                dtype: m.dtype,
                op: m.op,
                scalar: m.scalar,
                counts: m.counts,
                root: m.root.unwrap_or(0),
                nranks: self.plan.ranks,
                layout: Layout {
                    send_at: l.resolve(sh.apply(Slice::send(0))),
                    recv_at: l.resolve(sh.apply(Slice::recv(0))),
                    ..*own
                },
            })
            .collect();
        (ops, l, shifts)
    }

    /// Each operation's data rule (its own seed in a group), and on a
    /// device its generator, uploaded.
    fn parts(&mut self, members: Vec<Case>, shifts: Vec<Shift>) -> Result<Vec<Part>, ExecError> {
        let mut parts = Vec::with_capacity(members.len());
        for (k, (m, shift)) in members.into_iter().zip(shifts).enumerate() {
            let rule = Rule {
                seed: member_seed(self.plan.seed, k),
                dtype: m.dtype,
                op: m.op,
                nranks: self.plan.ranks,
                scalar: m.scalar,
            };
            let gen = match self.runner.data() {
                Data::Host(_) => None,
                Data::Device(d) => {
                    let g = DeviceGen::new(&rule);
                    let addr = d.upload_words(g.words())?;
                    let header = as_bytes(&[g.header(addr)]).to_vec();
                    Some((g, header))
                }
            };
            parts.push(Part {
                case: m,
                shift,
                rule,
                gen,
            });
        }
        Ok(parts)
    }
}

/// Rank `rank`'s program of `case` with `channels` channels, with its
/// layout and each member's shift in it (a group's members' programs
/// assembled into one).
pub(crate) fn program_with(
    case: &Case,
    members: &[Case],
    nranks: usize,
    rank: usize,
    pl: Placement,
    channels: usize,
    chunk: usize,
) -> Result<(Program, Layout, Vec<Shift>), crate::engine::algo::AlgoError> {
    let specs: Vec<Spec> = members
        .iter()
        .map(|m| m.spec(nranks, rank, pl, channels, chunk))
        .collect();
    let programs = specs.iter().map(generate).collect::<Result<Vec<_>, _>>()?;
    assembled(case, &specs, programs, pl, rank)
}

/// The members' `programs` (made from `specs`) as the rank's one program,
/// with its layout and each member's shift in it.
fn assembled(
    case: &Case,
    specs: &[Spec],
    programs: Vec<Program>,
    pl: Placement,
    rank: usize,
) -> Result<(Program, Layout, Vec<Shift>), crate::engine::algo::AlgoError> {
    if case.group > 0 {
        return group::assemble(specs, &programs);
    }
    let p = programs
        .into_iter()
        .next()
        .ok_or_else(|| crate::engine::algo::AlgoError::Invalid("no program for the case".into()))?;
    let layout = Layout::new(case.coll, case.counts, pl, rank);
    Ok((p, layout, vec![Shift::default(); specs.len()]))
}
