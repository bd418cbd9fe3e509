//! Who am I: how ranks come to be. Today: threads of this process, one per
//! rank; the host can run up to [`max_thread_ranks`] of them.

/// The most thread ranks this machine runs: oversubscribing cores works
/// (waits yield), but beyond 32 ranks per core each rank gets too little
/// time to finish a sweep in reasonable time.
pub fn max_thread_ranks() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores * 32).min(1024)
}
