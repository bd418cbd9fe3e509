//! Reports: pure renderings of results (table, CSV, JSON/JSONL) and the
//! sink trait the harness feeds as rows finish.

pub mod model;

pub use model::{Meta, Results, Row, Stats};
