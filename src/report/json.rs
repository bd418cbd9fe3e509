//! JSON results (`collbench.results/1`), written atomically at the end, and
//! JSONL beside them, appended as rows finish: its first line holds the
//! schema and meta, each further line one row, so an interrupted sweep keeps
//! every finished row.

use super::{model::RESULTS_SCHEMA, Meta, Results, Row, Sink};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// `a.json` -> `a.jsonl`; anything else gets `.jsonl` appended.
pub fn jsonl_path(json: &Path) -> PathBuf {
    match json.extension() {
        Some(e) if e == "json" => json.with_extension("jsonl"),
        _ => {
            let mut s = json.as_os_str().to_owned();
            s.push(".jsonl");
            PathBuf::from(s)
        }
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// Reads a results file, checking its schema.
pub fn read_results(path: &Path) -> Result<Results, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let r: Results = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a collbench results file: {e}", path.display()))?;
    if r.schema != RESULTS_SCHEMA {
        return Err(format!(
            "{}: schema '{}' is not {RESULTS_SCHEMA}",
            path.display(),
            r.schema
        ));
    }
    Ok(r)
}

/// The JSON file at the end, JSONL as rows finish.
pub struct JsonSink {
    path: PathBuf,
    jsonl: BufWriter<File>,
}

impl JsonSink {
    pub fn create(path: &Path) -> io::Result<JsonSink> {
        let jsonl = BufWriter::new(File::create(jsonl_path(path))?);
        Ok(JsonSink {
            path: path.to_path_buf(),
            jsonl,
        })
    }
}

impl Sink for JsonSink {
    fn start(&mut self, meta: &Meta) -> io::Result<()> {
        let head = serde_json::json!({"schema": RESULTS_SCHEMA, "meta": meta});
        writeln!(self.jsonl, "{head}")?;
        self.jsonl.flush()
    }

    fn row(&mut self, row: &Row) -> io::Result<()> {
        serde_json::to_writer(&mut self.jsonl, row)?;
        writeln!(self.jsonl)?;
        self.jsonl.flush()
    }

    fn finish(&mut self, results: &Results) -> io::Result<()> {
        let text = serde_json::to_vec_pretty(results)?;
        write_atomic(&self.path, &text)
    }
}
