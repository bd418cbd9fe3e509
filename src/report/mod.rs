//! Reports: pure renderings of results (terminal table, nccl-tests text,
//! Markdown, CSV, JSON/JSONL, plots), reading results back (collbench's
//! JSON/JSONL and nccl-tests logs), comparisons of two results files,
//! qualification verdicts with JUnit XML, the per-link matrix and its
//! verdict (which links or ranks are slow), warnings with hints, and the
//! [`Sink`] the harness feeds rows to as they finish.

pub mod compare;
pub mod csv;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod grid;
pub mod json;
pub mod junit;
pub mod layout;
pub mod links;
pub mod markdown;
pub mod model;
pub mod nccl;
pub mod nccl_log;
pub mod plot;
pub mod progress;
pub mod qualify;
pub mod table;
pub mod text;
pub mod warn;

pub use links::{LinkFinding, LinkPair, LinkReport};
pub use model::{Arrival, Gpu, Meta, Partial, Process, Results, Row, Slowest, Stats, StopReason};

use std::io;

/// Receives rows as they finish; hooks default to doing nothing.
pub trait Sink {
    fn start(&mut self, _meta: &Meta) -> io::Result<()> {
        Ok(())
    }
    /// A case is about to be measured: `proto` is its row before any
    /// measurement (no time yet; `wrong` 0 when it is checked, -1 when
    /// not). Text layouts print its section's header then, as nccl-tests
    /// does, so a run that hangs in its first case still shows it.
    fn case(&mut self, _proto: &Row) -> io::Result<()> {
        Ok(())
    }
    fn row(&mut self, row: &Row) -> io::Result<()>;
    /// The run finished, or stopped early and says so in
    /// `results.meta.partial` (a signal, a hang): the final outputs.
    fn finish(&mut self, _results: &Results) -> io::Result<()> {
        Ok(())
    }
    /// The run failed (refused, or a runtime error) after it started: close
    /// without a verdict on values that were never all made. Files are
    /// still written as on `finish`.
    fn abandon(&mut self, results: &Results) -> io::Result<()> {
        self.finish(results)
    }
}

/// Several sinks fed in order.
#[derive(Default)]
pub struct Fanout {
    pub sinks: Vec<Box<dyn Sink>>,
    pub rows: Vec<Row>,
    /// The last case begun (its unmeasured row).
    pub last_case: Option<Row>,
}

impl Sink for Fanout {
    fn start(&mut self, meta: &Meta) -> io::Result<()> {
        self.sinks.iter_mut().try_for_each(|s| s.start(meta))
    }
    fn case(&mut self, proto: &Row) -> io::Result<()> {
        self.last_case = Some(proto.clone());
        self.sinks.iter_mut().try_for_each(|s| s.case(proto))
    }
    fn row(&mut self, row: &Row) -> io::Result<()> {
        self.rows.push(row.clone());
        every(&mut self.sinks, |s| s.row(row))
    }
    fn finish(&mut self, results: &Results) -> io::Result<()> {
        every(&mut self.sinks, |s| s.finish(results))
    }
    fn abandon(&mut self, results: &Results) -> io::Result<()> {
        every(&mut self.sinks, |s| s.abandon(results))
    }
}

/// A sink whose failed writes name its output (`--csv r.csv: No space
/// left on device`), as the JSON's do: a sweep with several outputs says
/// which one failed.
pub struct Named {
    pub name: String,
    pub inner: Box<dyn Sink>,
}

impl Named {
    pub fn boxed(name: String, inner: Box<dyn Sink>) -> Box<dyn Sink> {
        Box::new(Named { name, inner })
    }

    fn named(&self, r: io::Result<()>) -> io::Result<()> {
        r.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.name)))
    }
}

impl Sink for Named {
    fn start(&mut self, meta: &Meta) -> io::Result<()> {
        let r = self.inner.start(meta);
        self.named(r)
    }
    fn case(&mut self, proto: &Row) -> io::Result<()> {
        let r = self.inner.case(proto);
        self.named(r)
    }
    fn row(&mut self, row: &Row) -> io::Result<()> {
        let r = self.inner.row(row);
        self.named(r)
    }
    fn finish(&mut self, results: &Results) -> io::Result<()> {
        let r = self.inner.finish(results);
        self.named(r)
    }
    fn abandon(&mut self, results: &Results) -> io::Result<()> {
        let r = self.inner.abandon(results);
        self.named(r)
    }
}

/// `f` on every sink, even after one failed (a full disk under the CSV
/// must not cost the JSON its rows); the failures, together.
fn every(
    sinks: &mut [Box<dyn Sink>],
    mut f: impl FnMut(&mut Box<dyn Sink>) -> io::Result<()>,
) -> io::Result<()> {
    let mut failed: Vec<io::Error> = Vec::new();
    for s in sinks.iter_mut() {
        if let Err(e) = f(s) {
            failed.push(e);
        }
    }
    match failed.len() {
        0 => Ok(()),
        1 => Err(failed.remove(0)),
        _ => {
            let text: Vec<String> = failed.iter().map(ToString::to_string).collect();
            Err(io::Error::other(text.join("; ")))
        }
    }
}
