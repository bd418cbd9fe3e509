//! The CPUs this process runs on, counted once: the standard library's
//! count reads the cgroup's files on every call (tens of microseconds of
//! system calls), which a rank entering a barrier must not spend while its
//! peers leave it.

use std::sync::OnceLock;

/// The CPUs this process may use (its affinity, and its cgroup's CPU
/// quota), as the process had them when first asked; at least 1.
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The CPUs online on this node, whatever this process is bound to (rank
/// processes bound to a core each still share the node's); at least
/// [`cores`].
pub fn online() -> usize {
    // SAFETY: sysconf reads a system value; no memory is passed.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(0).max(cores())
}

/// Whether the host engine binds its rank threads to CPUs
/// (`COLLBENCH_BIND`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bind {
    /// Each rank thread of a process that runs several gets a CPU of its
    /// own, distinct cores first, where there are enough CPUs.
    Auto,
    /// The scheduler places them (the default of the library; the CLI's
    /// with `COLLBENCH_BIND=none`).
    #[default]
    None,
}

/// The variable that turns binding off.
pub const BIND_VAR: &str = "COLLBENCH_BIND";

impl Bind {
    /// `value` of [`BIND_VAR`]: `auto` (also unset or empty) or `none`; a
    /// bad value is named with what it takes.
    pub fn from_value(value: Option<&str>) -> Result<Bind, String> {
        match value.map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(Bind::Auto),
            Some(v) if v.eq_ignore_ascii_case("auto") => Ok(Bind::Auto),
            Some(v) if v.eq_ignore_ascii_case("none") => Ok(Bind::None),
            Some(v) => Err(format!(
                "{BIND_VAR}={v:?}: expected auto (each host rank thread on a CPU of its own) or none (the scheduler places them)"
            )),
        }
    }

    /// The setting of this process's environment.
    pub fn from_env() -> Result<Bind, String> {
        Bind::from_value(std::env::var(BIND_VAR).ok().as_deref())
    }
}

/// The CPUs the calling thread may run on (its affinity mask), ascending;
/// empty when the mask cannot be read.
pub fn allowed() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity
    // writes at most its size; CPU_ISSET reads inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// A physical core: (package, core id).
pub type Core = (u32, u32);

/// The physical core of `cpu`, from sysfs; None where the kernel does not
/// say.
pub fn core_of(cpu: usize) -> Option<Core> {
    let read = |what: &str| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}"))
            .ok()?
            .trim()
            .parse::<u32>()
            .ok()
    };
    Some((read("physical_package_id")?, read("core_id")?))
}

/// `n` CPUs of `allowed` for `n` rank threads, or None when there are fewer
/// (then binding would put two ranks on one CPU). The CPUs of distinct
/// physical cores (`core`; None: each CPU its own) come first, one thread
/// of each core in turn, and the choice starts at `start` in that order,
/// so that processes started side by side (each its own `start`) tend to
/// take different CPUs.
pub fn spread(
    allowed: &[usize],
    core: impl Fn(usize) -> Option<Core>,
    n: usize,
    start: usize,
) -> Option<Vec<usize>> {
    if n == 0 || n > allowed.len() {
        return None;
    }
    // The allowed CPUs of each core, cores in order of their first CPU.
    let mut cores: Vec<(Option<Core>, Vec<usize>)> = Vec::new();
    for &c in allowed {
        let id = core(c);
        match cores.iter_mut().find(|(k, _)| k.is_some() && *k == id) {
            Some((_, cpus)) => cpus.push(c),
            None => cores.push((id, vec![c])),
        }
    }
    let deepest = cores.iter().map(|(_, c)| c.len()).max().unwrap_or(0);
    let order: Vec<usize> = (0..deepest)
        .flat_map(|t| cores.iter().filter_map(move |(_, c)| c.get(t).copied()))
        .collect();
    let len = order.len();
    Some((0..n).map(|i| order[(start + i) % len]).collect())
}

/// Binds the calling thread to `cpu`.
pub fn bind_current(cpu: usize) -> std::io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; `cpu` is inside it.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_has_at_least_the_cpus_this_process_may_run_on() {
        // The affinity mask may hold more CPUs than a cgroup quota lets the
        // process use (`cores`); the node has every one of them.
        let allowed = allowed().len();
        assert!(online() >= allowed.max(1), "{} < {allowed}", online());
    }

    #[test]
    fn the_setting_is_read_and_a_bad_one_named() {
        assert_eq!(Bind::from_value(None), Ok(Bind::Auto));
        assert_eq!(Bind::from_value(Some(" ")), Ok(Bind::Auto));
        assert_eq!(Bind::from_value(Some("AUTO")), Ok(Bind::Auto));
        assert_eq!(Bind::from_value(Some(" none ")), Ok(Bind::None));
        let e = Bind::from_value(Some("cores")).unwrap_err();
        assert!(e.contains(BIND_VAR) && e.contains("\"cores\""), "{e}");
        assert_eq!(Bind::default(), Bind::None);
    }

    #[test]
    fn distinct_cores_come_first_and_each_start_takes_its_own() {
        // Two cores of two threads each, Linux's numbering: CPUs 0 and 2
        // share core 0, 1 and 3 core 1.
        let smt = |c: usize| Some((0, (c % 2) as u32));
        let all = [0, 1, 2, 3];
        assert_eq!(spread(&all, smt, 2, 0), Some(vec![0, 1]));
        assert_eq!(spread(&all, smt, 4, 0), Some(vec![0, 1, 2, 3]));
        // Started elsewhere, still one thread of each core.
        for start in 0..8 {
            let two = spread(&all, smt, 2, start).unwrap();
            assert_ne!(smt(two[0]), smt(two[1]), "start {start}: {two:?}");
        }
        assert_eq!(spread(&all, smt, 2, 1), Some(vec![1, 2]));
        // Siblings numbered next to each other (0,1 one core; 2,3 the other).
        let paired = |c: usize| Some((0, (c / 2) as u32));
        assert_eq!(spread(&all, paired, 2, 0), Some(vec![0, 2]));
        // No topology: each CPU its own; only the allowed ones; never two
        // threads on one CPU.
        assert_eq!(spread(&[3, 5, 6], |_| None, 3, 4), Some(vec![5, 6, 3]));
        assert_eq!(spread(&[3, 5], |_| None, 3, 0), None);
        assert_eq!(spread(&[], |_| None, 1, 0), None);
        assert_eq!(spread(&all, smt, 0, 0), None);
    }

    #[test]
    fn a_thread_bound_runs_on_its_cpu() {
        let cpus = allowed();
        assert!(!cpus.is_empty());
        let last = *cpus.last().unwrap();
        let seen = std::thread::spawn(move || {
            bind_current(last).map(|()| {
                // SAFETY: sched_getcpu has no preconditions.
                (allowed(), unsafe { libc::sched_getcpu() })
            })
        })
        .join()
        .unwrap()
        .expect("binding to an allowed CPU");
        assert_eq!(seen, (vec![last], last as i32));
        assert!(bind_current(libc::CPU_SETSIZE as usize).is_err());
        assert_eq!(cores(), cores());
    }
}
