//! Where a sweep's rows go: the table or nccl-tests' text on stdout, JSON,
//! CSV and plots, the progress bar, and the results' `meta`.

/// Makes a file's sink (creating its files).
type MakeSink = Box<dyn FnOnce() -> anyhow::Result<Box<dyn Sink>>>;

use super::*;

/// What a case is, for the progress bar.
pub(super) fn case_label(c: &harness::Case) -> String {
    let mut l = format!(
        "{} {} {} {}",
        c.coll.name(),
        c.engine.name(),
        c.dtype.name(),
        Bytes(c.bytes)
    );
    if c.engine == Engine::Builtin {
        l = format!("{l} {}", c.algo.name());
    }
    l
}

/// A file's sink, made at the run's first row (or at its end, when it
/// stopped by a hang or a signal before one): a run refused before its
/// first row (no compiler, a layout that cannot be resident, too little
/// device memory) leaves the files it would have written as they were.
pub(super) struct Deferred {
    make: Option<MakeSink>,
    meta: Option<Meta>,
    made: Option<Box<dyn Sink>>,
}

impl Deferred {
    fn boxed(make: impl FnOnce() -> anyhow::Result<Box<dyn Sink>> + 'static) -> Box<dyn Sink> {
        Box::new(Deferred {
            make: Some(Box::new(make)),
            meta: None,
            made: None,
        })
    }

    fn made(&mut self) -> std::io::Result<&mut Box<dyn Sink>> {
        if self.made.is_none() {
            let make = self
                .make
                .take()
                .ok_or_else(|| std::io::Error::other("an output that could not be made before"))?;
            let mut sink = make().map_err(|e| std::io::Error::other(one_line(&e)))?;
            if let Some(m) = &self.meta {
                sink.start(m)?;
            }
            self.made = Some(sink);
        }
        self.made
            .as_mut()
            .ok_or_else(|| std::io::Error::other("an output that could not be made"))
    }
}

impl Sink for Deferred {
    fn start(&mut self, meta: &Meta) -> std::io::Result<()> {
        self.meta = Some(meta.clone());
        Ok(())
    }
    fn case(&mut self, proto: &crate::report::Row) -> std::io::Result<()> {
        match &mut self.made {
            Some(s) => s.case(proto),
            None => Ok(()),
        }
    }
    fn row(&mut self, row: &crate::report::Row) -> std::io::Result<()> {
        self.made()?.row(row)
    }
    fn finish(&mut self, results: &Results) -> std::io::Result<()> {
        self.made()?.finish(results)
    }
    fn abandon(&mut self, results: &Results) -> std::io::Result<()> {
        match &mut self.made {
            Some(s) => s.abandon(results),
            // Refused before its first row: nothing to keep, and nothing
            // of the user's is replaced.
            None => Ok(()),
        }
    }
}

/// Stdout for data (`--csv -`, `--json -`): when its reader goes away
/// (`| head`), the run stops as for a signal, with every finished row in
/// its files, and what is left to write is dropped rather than failing.
pub(super) struct DataStdout;

impl DataStdout {
    fn closed<T>(r: std::io::Result<T>, instead: T) -> std::io::Result<T> {
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                watchdog::stop_for_closed_stdout();
                Ok(instead)
            }
            r => r,
        }
    }
}

impl Write for DataStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if watchdog::stopped_for_closed_stdout() {
            return Ok(buf.len());
        }
        Self::closed(std::io::stdout().write(buf), buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if watchdog::stopped_for_closed_stdout() {
            return Ok(());
        }
        Self::closed(std::io::stdout().flush(), ())
    }
}

pub(super) fn sinks(s: &Sweep, leader: bool) -> anyhow::Result<Fanout> {
    let mut f = Fanout::default();
    // `--json -` or `--csv -`: the data is stdout, so the table goes to stderr.
    let json_on_stdout = s.json.as_deref().is_some_and(crate::units::is_stdout);
    let data_on_stdout = s.data_on_stdout();
    if !s.quiet {
        let out = Box::new(move |line: &str| {
            progress::suspend(|| {
                if data_on_stdout {
                    let _ = writeln!(std::io::stderr().lock(), "{line}");
                    return;
                }
                match writeln!(std::io::stdout().lock(), "{line}") {
                    // Its reader went away (`| head`): the run stops as
                    // for a signal, with every finished row in its files.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                        watchdog::stop_for_closed_stdout();
                    }
                    r => super::note_stdout(r),
                }
            })
        });
        let names = s
            .plan
            .placements
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        let format: Format = s.format.into();
        let layout = format.layout(
            names,
            s.verbose > 0,
            s.plan.sizes.clone(),
            split_algos(&s.plan),
        );
        f.sinks.push(Box::new(LayoutSink::new(layout, out)));
    }
    if s.csv.as_deref().is_some_and(crate::units::is_stdout) {
        let csv = CsvSink::new(DataStdout).context("--csv - (stdout)")?;
        f.sinks
            .push(Named::boxed("--csv - (stdout)".into(), Box::new(csv)));
    } else if let Some(p) = s.csv.clone() {
        f.sinks.push(Deferred::boxed(move || {
            let at = || format!("--csv {}", p.display());
            let file = crate::units::create_output(&p).with_context(at)?;
            let csv = CsvFile(Some(CsvSink::new(file).with_context(at)?));
            Ok(Named::boxed(at(), Box::new(csv)))
        }));
    }
    if json_on_stdout {
        let json = JsonSink::stream(Box::new(DataStdout));
        f.sinks
            .push(Named::boxed("--json - (stdout)".into(), Box::new(json)));
    } else if let Some(p) = s.json.clone() {
        f.sinks.push(Deferred::boxed(move || {
            let sink = JsonSink::create(&p).with_context(|| format!("--json {}", p.display()))?;
            Ok(Box::new(sink))
        }));
    }
    if let Some(p) = s.plot.clone() {
        f.sinks
            .push(Deferred::boxed(move || Ok(Box::new(PlotSink { path: p }))));
    }
    let wanted = leader && !s.quiet && s.format != FormatChoice::NcclTests;
    let cases = harness::plan::cases(&s.plan).0;
    let progress = Progress::new(cases.len() as u64, "cases", wanted);
    if progress.visible() {
        let labels = cases.iter().map(case_label).collect();
        f.sinks.push(Box::new(ProgressSink::new(
            progress,
            labels,
            s.plan.placements.len(),
        )));
    }
    Ok(f)
}

pub(super) fn meta(s: &Sweep, chosen: &Chosen) -> Meta {
    let cores = crate::engine::cpus::cores();
    let devices = if chosen.devices.is_empty() {
        vec![format!("{} ({cores} cores)", cpu_model())]
    } else {
        chosen.devices.clone()
    };
    Meta {
        version: env!("CARGO_PKG_VERSION").into(),
        command: crate::units::command_line(),
        host: hostname(),
        started_at: rfc3339_now(),
        world_size: s.plan.ranks,
        device: chosen.device.clone(),
        devices,
        iters: s.plan.iters,
        warmup: s.plan.warmup,
        seed: s.plan.seed,
        timing: match chosen.timing {
            Timing::Events => "events",
            Timing::Wall => "wall",
        }
        .into(),
        notes: Vec::new(),
        nccl: None,
        partial: None,
        pid: std::process::id(),
        gpus: chosen.gpus.clone(),
        processes: Vec::new(),
        log_avg_busbw: None,
        log_out_of_bounds: None,
        log_avg_ok: None,
        nccl_tests_header: s.nccl_tests.as_ref().map(|n| n.header.clone()),
        nccl_tests_min_bw: s.nccl_tests.as_ref().and_then(|n| n.min_bw),
        sizes: s.plan.sizes.clone(),
        nccl_tests_devices: Vec::new(),
        nccl_tests_wide: false,
        agg_iters: s.agg_iters,
        graph: chosen.graph,
        protocol: s.plan.model_protocol().map(Into::into),
        channels: Some(s.plan.channels).filter(|&c| c > 0),
    }
}

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Now, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    crate::units::utc_text(secs)
}

/// A sweep's CSV in a file: rows stream in as they finish, and the file
/// takes its path when the sweep ends (a failed write leaves the file that
/// was there).
struct CsvFile(Option<CsvSink<crate::units::Output>>);

impl Sink for CsvFile {
    fn row(&mut self, row: &crate::report::Row) -> std::io::Result<()> {
        match &mut self.0 {
            Some(s) => s.row(row),
            None => Ok(()),
        }
    }

    fn finish(&mut self, _results: &Results) -> std::io::Result<()> {
        match self.0.take() {
            Some(s) => s.into_inner()?.commit(),
            None => Ok(()),
        }
    }
}
