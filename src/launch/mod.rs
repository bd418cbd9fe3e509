//! Who am I: how ranks come to be, and the worlds they run in
//! ([`open_worlds`]). Thread ranks of this process (up to
//! [`max_thread_ranks`]), or one rank per process under MPI. Under an MPI
//! or Slurm launcher with several tasks, a build without MPI would run N
//! independent worlds and print N misleading tables: [`foreign_launcher`]
//! notices that first.

#[cfg(feature = "mpi")]
mod mpi;
#[cfg(not(feature = "mpi"))]
#[path = "mpi_disabled.rs"]
mod mpi;

mod worlds;

pub use self::mpi::{init as init_mpi, Mpi};
pub use worlds::{open_worlds, LaunchError, WorldSpec, Worlds};

/// Why joining or using the MPI world failed (one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MpiError(pub String);

/// This machine's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The most thread ranks this machine runs: oversubscribing cores works
/// (waits yield), but beyond 32 ranks per core each rank gets too little
/// time to finish a sweep in reasonable time.
pub fn max_thread_ranks() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores * 32).min(1024)
}

/// Environment variables launchers set, with the world size they announce.
const LAUNCHERS: [(&str, &str); 5] = [
    ("Open MPI", "OMPI_COMM_WORLD_SIZE"),
    ("PMIx", "PMIX_SIZE"),
    ("MPICH/PMI", "PMI_SIZE"),
    ("MPICH/Hydra", "MPI_LOCALNRANKS"),
    ("Slurm", "SLURM_NTASKS"),
];

/// The launcher that started this process as one of several tasks, if any
/// (`get` reads an environment variable).
pub fn foreign_launcher_in(get: impl Fn(&str) -> Option<String>) -> Option<(String, usize)> {
    LAUNCHERS.iter().find_map(|(name, var)| {
        let n: usize = get(var)?.trim().parse().ok()?;
        // srun inside an allocation sets SLURM_NTASKS even for one task per step.
        let slurm_step = *name == "Slurm" && get("SLURM_STEP_ID").is_none();
        (n > 1 && !slurm_step).then(|| (name.to_string(), n))
    })
}

/// [`foreign_launcher_in`] over this process's environment.
pub fn foreign_launcher() -> Option<(String, usize)> {
    foreign_launcher_in(|v| std::env::var(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn launchers_with_several_tasks_are_noticed() {
        assert_eq!(
            foreign_launcher_in(env(&[("OMPI_COMM_WORLD_SIZE", "2")])),
            Some(("Open MPI".into(), 2))
        );
        assert_eq!(
            foreign_launcher_in(env(&[("PMI_SIZE", "4")])),
            Some(("MPICH/PMI".into(), 4))
        );
        assert_eq!(
            foreign_launcher_in(env(&[("SLURM_NTASKS", "8"), ("SLURM_STEP_ID", "0")])),
            Some(("Slurm".into(), 8))
        );
    }

    #[test]
    fn single_tasks_and_allocations_are_fine() {
        assert_eq!(
            foreign_launcher_in(env(&[("OMPI_COMM_WORLD_SIZE", "1")])),
            None
        );
        assert_eq!(
            foreign_launcher_in(env(&[("SLURM_NTASKS", "8")])),
            None,
            "sbatch shell, not an srun step"
        );
        assert_eq!(foreign_launcher_in(env(&[])), None);
    }
}
