//! nccl-tests' binary names: run as `all_reduce_perf` (a link to collbench,
//! made by `collbench install-aliases DIR`), collbench behaves as that
//! binary: the collective is the binary's, nccl-tests' flags and long
//! options are read as nccl-tests reads them, its defaults hold (`-a 1`,
//! 32 MiB, nccl-tests' text on stdout).

use crate::engine::types::Collective;
use std::ffi::OsString;
use std::path::Path;

/// nccl-tests' binaries that collbench has a collective for.
pub const BINARIES: [(&str, Collective); 10] = [
    ("all_reduce_perf", Collective::AllReduce),
    ("all_gather_perf", Collective::AllGather),
    ("reduce_scatter_perf", Collective::ReduceScatter),
    ("broadcast_perf", Collective::Broadcast),
    ("reduce_perf", Collective::Reduce),
    ("alltoall_perf", Collective::AllToAll),
    ("alltoallv_perf", Collective::AllToAllV),
    ("gather_perf", Collective::Gather),
    ("scatter_perf", Collective::Scatter),
    ("sendrecv_perf", Collective::SendRecv),
];

/// The collective of an nccl-tests binary name (`all_reduce_perf`, also
/// with the `_mpi` suffix nccl-tests' MPI builds may carry).
pub fn collective_of(program: &Path) -> Option<Collective> {
    let name = program.file_name()?.to_str()?;
    let name = name.strip_suffix("_mpi").unwrap_or(name);
    BINARIES.iter().find(|(b, _)| *b == name).map(|&(_, c)| c)
}

/// The command line collbench runs for `argv`: unchanged, or, when run as
/// an nccl-tests binary, the collective's subcommand with nccl-tests'
/// option names translated where collbench's differ (`--check N` is
/// `--check-iters N`) and values where they mean more (`-o all` runs
/// nccl-tests' six operators, `mulsum` included).
pub fn command_line(argv: Vec<OsString>) -> Vec<OsString> {
    let Some(coll) = argv.first().and_then(|p| collective_of(Path::new(p))) else {
        return argv;
    };
    let mut out: Vec<OsString> = vec![
        argv[0].clone(),
        coll.name().into(),
        "--as-nccl-tests".into(),
    ];
    const ALL_OPS: &str = "sum,prod,max,min,avg,mulsum";
    let mut op_value = false;
    for a in argv.into_iter().skip(1) {
        let after_op = std::mem::take(&mut op_value);
        let translated = match a.to_str() {
            Some("--check") => "--check-iters".into(),
            Some(s) if s.starts_with("--check=") => format!("--check-iters={}", &s[8..]).into(),
            Some("all") if after_op => ALL_OPS.into(),
            Some("-oall") => format!("-o{ALL_OPS}").into(),
            Some("--op=all") => format!("--op={ALL_OPS}").into(),
            Some("-o" | "--op") => {
                op_value = true;
                a
            }
            _ => a,
        };
        out.push(translated);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str]) -> Vec<String> {
        command_line(args.iter().map(OsString::from).collect())
            .into_iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn all_operators_are_nccl_tests_six_under_its_names() {
        let six = "sum,prod,max,min,avg,mulsum";
        for (args, want) in [
            (vec!["-o", "all"], vec!["-o", six]),
            (vec!["--op", "all"], vec!["--op", six]),
            (vec!["-oall"], vec![&*format!("-o{six}")]),
            (vec!["--op=all"], vec![&*format!("--op={six}")]),
            (vec!["-d", "all"], vec!["-d", "all"]),
            (vec!["-o", "sum", "all"], vec!["-o", "sum", "all"]),
        ] {
            let mut argv = vec!["all_reduce_perf"];
            argv.extend(&args);
            let got = line(&argv);
            assert_eq!(got[3..], want, "{args:?}");
        }
        // collbench's own name keeps `--op all` at the five.
        assert_eq!(line(&["collbench", "all-reduce", "--op", "all"])[3], "all");
    }

    #[test]
    fn a_perf_name_becomes_its_collective() {
        assert_eq!(
            line(&["/opt/bin/all_reduce_perf", "-b", "8", "--check", "1"]),
            [
                "/opt/bin/all_reduce_perf",
                "all-reduce",
                "--as-nccl-tests",
                "-b",
                "8",
                "--check-iters",
                "1"
            ]
        );
        assert_eq!(
            line(&["alltoall_perf_mpi", "--check=2"])[1..],
            ["all-to-all", "--as-nccl-tests", "--check-iters=2"]
        );
        assert_eq!(
            line(&["collbench", "all-reduce", "--check"]),
            ["collbench", "all-reduce", "--check"]
        );
        assert_eq!(
            collective_of(Path::new("sendrecv_perf")),
            Some(Collective::SendRecv)
        );
        assert_eq!(collective_of(Path::new("hypercube_perf")), None);
    }
}
