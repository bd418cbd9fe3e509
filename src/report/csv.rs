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

/// A CSV error as an I/O error of the same kind (a closed stdout stays
/// `BrokenPipe`, which callers take as the end of output, not a failure).
fn io_error(e: csv::Error) -> io::Error {
    let kind = match e.kind() {
        csv::ErrorKind::Io(io) => io.kind(),
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

/// Streams rows to a CSV writer.
pub struct CsvSink<W: Write> {
    w: csv::Writer<W>,
}

impl<W: Write> CsvSink<W> {
    pub fn new(out: W) -> io::Result<CsvSink<W>> {
        let mut w = csv::Writer::from_writer(out);
        w.write_record(HEADER).map_err(io_error)?;
        w.flush()?;
        Ok(CsvSink { w })
    }
}

impl<W: Write> CsvSink<W> {
    /// The writer, every row flushed to it.
    pub fn into_inner(self) -> io::Result<W> {
        self.w.into_inner().map_err(|e| e.into_error())
    }
}

impl<W: Write> Sink for CsvSink<W> {
    fn row(&mut self, row: &Row) -> io::Result<()> {
        self.w.write_record(fields(row)).map_err(io_error)?;
        self.w.flush()
    }
}

/// Rows of several results in one CSV, each line led by the `source` its
/// row came from (`collbench report A B --csv F`).
pub fn write_sources<'a, W: Write>(
    out: W,
    sources: impl IntoIterator<Item = (&'a str, &'a [Row])>,
) -> io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let mut head = vec!["source"];
    head.extend(HEADER);
    w.write_record(head).map_err(io_error)?;
    for (source, rows) in sources {
        for r in rows {
            let mut line = vec![source.to_string()];
            line.extend(fields(r));
            w.write_record(line).map_err(io_error)?;
        }
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::row;

    #[test]
    fn several_sources_lead_their_rows() {
        let (a, b) = (vec![row(8, "out")], vec![row(8, "out"), row(16, "in")]);
        let mut out = Vec::new();
        write_sources(&mut out, [("a.json", &a[..]), ("b.json", &b[..])]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("source,collective,engine,"), "{text}");
        assert!(lines[1].starts_with("a.json,all-reduce,"), "{text}");
        assert!(
            lines[3].starts_with("b.json,all-reduce,") && lines[3].contains(",16,"),
            "{text}"
        );
    }
}
