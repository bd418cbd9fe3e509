//! The emulated device's unit tests. Those that run kernels need the host
//! C++ compiler: without one they say SKIPPED, unless
//! `COLLBENCH_REQUIRE_CXX=1`, which makes its absence a failure. They all
//! use one variant (u8/sum), built once per process.

use super::*;
use crate::engine::types::{Dtype, ReduceOp};
use std::ffi::OsString;

const U8_SUM: Variant = Variant {
    dtype: Dtype::U8,
    op: ReduceOp::Sum,
};

fn device(memory_bytes: u64) -> EmuDevice {
    let cfg = EmuConfig {
        memory_bytes,
        ..EmuConfig::DEFAULT
    };
    EmuDevice::new(0, cfg)
}

/// Whether the compiler is there; says SKIPPED (or fails, when required) if not.
fn have_cxx(test: &str) -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    let found = *FOUND.get_or_init(|| {
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let prog = cxx.split_whitespace().next().unwrap_or("c++").to_string();
        std::process::Command::new(prog)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !found {
        let msg = format!("SKIPPED {test}: no C++ compiler (set CXX)");
        assert!(
            std::env::var("COLLBENCH_REQUIRE_CXX").as_deref() != Ok("1"),
            "{msg}, and COLLBENCH_REQUIRE_CXX=1"
        );
        eprintln!("{msg}");
    }
    found
}

/// Poisons `count` bytes at `p` with `grid` blocks, on `s`.
fn poison(d: &EmuDevice, s: StreamId, p: DevPtr, count: u64, grid: u32) {
    let f = d.function(U8_SUM, "cb_poison").expect("cb_poison");
    d.launch(f, grid, 256, s, &[&p.to_le_bytes(), &count.to_le_bytes()])
        .expect("launch");
}

#[test]
fn upload_download_round_trip() {
    let d = device(1 << 20);
    let s = d.stream().unwrap();
    let p = d.alloc(1000).unwrap();
    assert_ne!(p, 0);
    assert_eq!(p % ALIGN as u64, 0);
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    d.upload(s, p, &data).unwrap();
    let mut back = vec![0u8; 1000];
    d.download(s, &mut back, p).unwrap();
    assert_eq!(back, data);
    // Part of an allocation, then past its end.
    let mut tail = vec![0u8; 10];
    d.download(s, &mut tail, p + 990).unwrap();
    assert_eq!(tail, data[990..]);
    let e = d.download(s, &mut tail, p + 995).unwrap_err();
    assert!(e.detail.contains("not inside"), "{e}");
    d.memset(s, p, 0x3C, 500).unwrap();
    d.sync(s).unwrap();
    assert!(d.done(s).unwrap());
    d.download(s, &mut back, p).unwrap();
    assert!(back[..500].iter().all(|&b| b == 0x3C));
    assert_eq!(back[500..], data[500..]);
    let q = d.alloc(1000).unwrap();
    d.copy(s, q, p, 1000).unwrap();
    assert!(d.copy(s, q + 1, p, 1000).is_err());
    let mut copied = vec![0u8; 1000];
    d.download(s, &mut copied, q).unwrap();
    assert_eq!(copied, back);
    d.free(q).unwrap();
    d.free(p).unwrap();
    assert!(d.free(p).is_err());
    assert!(d.upload(s, p, &data).is_err());
    let m = d.alloc_mapped(64).unwrap();
    assert_eq!(m.host as u64, m.dev);
    // SAFETY: `m` is 64 live bytes.
    assert!(unsafe { std::slice::from_raw_parts(m.host, 64) }
        .iter()
        .all(|&b| b == 0));
    assert!(d.free(m.dev).is_err(), "mapped memory is freed as mapped");
    d.free_mapped(m).unwrap();
}

#[test]
fn poison_kernel_through_function_and_launch() {
    if !have_cxx("poison_kernel_through_function_and_launch") {
        return;
    }
    let d = device(1 << 20);
    let s = d.stream().unwrap();
    let n = 10_000;
    let p = d.alloc(n + 16).unwrap();
    d.upload(s, p, &vec![0u8; n + 16]).unwrap();
    poison(&d, s, p, n as u64, 7);
    let mut back = vec![1u8; n + 16];
    d.download(s, &mut back, p).unwrap();
    assert!(back[..n].iter().all(|&b| b == 0xA5));
    assert!(back[n..].iter().all(|&b| b == 0));
    // Same id twice; an occupancy for it; bad names and arguments refused.
    let f = d.function(U8_SUM, "cb_poison").unwrap();
    assert_eq!(d.function(U8_SUM, "cb_poison").unwrap(), f);
    assert_eq!(d.occupancy(f, 256).unwrap(), 4);
    for name in ["cb_collective", "cb_fill", "cb_fill_at", "cb_verify"] {
        d.function(U8_SUM, name).unwrap();
    }
    let e = d.function(U8_SUM, "cb_nothing").unwrap_err();
    assert!(e.detail.contains("cb_nothing"), "{e}");
    let e = d.launch(f, 1, 1, s, &[&p.to_le_bytes()]).unwrap_err();
    assert!(e.detail.contains("[8, 8]"), "{e}");
    assert!(d.launch(f, 0, 1, s, &[&[0; 8], &[0; 8]]).is_err());
}

/// Blocks as wide as `COLLBENCH_EMU_THREADS` (each thread a host thread)
/// cover every element between them; a launch wider runs that wide; a
/// width that is not whole groups of 8, or wider than a GPU's, is refused.
#[test]
fn wide_blocks_run_each_thread() {
    if !have_cxx("wide_blocks_run_each_thread") {
        return;
    }
    let d = EmuDevice::new(
        0,
        EmuConfig {
            memory_bytes: 1 << 20,
            threads: 16,
            ..EmuConfig::DEFAULT
        },
    );
    assert_eq!(d.desc().block_threads, 16);
    let s = d.stream().unwrap();
    let n = 10_007;
    let p = d.alloc(n + 16).unwrap();
    for (grid, threads) in [(3, 16), (2, 8), (1, 256), (5, 1)] {
        d.upload(s, p, &vec![0u8; n + 16]).unwrap();
        let f = d.function(U8_SUM, "cb_poison").unwrap();
        d.launch(
            f,
            grid,
            threads,
            s,
            &[&p.to_le_bytes(), &(n as u64).to_le_bytes()],
        )
        .unwrap();
        let mut back = vec![1u8; n + 16];
        d.download(s, &mut back, p).unwrap();
        assert!(back[..n].iter().all(|&b| b == 0xA5), "{grid} x {threads}");
        assert!(back[n..].iter().all(|&b| b == 0), "{grid} x {threads}");
    }
    let f = d.function(U8_SUM, "cb_poison").unwrap();
    for threads in [12, 2048] {
        let e = d
            .launch(f, 1, threads, s, &[&p.to_le_bytes(), &8u64.to_le_bytes()])
            .unwrap_err();
        assert!(e.detail.contains("groups of 8"), "{threads}: {e}");
    }
}

#[test]
fn events_are_ordered() {
    let d = device(1 << 20);
    let s = d.stream().unwrap();
    let p = d.alloc(1 << 16).unwrap();
    let [a, b, c] = [(); 3].map(|_| d.event().unwrap());
    assert!(d.elapsed_ms(a, b).is_err(), "never recorded");
    d.record(a, s).unwrap();
    for _ in 0..50 {
        d.memset(s, p, 1, 1 << 16).unwrap();
    }
    d.record(b, s).unwrap();
    d.memset(s, p, 2, 1 << 16).unwrap();
    d.record(c, s).unwrap();
    d.sync(s).unwrap();
    let ab = d.elapsed_ms(a, b).unwrap();
    let ac = d.elapsed_ms(a, c).unwrap();
    assert!(ab >= 0.0 && ac >= ab, "{ab} {ac}");
    assert!(d.elapsed_ms(c, a).unwrap() <= 0.0);
    // Recorded again: the latest wins.
    d.record(a, s).unwrap();
    d.sync(s).unwrap();
    assert!(d.elapsed_ms(c, a).unwrap() >= 0.0);
}

#[test]
fn captured_graph_replays() {
    let cxx = have_cxx("captured_graph_replays");
    let d = device(1 << 20);
    let s = d.stream().unwrap();
    let n = 4096;
    let p = d.alloc(n).unwrap();
    let e = d.event().unwrap();
    d.upload(s, p, &vec![0x11; n]).unwrap();
    d.begin_capture(s).unwrap();
    assert!(d.begin_capture(s).is_err());
    d.memset(s, p, 0x22, n).unwrap();
    if cxx {
        poison(&d, s, p, n as u64 / 2, 3);
    }
    d.record(e, s).unwrap();
    assert!(d.sync(s).is_err(), "sync while capturing");
    assert!(d.upload(s, p, &[0]).is_err(), "upload while capturing");
    let g = d.end_capture(s).unwrap();
    assert!(d.end_capture(s).is_err());
    let mut back = vec![0u8; n];
    d.download(s, &mut back, p).unwrap();
    assert!(back.iter().all(|&b| b == 0x11), "captured work did not run");
    assert!(d.elapsed_ms(e, e).is_err());
    for _ in 0..2 {
        d.upload(s, p, &vec![0x11; n]).unwrap();
        d.launch_graph(g, s).unwrap();
        d.sync(s).unwrap();
        d.download(s, &mut back, p).unwrap();
        let head = if cxx { 0xA5 } else { 0x22 };
        assert!(back[..n / 2].iter().all(|&b| b == head));
        assert!(back[n / 2..].iter().all(|&b| b == 0x22));
        assert_eq!(d.elapsed_ms(e, e).unwrap(), 0.0);
    }
    d.drop_graph(g).unwrap();
    assert!(d.launch_graph(g, s).is_err());
    assert!(d.drop_graph(g).is_err());
}

#[test]
fn memory_over_the_limit_is_refused() {
    let d = device(1 << 20);
    let a = d.alloc(600 << 10).unwrap();
    let e = d.alloc(600 << 10).unwrap_err();
    assert!(e.detail.contains("out of emulated device memory"), "{e}");
    let (free, total) = d.mem_info().unwrap();
    assert_eq!(total, 1 << 20);
    assert!(free <= (1 << 20) - (600 << 10));
    d.free(a).unwrap();
    let b = d.alloc(1 << 20).unwrap();
    assert!(d.alloc(1).is_err());
    // Mapped memory is host memory: not counted.
    let m = d.alloc_mapped(1 << 20).unwrap();
    d.free_mapped(m).unwrap();
    d.free(b).unwrap();
}

#[test]
fn config_from_the_environment() {
    let cfg = |vars: &[(&str, &str)]| {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        EmuConfig::from_lookup(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    };
    assert_eq!(cfg(&[]).unwrap(), EmuConfig::DEFAULT);
    let c = cfg(&[
        ("COLLBENCH_EMU_GPUS", "2"),
        ("COLLBENCH_EMU_SMS", " 10 "),
        ("COLLBENCH_EMU_BLOCKS_PER_SM", "1"),
        ("COLLBENCH_EMU_MEM", "512M"),
        ("COLLBENCH_EMU_QUEUES", "4"),
    ])
    .unwrap();
    assert_eq!((c.gpus, c.multiprocessors, c.blocks_per_sm), (2, 10, 1));
    assert_eq!(c.queues, 4);
    assert_eq!(c.memory_bytes, 512 << 20);
    assert_eq!(c.threads, 1);
    for t in ["1", "8", "32", "1024"] {
        let c = cfg(&[("COLLBENCH_EMU_THREADS", t)]).unwrap();
        assert_eq!(c.threads.to_string(), t);
    }
    for (var, bad) in [
        ("COLLBENCH_EMU_QUEUES", "0"),
        ("COLLBENCH_EMU_THREADS", "0"),
        ("COLLBENCH_EMU_THREADS", "12"),
        ("COLLBENCH_EMU_THREADS", "1032"),
        ("COLLBENCH_EMU_THREADS", "wide"),
        ("COLLBENCH_EMU_GPUS", "0"),
        ("COLLBENCH_EMU_GPUS", "two"),
        ("COLLBENCH_EMU_SMS", "-1"),
        ("COLLBENCH_EMU_BLOCKS_PER_SM", "4.5"),
        ("COLLBENCH_EMU_MEM", "12Q"),
        ("COLLBENCH_EMU_MEM", "99999999999T"),
        ("COLLBENCH_EMU_MEM", "63.2M"),
    ] {
        let e = cfg(&[(var, bad)]).unwrap_err();
        assert!(e.detail.contains(var), "{var}={bad}: {e}");
        if bad == "63.2M" {
            assert!(e.detail.contains("not a whole number of bytes"), "{e}");
        }
        if var == "COLLBENCH_EMU_THREADS" {
            assert!(e.detail.contains("multiple of 8 up to 1024"), "{e}");
        }
    }
    // Empty is unset, as for every setting of collbench's.
    assert_eq!(
        cfg(&[("COLLBENCH_EMU_MEM", ""), ("COLLBENCH_EMU_SMS", " ")]).unwrap(),
        EmuConfig::DEFAULT
    );
    let sizes = [
        ("8G", 8 << 30),
        ("8GiB", 8 << 30),
        ("1k", 1024),
        ("77", 77),
        ("1.5G", 3 << 29),
        ("2GB", 2_000_000_000),
    ];
    for (s, n) in sizes {
        assert_eq!(parse_size(s), Some(n), "{s}");
    }
}

#[test]
fn drop_stops_busy_streams() {
    let d = device(64 << 20);
    let s = d.stream().unwrap();
    let p = d.alloc(32 << 20).unwrap();
    for _ in 0..100 {
        d.memset(s, p, 7, 32 << 20).unwrap();
    }
    d.stream().unwrap();
    drop(d);
}

#[test]
fn devices_have_the_configured_shape() {
    let ds = devices().unwrap();
    assert!(!ds.is_empty());
    let d = &ds[0];
    assert_eq!((d.kind(), d.desc().arch.as_str()), ("cuda-emu", "emu"));
    assert_eq!(d.desc().connections, 128);
}

/// A peer's IPC handle is read as it was written, or refused naming it:
/// numbers past their types are not truncated into other ones.
#[test]
fn an_ipc_handle_is_checked_not_truncated() {
    let d = device(1 << 20);
    let (_shared, handle) = d.share(4096, ShareKind::Device).unwrap();
    let text = String::from_utf8(handle.clone()).unwrap();
    let fd: u64 = text.split(' ').nth(2).unwrap().parse().unwrap();
    assert!(d.open_shared(&handle).is_ok(), "{text}");
    let len = text.split(' ').nth(3).unwrap();
    for bad in [
        format!("emu {} {} {len}", std::process::id(), fd + (1 << 32)),
        format!(
            "emu {} {fd} {len}",
            u64::from(std::process::id()) + (1 << 32)
        ),
        format!("emu {} {fd} {len} 9", std::process::id()),
        format!("emu {} {fd}", std::process::id()),
    ] {
        let err = d.open_shared(bad.as_bytes()).err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains(&format!("bad IPC handle '{bad}'"))),
            "{bad}: {err:?}"
        );
    }
}
