//! CSV: one line per row (per placement), written and flushed as rows finish.

use super::{Row, Sink};
use std::io::{self, Write};

pub const HEADER: [&str; 20] = [
    "collective",
    "engine",
    "algo",
    "dtype",
    "op",
    "root",
    "bytes",
    "count",
    "placement",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
    "nan",
    "p50_us",
    "p99_us",
    "min_us",
    "max_us",
    "group_member",
    "split",
];

/// The CSV fields of a row, in [`HEADER`] order.
pub fn fields(r: &Row) -> Vec<String> {
    vec![
        r.collective.clone(),
        r.engine.clone(),
        r.algo.clone(),
        r.dtype.clone(),
        r.op.clone(),
        r.root.to_string(),
        r.bytes.to_string(),
        r.count.to_string(),
        r.placement.clone(),
        format!("{:.3}", r.time_us),
        format!("{:.4}", r.algbw_gbps),
        format!("{:.4}", r.busbw_gbps),
        r.wrong.to_string(),
        r.nan.to_string(),
        format!("{:.3}", r.stats.p50_us),
        format!("{:.3}", r.stats.p99_us),
        format!("{:.3}", r.stats.min_us),
        format!("{:.3}", r.stats.max_us),
        // A group's operation: its place in the group (the group's row: "group").
        r.group_member.map(|k| k.to_string()).unwrap_or_default(),
        r.split.clone().unwrap_or_default(),
    ]
}

/// Streams rows to a CSV writer.
pub struct CsvSink<W: Write> {
    w: csv::Writer<W>,
}

impl<W: Write> CsvSink<W> {
    pub fn new(out: W) -> io::Result<CsvSink<W>> {
        let mut w = csv::Writer::from_writer(out);
        w.write_record(HEADER).map_err(io::Error::other)?;
        w.flush()?;
        Ok(CsvSink { w })
    }
}

impl<W: Write> Sink for CsvSink<W> {
    fn row(&mut self, row: &Row) -> io::Result<()> {
        self.w.write_record(fields(row)).map_err(io::Error::other)?;
        self.w.flush()
    }
}
