//! Rows and results for the report modules' tests.

use super::{Meta, Results, Row, Stats};

/// A row for tests: all-reduce ring float sum, checked, 10 us at `bytes`.
pub fn row(bytes: u64, placement: &str) -> Row {
    Row {
        last_arrival: None,
        scalar: None,
        predicted_us: None,
        auto_pick: None,
        split: None,
        members: Vec::new(),
        group_member: None,
        collective: "all-reduce".into(),
        engine: "builtin".into(),
        algo: "ring".into(),
        dtype: "float".into(),
        op: "sum".into(),
        root: -1,
        bytes,
        count: bytes / 4,
        placement: placement.into(),
        time_us: 10.0,
        algbw_gbps: bytes as f64 / 10e3,
        busbw_gbps: bytes as f64 / 10e3 * 1.5,
        wrong: 0,
        nan: 0,
        stats: Stats {
            p50_us: 10.0,
            p99_us: 11.0,
            min_us: 9.0,
            max_us: 11.0,
            outliers: 0,
        },
        per_rank_us: vec![9.0, 10.0, 9.5, 8.0],
        first_error: None,
    }
}

pub fn results(rows: Vec<Row>) -> Results {
    Results::new(
        Meta {
            log_avg_busbw: None,
            log_out_of_bounds: None,
            log_avg_ok: None,
            nccl_tests_header: None,
            nccl_tests_min_bw: None,
            sizes: Vec::new(),
            nccl_tests_devices: Vec::new(),
            nccl_tests_wide: false,
            agg_iters: 1,
            graph: false,
            protocol: None,
            channels: None,
            gpus: Vec::new(),
            processes: Vec::new(),
            pid: 0,
            version: "0.1.0".into(),
            command: "collbench all-reduce".into(),
            host: "node1".into(),
            started_at: "2026-11-21T20:00:00Z".into(),
            world_size: 4,
            device: "host".into(),
            devices: vec!["Test CPU (2 cores)".into()],
            iters: 20,
            warmup: 5,
            seed: 1,
            timing: "wall".into(),
            notes: vec![],
            nccl: None,
            partial: None,
        },
        rows,
    )
}
