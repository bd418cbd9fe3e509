use super::*;
use crate::engine::exec::cuda::nvrtc::{CompileError, Image, Nvrtc};
use crate::engine::types::{Dtype, ReduceOp};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

fn arch(s: &str) -> Arch {
    s.parse().unwrap()
}

#[test]
fn arch_parses_the_usual_spellings() {
    let sm90 = Arch {
        cc: 90,
        specific: false,
    };
    for s in [
        "sm_90",
        "SM_90",
        " sm90 ",
        "90",
        "compute_90",
        "compute90",
        "9.0",
    ] {
        assert_eq!(s.parse::<Arch>(), Ok(sm90), "{s}");
    }
    assert_eq!(arch("sm_80").cc, 80);
    assert_eq!(arch("sm_120").cc, 120);
    let a = arch("sm_90a");
    assert!(a.specific);
    assert_eq!(a.to_string(), "sm_90a");
    assert_eq!(a.nvrtc_option(Code::Ptx), "--gpu-architecture=compute_90a");
    assert_eq!(arch("compute_80").to_string(), "sm_80");
    assert_eq!(
        arch("sm_80").nvrtc_option(Code::Ptx),
        "--gpu-architecture=compute_80"
    );
    assert_eq!(Arch::DEFAULT.to_string(), "sm_90");
}

#[test]
fn arch_rejects_junk_with_a_clear_message() {
    for s in [
        "", "sm_", "junk", "sm_9", "sm_1000", "sm_30", "sm_9x", "-90", "sm_+90", "9.0a", "9.10",
        "sm_90b", "a", "sm_a",
    ] {
        let e = s.parse::<Arch>().unwrap_err();
        let text = e.to_string();
        assert!(text.contains("sm_90"), "{s}: {text}");
        assert!(text.contains(&format!("{s:?}")), "{s}: {text}");
    }
}

#[test]
fn seventy_two_variants_with_the_abi_ids() {
    let all = Variant::all();
    assert_eq!(all.len(), 72);
    let distinct: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), 72);
    let pm = Variant {
        dtype: Dtype::F32,
        op: ReduceOp::PreMulSum,
    };
    // kernels/abi.cuh: CB_PREMULSUM 5.
    assert_eq!(pm.op_id(), 5);
    let v = Variant {
        dtype: Dtype::F32,
        op: ReduceOp::Avg,
    };
    // kernels/abi.cuh: CB_F32 8, CB_AVG 4.
    assert_eq!((v.dtype_id(), v.op_id()), (8, 4));
    assert_eq!(v.to_string(), "float/avg");
    assert_eq!(
        v.options(arch("sm_80"), Code::Ptx),
        vec![
            "--gpu-architecture=compute_80",
            "-DCB_DT=8",
            "-DCB_OP=4",
            "--fmad=false",
            "--std=c++17"
        ]
    );
    let first = all[0];
    assert_eq!((first.dtype_id(), first.op_id()), (0, 0));
    let last = all[71];
    assert_eq!((last.dtype_id(), last.op_id()), (11, 5));
}

#[test]
fn the_source_is_every_file_in_order() {
    let s = source();
    let mut at = 0;
    for (name, text) in SOURCES {
        let line = format!("#line 1 \"{name}\"\n");
        let i = s[at..].find(&line).expect(name) + at;
        assert!(s[i + line.len()..].starts_with(text), "{name}");
        at = i + line.len();
    }
    assert_eq!(required_entry_points(), &ENTRY_POINTS);
}

#[test]
fn fnv1a_is_the_standard_one() {
    assert_eq!(Fnv1a::new().finish(), 0xcbf2_9ce4_8422_2325);
    assert_eq!(Fnv1a::new().write(b"a").finish(), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(
        Fnv1a::new().write(b"foobar").finish(),
        0x8594_4171_f739_67e8
    );
}

#[test]
fn cache_keys_differ_by_source_options_arch_and_version() {
    let opts = |a: &str| Variant::all()[0].options(arch(a), Code::Ptx);
    let base = cache_key("src", &opts("sm_90"), arch("sm_90"), (12, 9));
    assert_eq!(
        base,
        cache_key("src", &opts("sm_90"), arch("sm_90"), (12, 9))
    );
    let others = [
        cache_key("src ", &opts("sm_90"), arch("sm_90"), (12, 9)),
        cache_key("src", &opts("sm_80"), arch("sm_90"), (12, 9)),
        cache_key("src", &opts("sm_90"), arch("sm_80"), (12, 9)),
        cache_key("src", &opts("sm_90"), arch("sm_90a"), (12, 9)),
        cache_key("src", &opts("sm_90"), arch("sm_90"), (12, 8)),
        cache_key("src", &opts("sm_90"), arch("sm_90"), (13, 0)),
        cache_key(
            "src",
            &Variant::all()[1].options(arch("sm_90"), Code::Ptx),
            arch("sm_90"),
            (12, 9),
        ),
        cache_key("src", &opts("sm_90")[..4], arch("sm_90"), (12, 9)),
    ];
    for (i, k) in others.iter().enumerate() {
        assert_ne!(*k, base, "variation {i}");
    }
    // Field boundaries count: moving a character between options changes the key.
    let a = cache_key("s", &["ab".into(), "c".into()], arch("sm_90"), (12, 9));
    let b = cache_key("s", &["a".into(), "bc".into()], arch("sm_90"), (12, 9));
    assert_ne!(a, b);
}

#[test]
fn cache_dir_precedence() {
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    };
    let all = env(&[
        ("COLLBENCH_CACHE_DIR", "/c"),
        ("XDG_CACHE_HOME", "/x"),
        ("HOME", "/h"),
    ]);
    assert_eq!(cache_dir_from(all), Some(PathBuf::from("/c")));
    let xdg = env(&[
        ("COLLBENCH_CACHE_DIR", ""),
        ("XDG_CACHE_HOME", "/x"),
        ("HOME", "/h"),
    ]);
    assert_eq!(
        cache_dir_from(xdg),
        Some(PathBuf::from("/x/collbench/kernels"))
    );
    // A relative XDG_CACHE_HOME is invalid (XDG spec): ignored.
    let rel = env(&[("XDG_CACHE_HOME", "x"), ("HOME", "/h")]);
    assert_eq!(
        cache_dir_from(rel),
        Some(PathBuf::from("/h/.cache/collbench/kernels"))
    );
    assert_eq!(cache_dir_from(env(&[])), None);
}

fn ptx(text: &str) -> Result<Image, CompileError> {
    Ok(Image::Ptx(text.to_string()))
}

fn never() -> Result<Image, CompileError> {
    panic!("compiled although cached")
}

#[test]
fn disk_cache_hit_miss_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(Some(dir.path().join("k")));
    let (p, o) = cache.get_or_insert_with(7, || ptx("// one\n")).unwrap();
    assert_eq!((p.bytes(), o), (&b"// one\n"[..], Origin::Compiled));
    let (_, o) = cache.get_or_insert_with(7, never).unwrap();
    assert_eq!(o, Origin::Memory);
    let file = cache.file(7).unwrap();
    assert!(file.exists());
    assert!(cache.take_warnings().is_empty());
    // No temporary files left behind.
    assert_eq!(std::fs::read_dir(dir.path().join("k")).unwrap().count(), 1);

    // A new process (a fresh cache on the same folder) reads the file.
    let again = Cache::new(Some(dir.path().join("k")));
    let (p, o) = again.get_or_insert_with(7, never).unwrap();
    assert_eq!((p.bytes(), o), (&b"// one\n"[..], Origin::Disk));
    // Another key misses.
    let (_, o) = again.get_or_insert_with(8, || ptx("// two\n")).unwrap();
    assert_eq!(o, Origin::Compiled);
    assert!(again.take_warnings().is_empty());
}

#[test]
fn a_corrupt_cache_file_is_compiled_again_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(Some(dir.path().to_path_buf()));
    cache.get_or_insert_with(7, || ptx("// good\n")).unwrap();
    let file = cache.file(7).unwrap();
    let good = std::fs::read(&file).unwrap();
    let corruptions: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"garbage".to_vec(),
        good[..good.len() - 2].to_vec(),
        {
            let mut g = good.clone();
            let n = g.len();
            g[n - 3] ^= 1;
            g
        },
        vec![0xff, 0xfe, b'\n', 0x80],
        // The file of another key.
        String::from_utf8(good.clone())
            .unwrap()
            .replace("key=0000000000000007", "key=0000000000000008")
            .into_bytes(),
    ];
    for (i, bad) in corruptions.into_iter().enumerate() {
        std::fs::write(&file, bad).unwrap();
        let fresh = Cache::new(Some(dir.path().to_path_buf()));
        let (p, o) = fresh.get_or_insert_with(7, || ptx("// good\n")).unwrap();
        assert_eq!(
            (p.bytes(), o),
            (&b"// good\n"[..], Origin::Compiled),
            "case {i}"
        );
        let w = fresh.take_warnings();
        assert!(w.len() == 1 && w[0].contains("corrupt"), "case {i}: {w:?}");
        assert_eq!(std::fs::read(&file).unwrap(), good, "case {i}: rewritten");
    }
}

#[test]
fn an_unusable_cache_folder_is_a_warning_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the folder should be: nothing can be written under it.
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "x").unwrap();
    let cache = Cache::new(Some(blocker.join("kernels")));
    for key in 1..4 {
        let (_, o) = cache.get_or_insert_with(key, || ptx("// p\n")).unwrap();
        assert_eq!(o, Origin::Compiled);
    }
    let w = cache.take_warnings();
    assert_eq!(w.len(), 1, "one warning, then no more disk attempts: {w:?}");
    assert!(
        w[0].contains("cannot write") && w[0].contains("COLLBENCH_CACHE_DIR"),
        "{w:?}"
    );

    // A cache file that cannot be read (a folder in its place).
    let cache = Cache::new(Some(dir.path().join("c")));
    std::fs::create_dir_all(cache.file(5).unwrap()).unwrap();
    let (_, o) = cache.get_or_insert_with(5, || ptx("// p\n")).unwrap();
    assert_eq!(o, Origin::Compiled);
    let w = cache.take_warnings();
    assert!(w.iter().any(|w| w.contains("cannot read")), "{w:?}");
    assert!(
        w.iter()
            .any(|w| w.contains("cannot put") && w.contains("remove what is there")),
        "{w:?}"
    );
    assert!(
        !w.iter().any(|w| w.contains("COLLBENCH_CACHE_DIR")),
        "{w:?}"
    );
    // ... and only that entry is lost: the others are still cached.
    cache.get_or_insert_with(6, || ptx("// q\n")).unwrap();
    assert!(cache.file(6).unwrap().is_file());
    let fresh = Cache::new(Some(dir.path().join("c")));
    assert_eq!(fresh.get_or_insert_with(6, never).unwrap().1, Origin::Disk);

    // No folder at all: memory only, silently.
    let cache = Cache::new(None);
    cache.get_or_insert_with(5, || ptx("// p\n")).unwrap();
    assert_eq!(
        cache.get_or_insert_with(5, never).unwrap().1,
        Origin::Memory
    );
    assert!(cache.take_warnings().is_empty());
}

#[test]
fn a_folder_is_probed_as_writable_without_being_made() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("a/b/c");
    assert_eq!(writable_without_making(&deep), Ok(()));
    assert_eq!(writable_without_making(dir.path()), Ok(()));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "nothing made, nothing left: {left:?}");
    // A relative path whose first part is missing is made in the current
    // folder (the walk ends there, not at the empty path).
    assert_eq!(
        writable_without_making(Path::new("collbench-no-such/a/b")),
        Ok(())
    );
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let why = writable_without_making(&file.join("kernels")).unwrap_err();
    assert!(why.ends_with("file is not a folder"), "{why}");
    // Root passes permission bits there; making a folder is what fails.
    let why = writable_without_making(Path::new("/proc/collbench-no/emu")).unwrap_err();
    assert!(
        why.starts_with("it cannot be made: /proc is not writable"),
        "{why}"
    );
}

#[test]
fn compile_errors_are_not_cached() {
    let cache = Cache::new(None);
    let e = cache
        .get_or_insert_with(1, || Err(CompileError::new("boom")))
        .unwrap_err();
    assert_eq!(e.message, "boom");
    assert_eq!(
        cache.get_or_insert_with(1, || ptx("// ok\n")).unwrap().1,
        Origin::Compiled
    );
}

/// NVRTC, when this machine has it; `COLLBENCH_REQUIRE_NVRTC=1` makes its
/// absence a failure.
fn nvrtc() -> Option<&'static Nvrtc> {
    match Nvrtc::get() {
        Ok(n) => Some(n),
        Err(e) if std::env::var("COLLBENCH_REQUIRE_NVRTC").is_ok_and(|v| v == "1") => {
            panic!("COLLBENCH_REQUIRE_NVRTC=1 but {e}")
        }
        Err(e) => {
            eprintln!("skipped (no NVRTC): {e}");
            None
        }
    }
}

/// A tiny stand-in for the kernels: fast, and with `cb_fill` only.
const FIXTURE: &str =
    "extern \"C\" __global__ void cb_fill(int *p) { p[threadIdx.x] = CB_DT * 10 + CB_OP; }\n";

#[test]
fn compile_variants_through_the_disk_cache() {
    let Some(nvrtc) = nvrtc() else { return };
    let dir = tempfile::tempdir().unwrap();
    let variants = &Variant::all()[..3];
    let cache = Cache::new(Some(dir.path().to_path_buf()));
    let r = compile_variants(
        nvrtc,
        &cache,
        FIXTURE,
        variants,
        (arch("sm_80"), Code::Ptx),
        2,
        &["cb_fill"],
    );
    assert_eq!((r.compiled, r.cached, r.failed.len()), (3, 0, 0), "{r:?}");
    assert!(r.warnings.is_empty(), "{r:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);

    let fresh = Cache::new(Some(dir.path().to_path_buf()));
    let r = compile_variants(
        nvrtc,
        &fresh,
        FIXTURE,
        variants,
        (arch("sm_80"), Code::Ptx),
        2,
        &["cb_fill"],
    );
    assert_eq!((r.compiled, r.cached), (3, 3), "{r:?}");
    // Another architecture is another key.
    let r = compile_variants(
        nvrtc,
        &fresh,
        FIXTURE,
        variants,
        (arch("sm_90"), Code::Ptx),
        2,
        &["cb_fill"],
    );
    assert_eq!((r.compiled, r.cached), (3, 0), "{r:?}");
    assert_eq!(r.arch.to_string(), "sm_90");
    assert_eq!(r.nvrtc_version, nvrtc.version());
    // Cubins for the GPU at hand: other keys, kept and read back as bytes.
    for (cache, cached) in [
        (&fresh, 0),
        (&Cache::new(Some(dir.path().to_path_buf())), 3),
    ] {
        let r = compile_variants(
            nvrtc,
            cache,
            FIXTURE,
            variants,
            (arch("sm_90"), Code::Cubin),
            2,
            &["cb_fill"],
        );
        assert_eq!(
            (r.compiled, r.cached, r.failed.len()),
            (3, cached, 0),
            "{r:?}"
        );
    }

    // A corrupt file is compiled again, with a warning.
    let key = cache_key(
        FIXTURE,
        &variants[0].options(arch("sm_80"), Code::Ptx),
        arch("sm_80"),
        nvrtc.version(),
    );
    std::fs::write(fresh.file(key).unwrap(), "// truncated").unwrap();
    let third = Cache::new(Some(dir.path().to_path_buf()));
    let r = compile_variants(
        nvrtc,
        &third,
        FIXTURE,
        variants,
        (arch("sm_80"), Code::Ptx),
        1,
        &["cb_fill"],
    );
    assert_eq!((r.compiled, r.cached, r.failed.len()), (3, 2, 0), "{r:?}");
    assert!(r.warnings.iter().any(|w| w.contains("corrupt")), "{r:?}");
}

#[test]
fn a_variant_lacking_an_entry_point_fails() {
    let Some(nvrtc) = nvrtc() else { return };
    let cache = Cache::new(None);
    let variants = &Variant::all()[..2];
    let r = compile_variants(
        nvrtc,
        &cache,
        FIXTURE,
        variants,
        (arch("sm_90"), Code::Ptx),
        2,
        &ENTRY_POINTS,
    );
    assert_eq!(r.compiled, 0);
    assert_eq!(r.failed.len(), 2);
    let (v, e) = &r.failed[0];
    assert_eq!(*v, variants[0]);
    assert!(
        e.message
            .contains("cb_collective, cb_fill_at, cb_poison, cb_verify")
            && !e.message.contains("cb_fill,"),
        "{e:?}"
    );
}

#[test]
fn a_variant_that_does_not_compile_fails_with_the_log() {
    let Some(nvrtc) = nvrtc() else { return };
    let cache = Cache::new(None);
    let src = "#if CB_OP == 1\n#error \"no prod here\"\n#endif\nextern \"C\" __global__ void cb_fill() {}\n";
    let r = compile_variants(
        nvrtc,
        &cache,
        src,
        &Variant::all()[..5],
        (arch("sm_90"), Code::Ptx),
        3,
        &[],
    );
    assert_eq!(r.compiled, 4, "{r:?}");
    assert_eq!(r.failed.len(), 1);
    assert_eq!(r.failed[0].0.op, ReduceOp::Prod);
    assert!(
        r.failed[0].1.log.contains("no prod here"),
        "{:?}",
        r.failed[0]
    );
    assert!(r.failed[0].1.detail().contains("no prod here"));
}

#[test]
fn the_embedded_kernels_compile_for_one_variant() {
    let Some(nvrtc) = nvrtc() else { return };
    let cache = Cache::new(None);
    let v = Variant {
        dtype: Dtype::Bf16,
        op: ReduceOp::Avg,
    };
    let r = compile_variants(
        nvrtc,
        &cache,
        source(),
        &[v],
        (arch("sm_80"), Code::Ptx),
        1,
        required_entry_points(),
    );
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert_eq!(r.compiled, 1);
}

/// The kernels themselves compile to machine code for sm_90 (the H100s the
/// GPU hand-off runs on): NVRTC's assembler accepts what PTX alone never
/// proves (registers, inline assembly), and every kernel is in the cubin.
#[test]
fn the_kernels_compile_to_a_cubin_for_sm_90() {
    let Some(nvrtc) = nvrtc() else { return };
    let cache = Cache::new(None);
    let r = compile_variants(
        nvrtc,
        &cache,
        source(),
        &Variant::all()[..1],
        (arch("sm_90"), Code::Cubin),
        1,
        required_entry_points(),
    );
    assert_eq!((r.compiled, r.failed.len()), (1, 0), "{r:?}");
    assert_eq!(r.code, Code::Cubin);
}
