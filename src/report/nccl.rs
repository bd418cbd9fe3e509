//! nccl-tests' text layout, so that log parsers written for nccl-tests read
//! collbench's output: per collective and engine one run, as nccl-tests
//! prints it (and one per algorithm when the sweep ran several per case):
//! the `# nThread ... nGpus ...` header, the device list, the column header
//! and units, one line per case with out-of-place and in-place side by
//! side, and the footer (`# Out of bounds values : N OK|FAILED`,
//! `# Avg bus bandwidth : X`, the mean busbw over every row and both
//! placements). Column widths and number formats follow nccl-tests; the
//! only additions are `#` comment lines (the algorithm by size), which its
//! parsers skip. Thread ranks share the process, so every rank shows its id.

use super::text::{avg_busbw, bad_values, made_by, Layout, Line, TimeDigits};
use super::{Meta, Partial, Results, Row};

/// Widths of the case's columns: size, count, type, redop, root.
const CASE: [usize; 5] = [12, 12, 8, 6, 6];
/// Widths of one placement's columns: time, algbw, busbw, #wrong.
const PLACEMENT: [usize; 4] = [7, 6, 6, 5];
/// ... in newer nccl-tests' wider layout (2.17).
const PLACEMENT_WIDE: [usize; 4] = [7, 6, 6, 6];
/// Times in the wider layout: two decimals below 10000 us, one below 100000.
const DIGITS_WIDE: TimeDigits = TimeDigits {
    tenths_from: 10_000.0,
    whole_from: 100_000.0,
};
const SEP: &str = "  ";
/// The most `#  Rank` lines made up for results without a log's own.
const RANK_LINES: usize = 4096;

/// nccl-tests' layout.
pub struct NcclTests {
    placements: Vec<String>,
    /// The sizes asked for (`minBytes`, `maxBytes`, step), when known.
    sizes: Vec<u64>,
    /// One run per algorithm (the sweep ran several per case).
    split_algos: bool,
    /// Newer nccl-tests' wider layout (a log that was printed in it).
    wide: bool,
}

impl NcclTests {
    /// `sizes`: the sizes the sweep asked for, smallest first (empty: the
    /// header shows the first row's size); `split_algos`: one run per
    /// algorithm, else one per collective and engine.
    pub fn new(placements: Vec<String>, sizes: Vec<u64>, split_algos: bool) -> NcclTests {
        NcclTests {
            placements,
            sizes,
            split_algos,
            wide: false,
        }
    }

    /// In newer nccl-tests' wider layout (`#wrong` six wide, times with two
    /// decimals below 10000 us), as a log printed in it was.
    pub fn wide(mut self, wide: bool) -> NcclTests {
        self.wide = wide;
        self
    }

    fn widths(&self) -> (&'static [usize; 4], TimeDigits) {
        if self.wide {
            (&PLACEMENT_WIDE, DIGITS_WIDE)
        } else {
            (&PLACEMENT, TimeDigits::NCCL_TESTS)
        }
    }
}

/// The redop nccl-tests prints: send-recv moves data only, yet its test
/// prints the (unused) `sum`; premulsum is `mulsum` there.
fn redop(r: &Row) -> &str {
    if r.collective == "send-recv" {
        "sum"
    } else if r.op == "premulsum" {
        "mulsum"
    } else {
        &r.op
    }
}

/// `# Algorithm by size: direct 8..65536 B, ring 131072..67108864 B`: the
/// algorithm of each run of sizes (rows in sweep order).
fn algorithm_line(rows: &[Row]) -> String {
    let mut spans: Vec<(&str, u64, u64)> = Vec::new();
    let mut sizes: Vec<(&str, u64)> = rows.iter().map(|r| (r.algo.as_str(), r.bytes)).collect();
    sizes.sort_by_key(|&(_, b)| b);
    sizes.dedup();
    for (algo, bytes) in sizes {
        match spans.last_mut() {
            Some((a, _, hi)) if *a == algo => *hi = bytes,
            _ => spans.push((algo, bytes, bytes)),
        }
    }
    let parts: Vec<String> = spans
        .iter()
        .map(|&(a, lo, hi)| {
            if lo == hi {
                format!("{a} {lo} B")
            } else {
                format!("{a} {lo}..{hi} B")
            }
        })
        .collect();
    format!("# Algorithm by size: {}", parts.join(", "))
}

/// Whether the average bus bandwidth of `rows` (one run of nccl-tests'
/// text) falls below 0.9 of `NCCL_TESTS_MIN_BW`, where nccl-tests fails.
pub fn below_min_bw(rows: &[Row], min_bw: f64) -> bool {
    avg_busbw(rows) < 0.9 * min_bw
}

/// The runs of nccl-tests' text (as [`NcclTests`] sections `rows`) whose
/// average bus bandwidth falls below 0.9 of `min_bw`: each run's name
/// (binary, engine, and algorithm where split) and average.
pub fn runs_below_min_bw(rows: &[Row], min_bw: f64, split_algos: bool) -> Vec<(String, f64)> {
    let layout = NcclTests::new(Vec::new(), Vec::new(), split_algos);
    let mut runs: Vec<(String, Vec<Row>)> = Vec::new();
    // As the text shows them: a group's row, not its operations'.
    for r in rows.iter().filter(|r| r.group_member.is_none()) {
        let key = layout.section_key(r);
        match runs.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r.clone()),
            None => runs.push((key, vec![r.clone()])),
        }
    }
    runs.into_iter()
        .filter(|(_, v)| below_min_bw(v, min_bw))
        .map(|(_, v)| {
            let r = &v[0];
            let mut name = format!("{} ({} engine", perf_binary(&r.collective), r.engine);
            if split_algos {
                name.push_str(&format!(", {}", r.algo));
            }
            name.push(')');
            (name, avg_busbw(&v))
        })
        .collect()
}

/// The name of nccl-tests' binary for a collective.
pub fn perf_binary(collective: &str) -> String {
    match collective {
        "all-to-all" => "alltoall_perf".into(),
        "all-to-all-v" => "alltoallv_perf".into(),
        "send-recv" => "sendrecv_perf".into(),
        c => format!("{}_perf", c.replace('-', "_")),
    }
}

/// `%g`: six significant digits, trailing zeros dropped, exponent form
/// outside 1e-4..1e6 (as nccl-tests prints the average bus bandwidth).
pub fn fmt_g(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return if x.is_finite() {
            "0".into()
        } else {
            x.to_string()
        };
    }
    let exp = x.abs().log10().floor() as i32;
    let trim = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..6).contains(&exp) {
        let s = format!("{:.5e}", x);
        let (mant, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        let sign = if e < 0 { '-' } else { '+' };
        return format!("{}e{sign}{:02}", trim(mant.to_string()), e.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    trim(format!("{x:.decimals$}"))
}

/// nccl-tests' `step:` field: `F(factor)` or `N(bytes)`.
pub fn step(sizes: &[u64]) -> String {
    crate::units::nccl_tests_step(sizes)
}

impl NcclTests {
    fn header(&self, first: &Row, meta: Option<&Meta>) -> Vec<String> {
        let sizes: &[u64] = if self.sizes.is_empty() {
            std::slice::from_ref(&first.bytes)
        } else {
            &self.sizes
        };
        let (min, max) = (sizes[0], sizes[sizes.len() - 1]);
        let ranks = meta.map_or(1, |m| m.world_size.max(1));
        // nGpus counts a process's ranks: one where ranks are processes.
        let per_process = if meta.is_some_and(|m| !m.processes.is_empty()) {
            1
        } else {
            ranks
        };
        let (warmup, iters) = meta.map_or((0, 0), |m| (m.warmup, m.iters));
        // nccl-tests' iters are per aggregate of `agg` operations.
        let agg = meta.map_or(1, |m| m.agg_iters.max(1));
        let graph = meta.is_some_and(|m| m.graph);
        // Run as an nccl-tests binary (or read from its log): its own line.
        let given = meta.and_then(|m| m.nccl_tests_header.clone());
        let mut out = vec![
            format!("# Collective test starting: {}", perf_binary(&first.collective)),
            given.unwrap_or_else(|| format!(
                "# nThread 1 nGpus {per_process} minBytes {min} maxBytes {max} step: {} warmup iters: {warmup} iters: {} agg iters: {agg} validation: {} graph: {}",
                step(sizes),
                iters / agg,
                u8::from(first.wrong >= 0),
                u8::from(graph)
            )),
            "#".into(),
            "# Using devices".into(),
        ];
        let host = meta.map_or("unknown", |m| m.host.as_str());
        let pid = meta.map_or(0, |m| m.pid);
        // Read from a log: its own device lines (each rank's process and host).
        let given = meta.map_or(&[][..], |m| m.nccl_tests_devices.as_slice());
        out.extend(given.iter().cloned());
        // Made up from the results' few devices: a line a rank up to a
        // limit, then one line for the rest (a world of millions printed
        // hundreds of megabytes of the same lines).
        let shown = ranks.min(RANK_LINES);
        for rank in (0..shown).filter(|_| given.is_empty()) {
            // A GPU: its bus id and name as CUDA reports them; the host
            // engine: the device kind and the CPU.
            let gpus = meta.map_or(&[][..], |m| m.gpus.as_slice());
            let (dev, bus, name) = match gpus.get(rank % gpus.len().max(1)) {
                Some(g) => (rank % gpus.len(), g.bus_id.as_str(), g.name.as_str()),
                None => (
                    rank,
                    meta.map_or("host", |m| m.device.as_str()),
                    meta.and_then(|m| m.devices.get(rank % m.devices.len().max(1)))
                        .map_or("unknown device", |d| d.as_str()),
                ),
            };
            // Ranks that are processes: each its own.
            let (pid, host) = meta
                .and_then(|m| m.processes.get(rank))
                .map_or((pid, host), |p| (p.pid, p.host.as_str()));
            out.push(format!(
                "#  Rank {rank:>2} Group  0 Pid {pid:>6} on {host:>10} device {dev:>2} [{bus}] {name}"
            ));
        }
        if given.is_empty() && ranks > shown {
            out.push(format!(
                "#  Ranks {shown} to {}: not shown (the results keep no line of their own for them)",
                ranks - 1
            ));
        }
        out.push("#".into());
        out.push(format!(
            "# {}: {} engine",
            meta.map_or_else(|| "collbench".into(), made_by),
            first.engine,
        ));
        out
    }
}

impl Layout for NcclTests {
    fn placements(&self) -> &[String] {
        &self.placements
    }

    fn section_key(&self, row: &Row) -> String {
        let section = super::text::section_of(row);
        if self.split_algos {
            format!("{section}\u{0}{}", row.algo)
        } else {
            section
        }
    }

    fn open(&self, first: &Row, meta: Option<&Meta>) -> Vec<String> {
        let mut out = self.header(first, meta);
        // nccl-tests always shows both placements; a missing one prints dashes.
        let top = Line::new("#", "")
            .right(63, "")
            .left(12, "out-of-place")
            .right(23, "")
            .left(18, "in-place");
        let mut cols =
            Line::new("# ", SEP).rights(&CASE, ["size", "count", "type", "redop", "root"]);
        let mut units = Line::new("# ", SEP).rights(&CASE, ["(B)", "(elements)", "", "", ""]);
        let (widths, _) = self.widths();
        // A log's run timed on the host's CPU (nccl-tests -C) says so again.
        let time = match meta {
            Some(m) if m.timing == "cpu" => "cputime",
            _ => "time",
        };
        for _ in 0..2 {
            cols = cols.rights(&widths[..3], [time, "algbw", "busbw"]);
            cols = if self.wide {
                cols.right(widths[3], "#wrong")
            } else {
                // The classic header puts `#wrong` one column left of its values.
                cols.sep(" ").right(widths[3] + 1, "#wrong").sep(SEP)
            };
            units = units.rights(widths, ["(us)", "(GB/s)", "(GB/s)", ""]);
        }
        // The wider layout's header lines end with a blank.
        let tail = if self.wide { " " } else { "" };
        out.extend([top.into(), cols.end(tail), units.end(tail)]);
        out
    }

    fn line(&self, cells: &[Option<&Row>]) -> String {
        let Some(first) = cells.iter().flatten().next() else {
            return String::new();
        };
        let mut line = Line::new("", SEP).rights(
            &CASE,
            [
                first.bytes.to_string(),
                first.count.to_string(),
                first.dtype.clone(),
                redop(first).to_string(),
                first.root.to_string(),
            ],
        );
        let mut whole = true;
        for placement in ["out", "in"] {
            let column = self.placements.iter().position(|p| p == placement);
            let cell = column.and_then(|i| cells.get(i).copied().flatten());
            // Missing where the results have the placement at all.
            whole &= cell.is_some() || column.is_none();
            let (widths, digits) = self.widths();
            // The wider layout prints an unchecked `N/A` a column narrower
            // than a count (as nccl-tests 2.17 does).
            let narrow = [widths[0], widths[1], widths[2], widths[3] - 1];
            let unchecked = self.wide && cell.is_some_and(|r| r.wrong < 0);
            line = line.placement(if unchecked { &narrow } else { widths }, cell, digits);
        }
        let line: String = line.into();
        if whole {
            return line;
        }
        // A case the run did not finish (a placement's dashes): a comment,
        // as no nccl-tests data line has a dash where a number goes.
        match line.strip_prefix(' ') {
            Some(rest) => format!("#{rest}"),
            None => format!("# {line}"),
        }
    }

    fn close(&self, rows: &[Row], meta: Option<&Meta>, stopped: Option<&Partial>) -> Vec<String> {
        let (bad, _) = bad_values(rows);
        // A log's own average where it printed one (its rows keep too few
        // digits of busbw to recompute it exactly, and a stopped run's
        // counted the case it stopped in).
        let average = |rows: &[Row]| {
            meta.and_then(|m| m.log_avg_busbw.clone())
                .unwrap_or_else(|| fmt_g(avg_busbw(rows)))
        };
        let Some(first) = rows.first() else {
            // Stopped in the section's first case: its header is out, and
            // log parsers must not read the silence as a pass.
            return match stopped {
                Some(p) => vec![
                    format!("# Out of bounds values : 0 FAILED ({p})"),
                    format!("# Avg bus bandwidth    : {} ", average(rows)),
                    "#".into(),
                ],
                None => Vec::new(),
            };
        };
        if let Some(p) = stopped {
            // Not concluded: nccl-tests' log parsers read "0 OK" as a pass.
            return vec![
                algorithm_line(rows),
                format!("# Out of bounds values : {bad} FAILED ({p})"),
                format!("# Avg bus bandwidth    : {} ", average(rows)),
                "#".into(),
            ];
        }
        // A log's run whose footer said FAILED stays failed, with its count.
        let logged = meta.and_then(|m| m.log_out_of_bounds);
        let bad = logged.map_or(bad, |n| bad.max(n as i64));
        vec![
            algorithm_line(rows),
            format!(
                "# Out of bounds values : {bad} {}",
                if bad > 0 || logged.is_some() {
                    "FAILED"
                } else {
                    "OK"
                }
            ),
            format!(
                "# Avg bus bandwidth    : {} {}",
                average(rows),
                match meta.map(|m| (m.nccl_tests_min_bw, m.log_avg_ok)) {
                    Some((Some(min), _)) if below_min_bw(rows, min) => "FAILED",
                    Some((Some(_), _)) => "OK",
                    // A log's run: its own check, as it said it.
                    Some((None, Some(false))) => "FAILED",
                    Some((None, Some(true))) => "OK",
                    _ => "",
                }
            ),
            "#".into(),
            format!(
                "# Collective test concluded: {}",
                perf_binary(&first.collective)
            ),
            "#".into(),
        ]
    }

    fn footer(&self, results: &Results, opened: bool) -> Vec<String> {
        if results.rows.is_empty() && !opened {
            // A run that failed before its first row (a log's NCCL init
            // failure): its header as it was, and no pass. (A live run
            // that stopped in its first case closed its open section.)
            let m = &results.meta;
            let mut out = Vec::new();
            if m.command.ends_with("_perf") {
                out.push(format!("# Collective test starting: {}", m.command));
            }
            out.extend(m.nccl_tests_header.iter().cloned());
            out.extend(self.close(&[], Some(m), m.partial.as_ref()));
            return out;
        }
        results
            .rows
            .iter()
            .filter_map(|r| {
                r.first_error.as_ref().map(|e| {
                    format!(
                        "# first wrong value in {} {} {} {} {}B ({}): {e}",
                        r.collective, r.algo, r.dtype, r.op, r.bytes, r.placement
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{results, row};
    use crate::report::text::fmt_time;
    use crate::report::text::{placements_of, render_with, sizes_of};

    fn render(r: &Results) -> String {
        let layout = NcclTests::new(placements_of(&r.rows), sizes_of(&r.rows), false);
        render_with(Box::new(layout), r)
    }

    /// A world of millions makes up a few thousand rank lines and says
    /// the rest in one (it printed hundreds of megabytes).
    #[test]
    fn made_up_rank_lines_stop_at_a_limit() {
        let mut r = results(vec![row(8, "out"), row(8, "in")]);
        r.meta.world_size = 4_194_304;
        let text = render(&r);
        assert_eq!(text.matches("#  Rank ").count(), RANK_LINES);
        assert!(text.contains("#  Rank 4095 Group"), "{}", &text[..400]);
        assert!(text.contains("\n#  Ranks 4096 to 4194303: not shown"));
        r.meta.world_size = 3;
        let text = render(&r);
        assert_eq!(text.matches("#  Rank ").count(), 3);
        assert!(!text.contains("not shown"));
    }

    #[test]
    fn gpus_show_their_bus_id_and_cuda_name_and_ranks_their_process() {
        let mut r = results(vec![row(8, "out"), row(8, "in")]);
        r.meta.world_size = 3;
        r.meta.pid = 4242;
        r.meta.gpus = vec![
            crate::report::Gpu {
                name: "NVIDIA H100 80GB HBM3".into(),
                bus_id: "0000:1b:00".into(),
            },
            crate::report::Gpu {
                name: "NVIDIA H100 80GB HBM3".into(),
                bus_id: "0000:43:00".into(),
            },
        ];
        let text = render(&r);
        let devices: Vec<&str> = text.lines().filter(|l| l.starts_with("#  Rank")).collect();
        assert_eq!(devices.len(), 3, "{text}");
        assert!(
            devices[0]
                .ends_with("Pid   4242 on      node1 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3"),
            "{}",
            devices[0]
        );
        assert!(
            devices[1].contains("device  1 [0000:43:00]"),
            "{}",
            devices[1]
        );
        assert!(
            devices[2].contains("device  0 [0000:1b:00]"),
            "virtual ranks share: {}",
            devices[2]
        );
    }

    #[test]
    fn an_unfinished_run_is_not_concluded() {
        let mut r = results(vec![row(8, "out"), row(8, "in")]);
        let done = render(&r);
        assert!(done.contains("# Out of bounds values : 0 OK"), "{done}");
        r.meta.partial = Some(Partial {
            reason: crate::report::StopReason::Signal,
            missing_rows: 6,
            in_case: None,
        });
        let text = render(&r);
        assert!(
            text.contains(
                "# Out of bounds values : 0 FAILED (run interrupted: signal, 6 row(s) missing)"
            ),
            "{text}"
        );
        assert!(
            !text.contains("concluded") && !text.contains(" OK"),
            "{text}"
        );
        // A case stopped between its placements: a comment, never a data
        // line with dashes where a parser reads numbers.
        let mut cut = results(vec![row(8, "out"), row(8, "in"), row(16, "out")]);
        cut.meta.partial = r.meta.partial.clone();
        let text = render(&cut);
        let data: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(data.len(), 1, "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("#         16 ") && l.ends_with("      -")),
            "{text}"
        );
    }

    /// A live run stopped in its first case (its section's header out, no
    /// row) closes that section once: the footer does not print the run's
    /// header and close again, as it does for a log that failed before any.
    #[test]
    fn a_run_stopped_in_its_first_case_has_one_footer() {
        let mut r = results(Vec::new());
        r.meta.command = "all_reduce_perf".into();
        r.meta.partial = Some(Partial {
            reason: crate::report::StopReason::Hang,
            missing_rows: 6,
            in_case: None,
        });
        let layout = NcclTests::new(vec!["out".into(), "in".into()], vec![8], false);
        let mut lines = crate::report::text::Lines::new(Box::new(layout));
        let mut out = lines.start(&r.meta);
        out.extend(lines.case(&row(8, "out")));
        out.extend(lines.finish(&r));
        let text = out.join("\n");
        assert_eq!(text.matches("# Out of bounds values").count(), 1, "{text}");
        assert_eq!(text.matches("# Avg bus bandwidth").count(), 1, "{text}");
        assert!(text.contains("FAILED (run interrupted: hang, 6 row(s) missing)"));
        // Re-rendered, a log's run that failed before its first case keeps
        // its header and its one footer.
        let again = render(&r);
        assert_eq!(
            again.matches("# Out of bounds values").count(),
            1,
            "{again}"
        );
    }

    #[test]
    fn g_format_matches_printf() {
        assert_eq!(fmt_g(197.8), "197.8");
        assert_eq!(fmt_g(346.2514), "346.251");
        assert_eq!(fmt_g(43.28791), "43.2879");
        assert_eq!(fmt_g(0.0), "0");
        assert_eq!(fmt_g(0.000123), "0.000123");
        assert_eq!(fmt_g(0.0000123), "1.23e-05");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
    }

    #[test]
    fn times_and_steps_as_nccl_tests() {
        let cell = |us| {
            String::from(
                Line::new("", "").right(PLACEMENT[0], fmt_time(us, TimeDigits::NCCL_TESTS)),
            )
        };
        assert_eq!(cell(48.812), "  48.81");
        assert_eq!(cell(2374.14), " 2374.1");
        assert_eq!(cell(173736.2), " 173736");
        assert_eq!(step(&[8, 64, 512]), "8(factor)");
        assert_eq!(step(&[1024, 2048, 3072]), "1024(bytes)");
        assert_eq!(step(&[8]), "2(factor)");
        // Sizes 8 apart from 8: 16 is a multiple of 8, 24 is not of 16.
        assert_eq!(step(&[8, 16, 24, 32]), "8(bytes)");
        assert_eq!(perf_binary("all-to-all"), "alltoall_perf");
        assert_eq!(perf_binary("reduce-scatter"), "reduce_scatter_perf");
    }

    #[test]
    fn layout_is_what_nccl_tests_parsers_expect() {
        let mut bad = row(2048, "in");
        bad.wrong = 3;
        let r = results(vec![
            row(1024, "out"),
            row(1024, "in"),
            row(2048, "out"),
            bad,
        ]);
        let text = render(&r);
        let lines: Vec<&str> = text.lines().collect();
        let header = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong";
        assert!(lines.contains(&header), "{text}");
        assert!(text.contains("# nThread 1 nGpus 4 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 5 iters: 20"), "{text}");
        assert!(
            text.contains("#  Rank  3 Group  0 Pid      0 on      node1 device  3 [host] Test CPU"),
            "{text}"
        );
        // Ranks that are processes: one rank a process, each its own line.
        let mut spread = r.clone();
        spread.meta.processes = (0..4)
            .map(|k| crate::report::Process {
                pid: 100 + k,
                host: format!("n{}", k / 2),
            })
            .collect();
        let spread = render(&spread);
        assert!(
            spread.contains("# nThread 1 nGpus 1 minBytes 1024"),
            "{spread}"
        );
        assert!(
            spread
                .contains("#  Rank  3 Group  0 Pid    103 on         n1 device  3 [host] Test CPU"),
            "{spread}"
        );
        let data: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| !l.starts_with('#'))
            .collect();
        assert_eq!(data.len(), 2);
        assert_eq!(
            data[0],
            "        1024           256     float     sum      -1    10.00    0.10    0.15      0    10.00    0.10    0.15      0"
        );
        assert_eq!(data[1].split_whitespace().count(), 13);
        assert!(
            lines.contains(&"# Out of bounds values : 3 FAILED"),
            "{text}"
        );
        assert!(
            text.contains("# Avg bus bandwidth    : 0.2304 \n#\n"),
            "{text}"
        );
    }

    #[test]
    fn one_block_per_algorithm() {
        let mut tree = row(1024, "out");
        tree.algo = "tree".into();
        let r = results(vec![row(1024, "out"), tree]);
        // Several algorithms per case (`--algo all`): one run each.
        let layout = NcclTests::new(placements_of(&r.rows), sizes_of(&r.rows), true);
        let text = render_with(Box::new(layout), &r);
        assert_eq!(
            text.matches("# Collective test starting: all_reduce_perf")
                .count(),
            2
        );
        assert_eq!(text.matches("# Avg bus bandwidth").count(), 2);
        let data = text.lines().find(|l| !l.starts_with('#')).unwrap();
        assert!(data.ends_with("      -"), "missing in-place dashes: {text}");
        assert_eq!(data.split_whitespace().count(), 13);
    }
}
