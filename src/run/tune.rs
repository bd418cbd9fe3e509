//! `collbench tune` (fit the cost model from a sweep here) and `collbench
//! model` (predict a sweep at any scale from a table or a link's figures).

use super::{choose_device, execute, fail, meta, one_line, paths, setup, sinks};
use crate::cli::{plan, ModelArgs, TuneArgs};
use crate::engine::algo::cost;
use crate::engine::types::Collective;
use crate::harness::tuning::{Choice, Entry, Point, Tuning, TuningMeta};
use crate::recorder::watchdog;
use crate::report::{Results, Row, Sink};
use crate::units::Bytes;
use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub fn tune(a: &TuneArgs) -> i32 {
    tune_inner(a).unwrap_or_else(|e| fail(one_line(&e)))
}

fn tune_inner(a: &TuneArgs) -> anyhow::Result<i32> {
    if crate::units::is_stdout(&a.output) {
        bail!(
            "--output {}: the table goes to a file (its fit is printed on stdout as it is made); name one",
            a.output.display()
        );
    }
    if !a.from.is_empty() {
        return tune_from(a);
    }
    if let Some((launcher, n)) = crate::launch::foreign_launcher() {
        bail!(
            "tune runs its sweep in one process (thread ranks, or the GPUs of one host), but {launcher} \
             started {n} tasks: run it once, or sweep under {launcher} with --json and fit that with \
             `collbench tune --from RESULTS.json`"
        );
    }
    if a.run.procs.is_some() {
        bail!(
            "tune runs its sweep in one process (thread ranks, or the GPUs of one host): sweep with \
             --procs N --json and fit that with `collbench tune --from RESULTS.json`"
        );
    }
    if a.run.tuning.is_some() {
        bail!(
            "tune fits a table and --tuning reads one: drop --tuning (tune sweeps every algorithm)"
        );
    }
    watchdog::install_signal_handlers();
    let mut s = plan::build_tune(a)?;
    super::thread_rank_settings(&mut s)?;
    super::check_thread_ranks(&s.plan, None)?;
    super::check_paths(&s, true, &[("--output", a.output.as_path())])?;
    let chosen = choose_device(&s, None)?;
    chosen.tell();
    let meta = meta(&s, &chosen);
    let setup = setup(&s.plan, &chosen, &meta, None)?;
    // The table shows what is measured; the fit needs every row.
    s.quiet = s.quiet || s.verbose == 0;
    let mut sink = sinks(&s, true)?;
    sink.start(&meta).context("writing results")?;
    let result = execute(&s.plan, &setup, &mut sink, None);
    let rows = std::mem::take(&mut sink.rows);
    // The sweep's files say how it ended, as a sweep's do.
    let mut run_meta = meta.clone();
    run_meta.partial = super::partial_of(&result, &s.plan, rows.len());
    let results = Results::new(run_meta, rows);
    if result.as_ref().is_err_and(|e| e.partial().is_none()) {
        sink.abandon(&results).context("writing results")?;
    } else {
        sink.finish(&results).context("writing results")?;
    }
    // Its exit code too: 1 for wrong values, 3 for a hang, 130 for a signal.
    let code = super::exit_code(result, 0);
    if code != super::OK {
        say!("collbench: tune: the sweep did not finish clean: no table written");
        return Ok(code);
    }
    let protocol = match (meta.device.as_str(), s.plan.model_protocol()) {
        ("host", _) => "host",
        (_, Some(p)) => p,
        (_, None) => "auto",
    };
    let tmeta = TuningMeta {
        version: meta.version.clone(),
        created_at: meta.started_at.clone(),
        host: meta.host.clone(),
        device: meta.device.clone(),
        command: meta.command.clone(),
        dtype: s.plan.dtypes.first().map_or("float", |d| d.name()).into(),
        iters: s.plan.iters,
    };
    let mut groups = points(
        &results.rows,
        &tmeta.dtype,
        protocol,
        s.plan.channels,
        s.plan.ranks,
    );
    // `--root all`: a point a root at each size, made one.
    for (_, _, pts) in &mut groups {
        *pts = median_by_size(std::mem::take(pts));
    }
    write_table(a, Tuning::fit(tmeta, &groups), s.data_on_stdout())
}

/// `tune --from`: the fit of saved results.
fn tune_from(a: &TuneArgs) -> anyhow::Result<i32> {
    // The sweep's options are refused with --from as the command line is
    // read (`cli::parse_from`).
    paths::check_outputs(&[("--output", a.output.as_path())], &a.from)?;
    let mut groups: Vec<(Choice, usize, Vec<Point>)> = Vec::new();
    let mut tmeta = TuningMeta::default();
    let mut commands = Vec::new();
    let mut first: Option<(String, String)> = None;
    // The collectives the files hold, for a `--collective` that took none.
    let mut held: std::collections::BTreeSet<String> = Default::default();
    for p in &a.from {
        let r = read_from(p)?;
        held.extend(
            r.rows
                .iter()
                .filter(|row| Collective::parse(&row.collective).is_some())
                .map(|row| row.collective.clone()),
        );
        let m = &r.meta;
        let ran_on = ran_on(m);
        match &first {
            Some(f) if *f != ran_on => bail!(
                "--from {}: ran on {} ({}), and the files before it on {} ({}): one table fits one machine; tune each on its own",
                p.display(),
                ran_on.0,
                ran_on.1,
                f.0,
                f.1
            ),
            Some(_) => {}
            None => first = Some(ran_on),
        }
        // The protocol and channels `--protocol` and `--channels` fixed
        // (results older than those keys: the engine's pick).
        let protocol = match (m.device.as_str(), m.protocol.as_deref()) {
            ("host", _) => "host",
            (_, Some(p)) => p,
            (_, None) => "auto",
        };
        let channels = m.channels.unwrap_or(0);
        // The first file's type holds for every file: a table fits one.
        let dtype = if commands.is_empty() {
            r.rows
                .iter()
                .find(|r| r.engine == "builtin")
                .map_or("float", |r| r.dtype.as_str())
                .to_string()
        } else {
            tmeta.dtype.clone()
        };
        let wanted: Vec<Row> = r
            .rows
            .iter()
            .filter(|row| {
                Collective::parse(&row.collective).is_some_and(|c| a.collective.0.contains(&c))
            })
            .cloned()
            .collect();
        merge(
            &mut groups,
            points(&wanted, &dtype, protocol, channels, m.world_size),
        );
        if commands.is_empty() {
            tmeta = TuningMeta {
                version: m.version.clone(),
                created_at: m.started_at.clone(),
                host: m.host.clone(),
                device: m.device.clone(),
                command: String::new(),
                dtype,
                iters: 0,
            };
        }
        commands.push(m.command.clone());
    }
    let asked: Vec<&str> = a.collective.0.iter().map(|c| c.name()).collect();
    if groups.is_empty() && !held.is_empty() && !held.iter().any(|h| asked.contains(&h.as_str())) {
        let held: Vec<&str> = held.iter().map(String::as_str).collect();
        bail!(
            "--from: no rows of {} (--collective; all-reduce by default) in the results, which hold {}: name those with --collective",
            asked.join(", "),
            held.join(", ")
        );
    }
    let me = crate::units::command_line();
    tmeta.command = format!("{me} (from: {})", commands.join("; "));
    for (_, _, pts) in &mut groups {
        *pts = median_by_size(std::mem::take(pts));
    }
    write_table(a, Tuning::fit(tmeta, &groups), false)
}

/// The results of `tune --from`'s file `p`: collbench's own (its first
/// run), a run that did not finish said.
fn read_from(p: &std::path::Path) -> anyhow::Result<Results> {
    let runs =
        crate::report::json::read_any(p).with_context(|| format!("--from {}", p.display()))?;
    if runs
        .iter()
        .flat_map(|r| &r.rows)
        .any(|r| r.engine == crate::report::nccl_log::ENGINE)
    {
        bail!(
            "--from {}: an nccl-tests log; tune fits collbench's own algorithms, from collbench results (the JSON or JSONL of a sweep)",
            p.display()
        );
    }
    let Some(r) = runs.into_iter().next() else {
        bail!("--from {}: no results in it", p.display());
    };
    if let Some(why) = &r.meta.partial {
        // Its finished rows are measurements all the same; said, since
        // the sizes it never reached are fitted from fewer points.
        say!(
            "collbench: warning: --from {}: the run did not finish ({why}); fitting its {} finished row(s)",
            p.display(),
            r.rows.len()
        );
    }
    Ok(r)
}

/// What ran a saved sweep: the engine's device, and the hardware under it.
fn ran_on(m: &crate::report::Meta) -> (String, String) {
    let machine = if m.gpus.is_empty() {
        m.devices.first().cloned().unwrap_or_default()
    } else {
        let mut names: Vec<&str> = m.gpus.iter().map(|g| g.name.as_str()).collect();
        names.dedup();
        names.join(", ")
    };
    (m.device.clone(), machine)
}

/// Adds a file's points to `groups`: the same choice on the same ranks in
/// several files is one entry, fitted on all of their sizes.
fn merge(groups: &mut Vec<(Choice, usize, Vec<Point>)>, more: Vec<(Choice, usize, Vec<Point>)>) {
    for (choice, ranks, pts) in more {
        match groups
            .iter_mut()
            .find(|(c, n, _)| *c == choice && *n == ranks)
        {
            Some((_, _, all)) => all.extend(pts),
            None => groups.push((choice, ranks, pts)),
        }
    }
}

/// One point per size: the median of the p50s measured at it (sizes run
/// in several files, or twice in one).
fn median_by_size(mut pts: Vec<Point>) -> Vec<Point> {
    pts.sort_by(|a, b| a.bytes.cmp(&b.bytes).then(a.p50_us.total_cmp(&b.p50_us)));
    pts.chunk_by(|a, b| a.bytes == b.bytes)
        .map(|same| {
            let n = same.len();
            let mid = if n % 2 == 1 {
                same[n / 2].p50_us
            } else {
                (same[n / 2 - 1].p50_us + same[n / 2].p50_us) / 2.0
            };
            Point {
                bytes: same[0].bytes,
                p50_us: mid,
            }
        })
        .collect()
}

/// Writes the fitted table; `data_on_stdout`: the sweep's `--json -` or
/// `--csv -` took stdout, so the fit is said on stderr.
fn write_table(a: &TuneArgs, table: Tuning, data_on_stdout: bool) -> anyhow::Result<i32> {
    if table.entries.is_empty() {
        bail!("tune: no clean out-of-place row of the builtin engine to fit (rows of groups are not fitted: a group times several operations)");
    }
    let text = serde_json::to_string_pretty(&table)?;
    // What `--tuning` and `model` would refuse is not written (results of
    // absurd times fit absurd latencies).
    if let Err(why) = Tuning::parse(&text) {
        bail!("tune: the fit is no table collbench reads ({why}): are the results' times from a working run?");
    }
    crate::units::write_atomic(&a.output, (text + "\n").as_bytes())
        .with_context(|| format!("--output {}", a.output.display()))?;
    if !a.run.out.quiet {
        let text = format!(
            "# fitted on {} ({})\n{}# wrote {}\n",
            table.meta.device,
            table.meta.host,
            render_entries(&table.entries),
            a.output.display()
        );
        if data_on_stdout {
            say_part!("{text}");
        } else {
            out_part!("{text}");
        }
    }
    Ok(super::OK)
}

/// Each (collective, algorithm)'s clean out-of-place p50s of the first
/// type and the first operator, by size (single operations only).
fn points(
    rows: &[Row],
    dtype: &str,
    protocol: &str,
    channels: usize,
    ranks: usize,
) -> Vec<(Choice, usize, Vec<Point>)> {
    // Per choice, the operator of its first row: a fit is of one
    // operation's time, so neither a group's rows (several operations) nor
    // a second operator's.
    let mut by: BTreeMap<(String, String), (String, Vec<Point>)> = BTreeMap::new();
    for r in rows {
        let clean = r.wrong <= 0 && r.nan <= 0;
        let single = r.group_member.is_none() && r.members.is_empty();
        if r.engine != "builtin" || r.placement != "out" || r.dtype != dtype || !clean || !single {
            continue;
        }
        let (op, points) = by
            .entry((r.collective.clone(), r.algo.clone()))
            .or_insert_with(|| (r.op.clone(), Vec::new()));
        if *op == r.op {
            points.push(Point {
                bytes: r.bytes,
                p50_us: r.stats.p50_us,
            });
        }
    }
    by.into_iter()
        .filter_map(|((c, a), (_, p))| {
            let choice = Choice {
                coll: Collective::parse(&c)?,
                algo: crate::engine::types::Algo::parse(&a)?,
                protocol: protocol.into(),
                channels,
            };
            Some((choice, ranks, p))
        })
        .collect()
}

fn render_entries(entries: &[Entry]) -> String {
    let mut t = String::from(
        "# collective      algo    protocol  channels  ranks  latency/hop (us)  peak bw (GB/s)  sizes\n",
    );
    let mut latency_only = Vec::new();
    for e in entries {
        if e.bandwidth.is_empty() {
            latency_only.push(format!("{} {}", e.collective, e.algo));
        }
        // 0: the channels the engine picked (`--channels auto`).
        let channels = match e.channels {
            0 => "auto".to_string(),
            n => n.to_string(),
        };
        // No bandwidth curve: the sizes were all within latency (the
        // model then predicts latency alone), not a bandwidth of 0.
        let peak = if e.bandwidth.is_empty() {
            "latency only".to_string()
        } else {
            format!("{:.2}", e.peak_gbps())
        };
        let _ = writeln!(
            t,
            "  {:<15} {:<7} {:<9} {:>8} {:>6}  {:>16.3}  {:>14}  {:>5}",
            e.collective, e.algo, e.protocol, channels, e.ranks, e.latency_us, peak, e.points
        );
    }
    if !latency_only.is_empty() {
        let _ = writeln!(
            t,
            "# latency only ({}): no size was bandwidth-bound, so these predict no size past the largest swept; sweep larger sizes (--sizes) to fit a bandwidth",
            latency_only.join(", ")
        );
    }
    t
}

pub fn model(a: &ModelArgs) -> i32 {
    model_inner(a).unwrap_or_else(|e| fail(one_line(&e)))
}

/// One prediction, as `--json` writes it.
#[derive(serde::Serialize)]
struct Predicted {
    collective: String,
    algo: String,
    bytes: u64,
    predicted_us: f64,
    busbw_gbps: f64,
    /// The model's pick at this size.
    pick: bool,
}

fn model_inner(a: &ModelArgs) -> anyhow::Result<i32> {
    let (table, source) = model_source(a)?;
    let sizes = plan::sizes(&a.sizes, false)?;
    let n = a.ranks;
    let most = crate::report::json::MAX_WORLD_SIZE;
    if n > most {
        bail!("--ranks {n}: the model predicts for up to {most} ranks (as results hold)");
    }
    let mut text = String::new();
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for &coll in &a.collective.0 {
        let entries = table.candidates(coll, n, a.protocol.as_deref());
        if entries.is_empty() {
            let why = if a.tuning.is_some() {
                format!("{coll}: the table has no entry for it")
            } else {
                format!("{coll}: a link alone predicts only the nine even collectives (the traffic of a -v one depends on its split)")
            };
            let _ = writeln!(text, "# {why}");
            missing.push(why);
            continue;
        }
        predict_table(&mut text, &mut out, coll, &entries, n, &sizes, &source);
        let _ = writeln!(text, "# {}", fit_line(coll, &entries, n));
    }
    if out.is_empty() {
        // Nothing predicted: an error saying why, not a table of nothing.
        bail!(
            "nothing to predict: {}",
            if missing.is_empty() {
                "no size of the sweep gives every rank an element, or no entry predicts one".into()
            } else {
                missing.join("; ")
            }
        );
    }
    let json = serde_json::json!({
        "schema": "collbench.model/1",
        "ranks": n,
        "source": source,
        "sizes": sizes.iter().map(|&b| Bytes(b).to_string()).collect::<Vec<_>>(),
        "rows": out,
    });
    match a.json.as_deref() {
        Some(p) if crate::units::is_stdout(p) => {
            out!("{}", serde_json::to_string_pretty(&json)?)
        }
        Some(p) => {
            out_part!("{text}");
            crate::units::write_atomic(p, (serde_json::to_string_pretty(&json)? + "\n").as_bytes())
                .with_context(|| format!("--json {}", p.display()))?;
        }
        None => out_part!("{text}"),
    }
    Ok(super::OK)
}

/// The table `model` predicts from, and how to name it: a fitted
/// `--tuning` table, or a link given by `--link-gbps` and `--latency-us`;
/// `--protocol` must be one the table has, and `--json` must not
/// overwrite the table.
fn model_source(a: &ModelArgs) -> anyhow::Result<(Tuning, String)> {
    let (table, source) = match (&a.tuning, a.link_gbps, a.latency_us) {
        (Some(p), _, _) => (
            plan::read_tuning(p)?,
            format!("fitted table {}", p.display()),
        ),
        (None, Some(bw), Some(lat)) => (
            Tuning::from_link(
                TuningMeta {
                    device: "given".into(),
                    ..TuningMeta::default()
                },
                bw,
                lat,
            ),
            format!(
                "a link of {} GB/s and {} us per hop",
                crate::units::fmt_number(bw),
                crate::units::fmt_number(lat)
            ),
        ),
        _ => bail!("model: give --tuning FILE, or --link-gbps and --latency-us"),
    };
    if let Some(p) = a.json.as_deref().filter(|p| !crate::units::is_stdout(p)) {
        paths::check_lone_outputs(&[("--json", p)], a.tuning.as_slice())?;
    }
    if let Some(p) = a.protocol.as_deref() {
        let have: std::collections::BTreeSet<&str> =
            table.entries.iter().map(|e| e.protocol.as_str()).collect();
        if a.tuning.is_none() {
            bail!("--protocol {p}: a link alone (--link-gbps) has no protocols; give a fitted --tuning table");
        }
        if !have.contains(p) {
            bail!(
                "--protocol {p}: the {source} has entries for {}",
                have.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
    }
    Ok((table, source))
}

/// One collective's table of predictions: a line per size of `sizes`
/// with each entry's time and busbw and the pick, each prediction also
/// kept in `out`.
fn predict_table(
    text: &mut String,
    out: &mut Vec<Predicted>,
    coll: Collective,
    entries: &[&Entry],
    n: usize,
    sizes: &[u64],
    source: &str,
) {
    let _ = writeln!(text, "#\n# {coll} on {n} ranks, predicted from {source}");
    let mut head = format!("# {:>12}", "size");
    for e in entries {
        let from = if e.ranks > 0 && e.ranks != n {
            format!(" (fit: {} ranks)", e.ranks)
        } else {
            String::new()
        };
        let _ = write!(head, "  {:>22}", format!("{}{from}", e.algo));
    }
    let _ = writeln!(text, "{head}  pick");
    let _ = writeln!(
        text,
        "# {:>12}{}",
        "(B)",
        "  time (us) busbw (GB/s)".repeat(entries.len())
    );
    for &b in sizes {
        let counts = coll.counts(b, 1, n);
        if counts.block == 0 {
            continue;
        }
        let preds: Vec<Option<f64>> = entries.iter().map(|e| e.predict(n, b)).collect();
        let best = preds
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, (*p)?)))
            .min_by(|x, y| x.1.total_cmp(&y.1))
            .map(|(i, _)| i);
        let mut line = format!("  {b:>12}");
        for (i, (e, p)) in entries.iter().zip(&preds).enumerate() {
            let Some(us) = *p else {
                let _ = write!(line, "  {:>22}", "-");
                continue;
            };
            let busbw = b as f64 / (us * 1e3) * coll.busbw_factor(n);
            let _ = write!(line, "  {us:>10.2} {busbw:>11.2}");
            out.push(Predicted {
                collective: coll.name().into(),
                algo: e.algo.clone(),
                bytes: b,
                predicted_us: us,
                busbw_gbps: busbw,
                pick: best == Some(i),
            });
        }
        let pick = best.map_or("-", |i| entries[i].algo.as_str());
        let _ = writeln!(text, "{line}  {pick}");
    }
}

/// Where each fit's traffic factors take it, in one line.
fn fit_line(coll: Collective, entries: &[&Entry], n: usize) -> String {
    entries
        .iter()
        .filter_map(|e| {
            let algo = e.algo()?;
            // Figures as given, never rounded to zero (`%g`).
            let g = crate::report::nccl::fmt_g;
            let hops = format!(
                "{} {} hops x {} us",
                e.algo,
                cost::hops(coll, algo, n),
                g(e.latency_us)
            );
            // A fit whose sizes were all latency-bound has no bandwidth
            // (its times do not grow with size): said, not "0.0 GB/s".
            Some(if e.bandwidth.is_empty() {
                match e.max_bytes {
                    0 => format!("{hops}, latency only (no size of the fit was bandwidth-bound, and the table does not say which sizes it saw: it predicts none)"),
                    most => format!(
                        "{hops}, latency only (no size of the fit was bandwidth-bound; it predicts sizes up to {})",
                        crate::units::Bytes(most)
                    ),
                }
            } else {
                format!(
                    "{hops}, {} x bytes at up to {} GB/s",
                    g(cost::traffic(coll, algo, n)),
                    g(e.peak_gbps())
                )
            })
        })
        .collect::<Vec<_>>()
        .join("; ")
}
