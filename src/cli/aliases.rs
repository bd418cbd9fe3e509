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

/// A size as nccl-tests reads `-b` and `-e`: a number (fractions allowed)
/// and an optional unit of which only the first letter counts, K, M or G
/// in either case and always a power of 1024 (`1KB` is 1024 bytes, `1.5M`
/// 1572864). `None` for what nccl-tests refuses (collbench's own parser
/// then says why, or reads units nccl-tests lacks, such as `8B`).
pub fn nccl_tests_size(v: &str) -> Option<u64> {
    let t = v.trim_start();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let size: f64 = t[..end].parse().ok()?;
    let units: f64 = match t[end..].trim_start().chars().next() {
        None => 1.0,
        Some('k' | 'K') => 1024.0,
        Some('m' | 'M') => 1048576.0,
        Some('g' | 'G') => 1073741824.0,
        Some(_) => return None,
    };
    let bytes = size * units;
    // As nccl-tests casts it: whole bytes, rounded down.
    (bytes.is_finite() && bytes < 9.0e18).then_some(bytes as u64)
}

/// A step factor as nccl-tests reads `-f` (C's `strtol` in base 0): the
/// whole number its text starts with, decimal, hexadecimal after `0x` or
/// octal after `0` (`2.5` is 2, `1e308` is 1); 0 where none (nccl-tests then
/// steps by `-i`).
pub fn nccl_tests_factor(v: &str) -> i64 {
    let t = v.trim_start();
    let (negative, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (16, h)
    } else if t.starts_with('0') {
        (8, t)
    } else {
        (10, t)
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    // Past the largest, strtol gives the largest (LONG_MAX or LONG_MIN).
    let n =
        i64::from_str_radix(&digits[..end], radix).unwrap_or(if end == 0 { 0 } else { i64::MAX });
    if negative {
        n.checked_neg().unwrap_or(i64::MIN)
    } else {
        n
    }
}

/// The command line collbench runs for `argv`: unchanged, or, when run as
/// an nccl-tests binary, the collective's subcommand with nccl-tests'
/// option names translated where collbench's differ (`--check N` is
/// `--check-iters N`), values where they mean more (`-o all` runs
/// nccl-tests' six operators, `mulsum` included) and sizes of `-b` and
/// `-e` read as nccl-tests reads them ([`nccl_tests_size`]).
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
    let size = |v: &str| nccl_tests_size(v).map_or_else(|| v.to_string(), |b| b.to_string());
    let factor = |v: &str| nccl_tests_factor(v).to_string();
    let (mut op_value, mut size_value, mut factor_value) = (false, false, false);
    let mut args = argv.into_iter().skip(1).peekable();
    while let Some(a) = args.next() {
        let after_op = std::mem::take(&mut op_value);
        let after_size = std::mem::take(&mut size_value);
        let after_factor = std::mem::take(&mut factor_value);
        let translated = match a.to_str() {
            Some(v) if after_size => size(v).into(),
            Some(v) if after_factor => factor(v).into(),
            Some("-f" | "--stepfactor") => {
                factor_value = true;
                a
            }
            Some(s) if s.starts_with("--stepfactor=") => {
                format!("--stepfactor={}", factor(&s[13..])).into()
            }
            // `-f2.5` and `-f=2.5` alike.
            Some(s) if s.starts_with("-f") && s.len() > 2 => {
                let eq = if s[2..].starts_with('=') { "=" } else { "" };
                format!("-f{eq}{}", factor(&s[2 + eq.len()..])).into()
            }
            // nccl-tests' `--check N`; without a value, collbench's own
            // `--check` (so an error names what was typed).
            Some("--check")
                if args
                    .peek()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| !n.starts_with('-') || n.parse::<i64>().is_ok()) =>
            {
                "--check-iters".into()
            }
            Some(s) if s.starts_with("--check=") => format!("--check-iters={}", &s[8..]).into(),
            Some("all") if after_op => ALL_OPS.into(),
            Some("-oall") => format!("-o{ALL_OPS}").into(),
            Some("-o=all") => format!("-o={ALL_OPS}").into(),
            Some("--op=all") => format!("--op={ALL_OPS}").into(),
            Some("-o" | "--op") => {
                op_value = true;
                a
            }
            Some("-b" | "-e" | "-i" | "--minbytes" | "--maxbytes" | "--stepbytes") => {
                size_value = true;
                a
            }
            // `-b1K` and `-b=1K` alike.
            Some(s) if ["-b", "-e", "-i"].iter().any(|f| s.starts_with(f)) && s.len() > 2 => {
                let eq = if s[2..].starts_with('=') { "=" } else { "" };
                format!("{}{eq}{}", &s[..2], size(&s[2 + eq.len()..])).into()
            }
            Some(s) if s.starts_with("--minbytes=") || s.starts_with("--maxbytes=") => {
                format!("{}{}", &s[..11], size(&s[11..])).into()
            }
            Some(s) if s.starts_with("--stepbytes=") => {
                format!("{}{}", &s[..12], size(&s[12..])).into()
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

    /// `-f` as nccl-tests' `strtol` reads it: the whole number it starts with.
    #[test]
    fn step_factors_are_whole_numbers_as_nccl_tests_reads_them() {
        for (v, n) in [
            ("2", 2),
            ("2.5", 2),
            ("1.0000001", 1),
            ("1e308", 1),
            ("0x10", 16),
            ("010", 8),
            ("-3", -3),
            ("abc", 0),
            ("99999999999999999999", i64::MAX),
        ] {
            assert_eq!(nccl_tests_factor(v), n, "{v}");
        }
        assert_eq!(
            line(&[
                "all_reduce_perf",
                "-f",
                "2.5",
                "-f2.5",
                "-f=2.5",
                "--stepfactor=2.5"
            ])[3..],
            ["-f", "2", "-f2", "-f=2", "--stepfactor=2"]
        );
    }

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
            (vec!["-o=all"], vec![&*format!("-o={six}")]),
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
    fn sizes_read_as_nccl_tests_reads_them() {
        for (v, want) in [
            ("8", Some(8)),
            ("1K", Some(1024)),
            ("1KB", Some(1024)),
            ("1kib", Some(1024)),
            ("1.5M", Some(1572864)),
            ("2 G", Some(2 << 30)),
            ("32m", Some(32 << 20)),
            ("8B", None),
            ("1T", None),
            ("x", None),
            ("-8", None),
        ] {
            assert_eq!(nccl_tests_size(v), want, "{v}");
        }
        let argv = [
            "all_reduce_perf",
            "-b",
            "1KB",
            "-e1MB",
            "--minbytes=2KB",
            "--maxbytes",
            "8B",
            "-i",
            "1KB",
        ];
        assert_eq!(
            line(&argv)[3..],
            [
                "-b",
                "1024",
                "-e1048576",
                "--minbytes=2048",
                "--maxbytes",
                "8B",
                "-i",
                "1024"
            ]
        );
        // `-b=1KB` as `-b 1KB` (it kept collbench's 1000).
        assert_eq!(
            line(&["all_reduce_perf", "-b=1KB", "-e=4K", "-i=1KB"])[3..],
            ["-b=1024", "-e=4096", "-i=1024"]
        );
        // collbench's own name keeps its units (KB: 1000 bytes).
        assert_eq!(line(&["collbench", "all-reduce", "-b", "1KB"])[3], "1KB");
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
        // No value after it: collbench's own `--check`, as typed.
        for tail in [&["--check"][..], &["--check", "-n", "5"]] {
            let mut argv = vec!["all_reduce_perf"];
            argv.extend(tail);
            assert_eq!(line(&argv)[3], "--check", "{tail:?}");
        }
        assert_eq!(
            line(&["all_reduce_perf", "--check", "-1"])[3],
            "--check-iters"
        );
        assert_eq!(
            collective_of(Path::new("sendrecv_perf")),
            Some(Collective::SendRecv)
        );
        assert_eq!(collective_of(Path::new("hypercube_perf")), None);
    }
}
