//! Compiling every variant through NVRTC (and the cache), on several threads.

use super::{required_entry_points, source, Arch, Cache, Code, Origin, Variant};
use crate::engine::exec::cuda::nvrtc::{CompileError, Nvrtc};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// What compiling every variant gave.
#[derive(Debug)]
pub struct Report {
    pub arch: Arch,
    /// PTX, or cubins of machine code.
    pub code: Code,
    pub nvrtc_version: (i32, i32),
    /// Variants compiled (now, or found in the cache).
    pub compiled: usize,
    /// Variants that failed, in variant order, with why.
    pub failed: Vec<(Variant, CompileError)>,
    /// Of `compiled`, how many came from the cache.
    pub cached: usize,
    pub seconds: f64,
    /// Cache problems (never fatal).
    pub warnings: Vec<String>,
}

/// Compiles every variant of the embedded kernels for `arch` to `code` on
/// `threads` threads, through `cache`.
pub fn compile_all(nvrtc: &Nvrtc, cache: &Cache, arch: Arch, code: Code, threads: usize) -> Report {
    compile_variants(
        nvrtc,
        cache,
        source(),
        &Variant::all(),
        (arch, code),
        threads,
        required_entry_points(),
    )
}

/// Compiles `variants` of `source`, requiring the `entries` kernels in each.
pub fn compile_variants(
    nvrtc: &Nvrtc,
    cache: &Cache,
    source: &str,
    variants: &[Variant],
    (arch, code): (Arch, Code),
    threads: usize,
    entries: &[&str],
) -> Report {
    let start = Instant::now();
    let next = AtomicUsize::new(0);
    let one = |v: Variant| -> Result<Origin, CompileError> {
        let (ptx, origin) = cache.get_or_compile(
            nvrtc,
            source,
            &v.program_name(),
            &v.options(arch, code),
            arch,
        )?;
        let missing = ptx.missing_entry_points(entries);
        if missing.is_empty() {
            Ok(origin)
        } else {
            Err(CompileError::new(format!(
                "the {} lacks the kernel{} {}",
                ptx.kind(),
                if missing.len() == 1 { "" } else { "s" },
                missing.join(", ")
            )))
        }
    };
    let mut results: Vec<(usize, Result<Origin, CompileError>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.clamp(1, variants.len().max(1)))
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(v) = variants.get(i) else {
                            return done;
                        };
                        done.push((i, one(*v)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join().unwrap_or_else(|_| {
                    vec![(
                        usize::MAX,
                        Err(CompileError::new("a compile thread panicked")),
                    )]
                })
            })
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    let mut report = Report {
        arch,
        code,
        nvrtc_version: nvrtc.version(),
        compiled: 0,
        failed: Vec::new(),
        cached: 0,
        seconds: 0.0,
        warnings: Vec::new(),
    };
    for (i, r) in results {
        match r {
            Ok(origin) => {
                report.compiled += 1;
                report.cached += usize::from(origin != Origin::Compiled);
            }
            Err(e) => match variants.get(i) {
                Some(v) => report.failed.push((*v, e)),
                None => report.warnings.push(e.message),
            },
        }
    }
    report.seconds = start.elapsed().as_secs_f64();
    report.warnings.extend(cache.take_warnings());
    tracing::info!(
        %arch,
        code = code.name(),
        nvrtc = %format_args!("{}.{}", report.nvrtc_version.0, report.nvrtc_version.1),
        variants = variants.len(),
        compiled = report.compiled,
        cached = report.cached,
        failed = report.failed.len(),
        seconds = report.seconds,
        "kernel variants compiled"
    );
    report
}
