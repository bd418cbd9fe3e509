//! A run read from a log into collbench's results: the collective (from
//! the log's own line, else the rows' shape and the file's name), the
//! types and operators in collbench's names, and `meta` from the header.

use super::*;

/// collbench's name of an nccl-tests type (`char` -> `int8`, `int` ->
/// `int32`, `uint` -> `uint32`; the rest are the same names).
pub fn dtype_name(nccl: &str) -> String {
    match nccl {
        "char" => "int8".into(),
        "int" => "int32".into(),
        "uint" => "uint32".into(),
        "fp16" => "half".into(),
        "bf16" => "bfloat16".into(),
        other => other.to_string(),
    }
}

pub(super) fn elem_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "int8" | "uint8" | "f8e4m3" | "f8e5m2" => 1,
        "half" | "bfloat16" => 2,
        "int32" | "uint32" | "float" => 4,
        "int64" | "uint64" | "double" => 8,
        _ => return None,
    })
}

/// collbench's name of an nccl-tests binary (`alltoall_perf` -> `all-to-all`).
pub fn collective_of_binary(binary: &str) -> String {
    let stem = binary.rsplit('/').next().unwrap_or(binary);
    let stem = stem.strip_suffix("_perf").unwrap_or(stem);
    match stem {
        "alltoall" => "all-to-all".into(),
        "alltoallv" => "all-to-all-v".into(),
        "sendrecv" => "send-recv".into(),
        s => s.replace('_', "-"),
    }
}

/// The collective a file name names (`sb_nccl_alltoall.log` -> `all-to-all`).
pub fn collective_of_name(name: &str) -> Option<&'static str> {
    let squashed: String = name
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    // Longer names first: `allreduce` holds `reduce`, `allgather` `gather`.
    [
        ("allreduce", "all-reduce"),
        ("allgather", "all-gather"),
        ("reducescatter", "reduce-scatter"),
        ("alltoallv", "all-to-all-v"),
        ("alltoall", "all-to-all"),
        ("sendrecv", "send-recv"),
        ("broadcast", "broadcast"),
        ("gather", "gather"),
        ("scatter", "scatter"),
        ("reduce", "reduce"),
    ]
    .into_iter()
    .find(|(k, _)| squashed.contains(k))
    .map(|(_, v)| v)
}

pub(super) const REDUCTIONS: [&str; 7] =
    ["sum", "prod", "min", "max", "avg", "mulsum", "premulsum"];

/// The collectives the rows' shape allows, most likely first: the redop and
/// root, the count against the size (the whole buffer per rank, or a
/// 1/ranks share) and busbw against algbw (nccl-tests' factors).
pub(super) fn shape_candidates(run: &LogRun, ranks: u64) -> Vec<&'static str> {
    let Some(first) = run.rows.first() else {
        return Vec::new();
    };
    let reduction = REDUCTIONS.contains(&first.op.as_str());
    let n = ranks.max(1);
    let sample = run.rows.iter().find_map(|r| {
        let es = elem_size(&dtype_name(&r.dtype))?;
        // u128: a count of a row edited past reason cannot wrap into a
        // shape it does not have.
        (r.bytes > 0 && r.count > 0)
            .then_some((u128::from(r.bytes), u128::from(r.count) * u128::from(es)))
    });
    let (whole, split) = match sample {
        Some((bytes, per_rank)) => (per_rank == bytes, per_rank * u128::from(n) == bytes),
        None => (true, true),
    };
    let factor = run
        .rows
        .iter()
        .map(|r| &r.out)
        .filter(|c| c.algbw_gbps > 0.0)
        .max_by(|a, b| a.algbw_gbps.total_cmp(&b.algbw_gbps))
        .map(|c| c.busbw_gbps / c.algbw_gbps);
    let nf = n as f64;
    let fits = |f: f64| factor.is_none_or(|x| (x - f).abs() <= 0.05 * f.max(0.1));
    let (all, share, one) = (
        fits(2.0 * (nf - 1.0) / nf),
        fits((nf - 1.0) / nf),
        fits(1.0),
    );
    let mut out = Vec::new();
    let mut add = |ok: bool, names: &[&'static str]| {
        if ok {
            for c in names {
                if !out.contains(c) {
                    out.push(*c);
                }
            }
        }
    };
    match (first.root >= 0, reduction) {
        (true, true) => add(one, &["reduce"]),
        (true, false) => {
            add(whole && one, &["broadcast"]);
            add(split && share, &["gather", "scatter"]);
        }
        (false, true) => {
            add(whole && all, &["all-reduce"]);
            add(split && share, &["reduce-scatter"]);
            add(whole && one, &["send-recv"]);
        }
        (false, false) => {
            add(split && share, &["all-gather", "all-to-all"]);
            add(whole && one, &["send-recv"]);
        }
    }
    out
}

impl LogRun {
    /// The run's collective (collbench's name) and, when it was guessed,
    /// why. `name`: the log's file name, a hint.
    pub fn collective(&self, name: &str) -> Result<(String, Option<String>), LogError> {
        if let Some(b) = &self.binary {
            return Ok((collective_of_binary(b), None));
        }
        let hint = collective_of_name(name);
        let shape = shape_candidates(self, self.world_size() as u64);
        if let Some(h) = hint.filter(|h| shape.is_empty() || shape.contains(h)) {
            return Ok((h.to_string(), None));
        }
        match shape.as_slice() {
            [one] => Ok((one.to_string(), None)),
            [first, ..] => Ok((
                first.to_string(),
                Some(format!(
                    "collective guessed: the log does not name it and its rows fit {}",
                    shape.join(" or ")
                )),
            )),
            [] => Err(LogError::Whole(format!(
                "cannot tell which collective the run at line {} measured (no `# Collective test starting` line, and neither its rows nor the file name say)",
                self.lines.start + 1
            ))),
        }
    }

    /// The run as collbench results: one row per size and placement (out of
    /// place first), engine [`ENGINE`], algo [`ALGO`]. `source`: the log's
    /// path as shown; `index`, `of`: which run of the file this is.
    pub fn to_results(&self, source: &str, index: usize, of: usize) -> Result<Results, LogError> {
        let name = source.rsplit(['/', '\\']).next().unwrap_or(source);
        let most = crate::report::json::MAX_WORLD_SIZE;
        if self.world_size() > most {
            return Err(LogError::At {
                line: self.lines.start + 1,
                what: format!(
                    "the run's header says {} ranks (nThread x nGpus): a run has from 1 to {most}",
                    self.header
                        .as_ref()
                        .map_or(0, |h| u128::from(h.nthread.unwrap_or(0))
                            * u128::from(h.ngpus.unwrap_or(0)))
                ),
            });
        }
        // A run that failed before its first row has no row to name.
        let (collective, guessed) = match (self.rows.is_empty(), self.collective(name)) {
            (true, Err(_)) => (String::new(), None),
            (_, known) => known?,
        };
        let rows = self.rows_as(&collective);
        let mut notes = vec![format!(
            "read from the nccl-tests log {source} (run {} of {of}, line {})",
            index + 1,
            self.lines.start + 1
        )];
        if let Some(h) = &self.header {
            notes.push(format!("nccl-tests header: {}", h.line));
        }
        notes.extend(guessed);
        if self.columns.cputime {
            notes.push(
                "its times are the host's CPU time per operation (`cputime`, nccl-tests -C), not the GPU's"
                    .into(),
            );
        }
        notes.extend(self.rank_lines_note());
        notes.extend(self.ending_notes());
        Ok(Results::new(self.meta(&collective, notes), rows))
    }

    /// The run's rows as collbench's, out-of-place then in-place.
    fn rows_as(&self, collective: &str) -> Vec<Row> {
        let mut rows = Vec::with_capacity(self.rows.len() * 2);
        for r in &self.rows {
            for (placement, c) in [("out", &r.out), ("in", &r.inplace)] {
                rows.push(Row {
                    collective: collective.to_string(),
                    engine: ENGINE.into(),
                    algo: ALGO.into(),
                    dtype: dtype_name(&r.dtype),
                    // sendrecv_perf prints an unused `sum`: send-recv reduces nothing.
                    op: if r.op.is_empty() || collective == "send-recv" {
                        "none".into()
                    } else {
                        // nccl-tests' `mulsum` is collbench's premulsum.
                        match r.op.as_str() {
                            "mulsum" => "premulsum".into(),
                            op => op.to_string(),
                        }
                    },
                    root: r.root,
                    bytes: r.bytes,
                    count: r.count,
                    placement: placement.into(),
                    time_us: c.time_us,
                    algbw_gbps: c.algbw_gbps,
                    busbw_gbps: c.busbw_gbps,
                    wrong: c.wrong.unwrap_or(-1),
                    nan: -1,
                    stats: Stats {
                        p50_us: c.time_us,
                        p99_us: c.time_us,
                        min_us: c.time_us,
                        max_us: c.time_us,
                        outliers: 0,
                    },
                    per_rank_us: Vec::new(),
                    first_error: None,
                    last_arrival: None,
                    scalar: None,
                    predicted_us: None,
                    auto_pick: None,
                    split: None,
                    members: Vec::new(),
                    group_member: None,
                });
            }
        }
        rows
    }

    /// Device lines that do not name ranks 0 to n-1 once each (a log
    /// edited, or two runs' lines mixed): which they name, and the world
    /// taken from them.
    pub(super) fn rank_lines_note(&self) -> Option<String> {
        let named: Vec<usize> = self.ranks.iter().map(|r| r.rank as usize).collect();
        let mut sorted = named.clone();
        sorted.sort_unstable();
        if sorted.iter().enumerate().all(|(i, &r)| i == r) {
            return None;
        }
        Some(format!(
            "the device lines name {} in that order, not ranks 0 to n-1 once each: the world is taken as the {} distinct ones",
            crate::units::ranks_text(&named),
            self.world_size()
        ))
    }

    /// How the run failed or stopped, if it did.
    fn ending_notes(&self) -> impl Iterator<Item = String> + '_ {
        let failed = self.failure.iter().map(|f| format!("the test failed: {f}"));
        let stopped = self
            .stopped
            .iter()
            .map(|s| format!("the run did not finish: {s}"));
        failed.chain(stopped)
    }

    /// The results' meta for the run of `collective`, with `notes`.
    fn meta(&self, collective: &str, notes: Vec<String>) -> Meta {
        let mut hosts: Vec<&str> = Vec::new();
        for r in &self.ranks {
            if !hosts.contains(&r.host.as_str()) {
                hosts.push(&r.host);
            }
        }
        let header = self.header.as_ref();
        let agg = header
            .and_then(|h| h.agg_iters)
            .filter(|&m| (1..=1 << 20).contains(&m))
            .unwrap_or(1);
        Meta {
            version: self
                .version
                .as_ref()
                .map_or_else(|| "nccl-tests".into(), |v| format!("nccl-tests {v}")),
            command: self
                .binary
                .clone()
                .unwrap_or_else(|| crate::report::nccl::perf_binary(collective)),
            host: hosts.join(","),
            started_at: String::new(),
            world_size: self.world_size(),
            device: device_of(&self.ranks).into(),
            devices: self
                .ranks
                .iter()
                .map(|r| {
                    format!(
                        "{} [{}] (rank {}, pid {} on {}, device {})",
                        r.name, r.bus, r.rank, r.pid, r.host, r.device
                    )
                })
                .collect(),
            // Every timed operation, as a sweep's meta counts them.
            iters: header
                .and_then(|h| h.iters)
                .unwrap_or(0)
                .saturating_mul(agg) as usize,
            warmup: header.and_then(|h| h.warmup).unwrap_or(0) as usize,
            seed: 0,
            // nccl-tests -C: the host's CPU time around each operation.
            timing: if self.columns.cputime { "cpu" } else { "wall" }.into(),
            notes,
            nccl: self.nccl.clone(),
            pid: self.ranks.first().map_or(0, |r| r.pid as u32),
            log_avg_busbw: self.avg_text.clone(),
            // A footer that failed the test; not one that says the run
            // stopped (that is `partial`).
            log_out_of_bounds: self
                .out_of_bounds
                .filter(|(_, ok)| !ok && self.stopped.is_none())
                .map(|(n, _)| n),
            log_avg_ok: self.avg_ok,
            // Its own header line, printed again as it was.
            nccl_tests_header: header.map(|h| format!("# {}", h.line)),
            nccl_tests_min_bw: None,
            sizes: Vec::new(),
            nccl_tests_devices: self.ranks.iter().map(|r| r.line.clone()).collect(),
            nccl_tests_wide: self.wide,
            agg_iters: agg as usize,
            graph: header.and_then(|h| h.graph).is_some_and(|g| g > 0),
            protocol: None,
            channels: None,
            // Every version prints its footer after the last row; a
            // collbench text of a run that stopped says how.
            partial: (!self.finished()).then(|| {
                self.stopped.as_deref().and_then(stopped_partial).unwrap_or(
                    crate::report::Partial {
                        reason: crate::report::StopReason::Truncated,
                        missing_rows: 0,
                        in_case: None,
                    },
                )
            }),
            gpus: self
                .ranks
                .iter()
                .map(|r| crate::report::Gpu {
                    name: r.name.clone(),
                    bus_id: r.bus.clone(),
                })
                .collect(),
            // Its device lines, kept as printed, show each rank's process.
            processes: Vec::new(),
        }
    }
}

/// The device a log's ranks ran on, as results name it: collbench's own
/// text writes the host engine's ranks as `[host]` and the emulated GPUs'
/// bus ids as `emu:...`; any other device line is a GPU's.
fn device_of(ranks: &[RankLine]) -> &'static str {
    let all = |f: fn(&str) -> bool| !ranks.is_empty() && ranks.iter().all(|r| f(&r.bus));
    if all(|b| b == "host") {
        "host"
    } else if all(|b| b.starts_with("emu:")) {
        "cuda-emu"
    } else {
        "cuda"
    }
}

/// An nccl-tests log's text as collbench results, one per run that has
/// rows or that did not finish (a run that failed before its first row,
/// an NCCL init failure, is a run without rows whose meta says it did not
/// finish: never left out). `source`: the path as shown (its file name
/// hints the collective).
pub fn read_log(text: &str, source: &str) -> Result<Vec<Results>, LogError> {
    // A log that ends mid-line (a job killed as it printed, a live log
    // copied) ends in a torn row, whose numbers are not what nccl-tests
    // printed: left out, and its run, which has no footer, is unfinished.
    // A torn average (`343.554` cut to `34`) is left out likewise.
    let torn = if text.ends_with('\n') {
        None
    } else {
        text.lines().next_back().and_then(|l| {
            let l = untagged(l);
            // nccl-tests ends the average's number with a blank, then its
            // check's word if any: a line ending otherwise was cut.
            let whole = l.ends_with(' ') || l.ends_with("OK") || l.ends_with("FAILED");
            match classify(l, 0, &super::Columns::default()) {
                Line::Row(_) | Line::BadRow(_) | Line::BadFooter(_) => Some("a row"),
                _ if l.trim_start().starts_with("# Avg bus bandwidth") && !whole => {
                    Some("the average bus bandwidth")
                }
                _ => None,
            }
        })
    };
    let text = if torn.is_some() {
        &text[..text.rfind('\n').map_or(0, |i| i + 1)]
    } else {
        text
    };
    let runs: Vec<LogRun> = parse_log(text)
        .into_iter()
        .filter(|r| {
            !r.rows.is_empty()
                || !r.bad_lines.is_empty()
                || (!r.finished() && (r.header.is_some() || r.binary.is_some()))
        })
        .collect();
    // A row left out would be a size missing from a report, or a check
    // that never saw it; a footer passed over may hide a failed test:
    // refused, naming the line.
    if let Some(&(line, what)) = runs.iter().flat_map(|r| &r.bad_lines).next() {
        return Err(LogError::At {
            line,
            what: what.into(),
        });
    }
    // A run stopped before its first row finished (a hang, a signal: its
    // footer says so) reads as the run that did not finish it is.
    if runs
        .iter()
        .all(|r| r.rows.is_empty() && r.stopped.is_none())
    {
        let failure = runs.iter().find_map(|r| r.failure.as_deref());
        return Err(LogError::Whole(match failure {
            Some(f) => format!("an nccl-tests log without data rows; it failed: {f}"),
            None => "an nccl-tests log without data rows".into(),
        }));
    }
    let of = runs.len();
    let mut all: Vec<Results> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| r.to_results(source, i, of))
        .collect::<Result<_, _>>()?;
    if let (Some(what), Some(last)) = (torn, all.last_mut()) {
        last.meta.notes.push(format!(
            "the log's last line, {what}, is cut short (no newline at its end): left out"
        ));
    }
    Ok(all)
}
