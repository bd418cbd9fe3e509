//! Units as types: byte sizes (parsed and formatted in one place), the
//! sweep grammar `MIN:MAX[:xF|:+STEP]`, and durations; and the files a
//! user names: inputs opened without blocking on a FIFO, outputs written
//! where their links lead (in place for descriptors and devices).

use std::fmt;
use std::time::Duration;

mod files;
pub use files::*;

/// A number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    /// Binary units, as cluster people read buffer sizes: 8B, 64KiB, 1GiB.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut u = 0;
        while v >= 1024.0 && u < UNITS.len() - 1 {
            v /= 1024.0;
            u += 1;
        }
        if v.fract() == 0.0 {
            return write!(f, "{}{}", v as u64, UNITS[u]);
        }
        // Two decimals, or as many more (up to four) as it takes not to
        // round to a whole number it is not (16380 B is not 16 KiB);
        // failing that, the bytes themselves.
        let shown = (2..=4)
            .map(|d| format!("{v:.d$}"))
            .find(|s| !s.trim_end_matches('0').ends_with('.'));
        match shown {
            Some(s) => write!(f, "{s}{}", UNITS[u]),
            None => write!(f, "{}B", self.0),
        }
    }
}

/// Why a size, sweep or duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnitError(pub String);

fn err<T>(msg: String) -> Result<T, UnitError> {
    Err(UnitError(msg))
}

/// Parses `64M`, `8B`, `1GiB`, `500KB`, `4096`. K/M/G and KiB/MiB/GiB are
/// powers of 1024; KB/MB/GB powers of 1000 (case-insensitive).
pub fn parse_bytes(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return err(format!(
            "'{s}' is not a size (expected a number with an optional unit, like 64M)"
        ));
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return err(format!(
                "unknown unit '{other}' in '{s}' (use B, K/KiB, M/MiB, G/GiB for powers of 1024, KB/MB/GB for powers of 1000)"
            ))
        }
    };
    let too_large = || UnitError(format!("size '{s}' is too large"));
    // Whole numbers exactly (a float holds 53 bits: 2^53 + 1 would read
    // as 2^53); fractions of a unit through a float.
    if !num.contains('.') {
        let v: u64 = num.parse().map_err(|_| too_large())?;
        return v
            .checked_mul(mult)
            .filter(|&b| b <= u64::MAX / 2)
            .ok_or_else(too_large);
    }
    let v: f64 = num
        .parse()
        .map_err(|_| UnitError(format!("'{num}' in '{s}' is not a number")))?;
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes > u64::MAX as f64 / 2.0 {
        return err(format!("size '{s}' is too large"));
    }
    if bytes.fract() != 0.0 {
        return err(format!("size '{s}' is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// How a sweep grows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Growth {
    Factor(f64),
    Step(u64),
}

/// Most sizes one sweep may hold.
pub const MAX_SIZES: usize = 10_000;

/// The sizes of `MIN:MAX[:xF|:+STEP]` (a single size is `MIN`).
pub fn parse_sweep(s: &str) -> Result<Vec<u64>, UnitError> {
    let parts: Vec<&str> = s.split(':').collect();
    let (min, max, growth) = match parts.as_slice() {
        [one] => {
            let v = parse_bytes(one)?;
            (v, v, Growth::Factor(2.0))
        }
        [a, b] => (parse_bytes(a)?, parse_bytes(b)?, Growth::Factor(2.0)),
        [a, b, g] => (parse_bytes(a)?, parse_bytes(b)?, parse_growth(g)?),
        _ => {
            return err(format!(
                "'{s}' is not a sweep (expected MIN:MAX[:xF|:+STEP], like 8B:64M)"
            ))
        }
    };
    sweep(min, max, growth)
}

fn parse_growth(g: &str) -> Result<Growth, UnitError> {
    let g = g.trim();
    if let Some(f) = g.strip_prefix('x').or_else(|| g.strip_prefix('*')) {
        let f: f64 = f
            .parse()
            .map_err(|_| UnitError(format!("'{g}' is not a factor (expected like x2)")))?;
        return Ok(Growth::Factor(f));
    }
    if let Some(step) = g.strip_prefix('+') {
        return Ok(Growth::Step(parse_bytes(step)?));
    }
    err(format!(
        "'{g}' is not a growth (expected xF for a factor or +STEP for a step, like x4 or +1M)"
    ))
}

/// The sizes from `min` to `max` inclusive.
pub fn sweep(min: u64, max: u64, growth: Growth) -> Result<Vec<u64>, UnitError> {
    if min == 0 {
        return err("the smallest size must be at least 1 byte".into());
    }
    if min > max {
        return err(format!(
            "sweep goes from {} down to {}: the minimum must not exceed the maximum",
            Bytes(min),
            Bytes(max)
        ));
    }
    match growth {
        Growth::Factor(f) if !(f > 1.0 && f.is_finite()) => {
            return err(format!("factor {f} must be a finite number greater than 1"))
        }
        Growth::Step(0) => return err("step must be at least 1 byte".into()),
        _ => {}
    }
    let mut out = Vec::new();
    let mut s = min;
    while s <= max {
        if out.len() == MAX_SIZES {
            return err(format!(
                "sweep has more than {MAX_SIZES} sizes; use a larger factor or step"
            ));
        }
        out.push(s);
        let next = match growth {
            // At least a byte more: a small size times a small factor
            // (8 B x 1.1) would round back to itself and end the sweep.
            Growth::Factor(f) => (((s as f64) * f).floor() as u64).max(s.saturating_add(1)),
            Growth::Step(step) => s.saturating_add(step),
        };
        if next <= s {
            break;
        }
        s = next;
    }
    Ok(out)
}

/// Parses `300`, `3s`, `500ms`, `20us`, `5m`, `1h`, `2.5s`, and sums of parts each
/// with its unit: `2m30s`, `1h 30m`; positive.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let d = parse_duration_or_zero(s)?;
    if d.is_zero() {
        return err(format!("duration '{s}' must be positive"));
    }
    Ok(d)
}

/// [`parse_duration`], zero allowed however it is written (`0`, `0s`,
/// `0h0m`).
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, UnitError> {
    let not_one = || {
        UnitError(format!(
            "'{s}' is not a duration (expected like 30s, 500ms, 5m, 1h30m)"
        ))
    };
    let is_num = |c: char| c.is_ascii_digit() || c == '.';
    let mut rest = s.trim();
    let mut secs = 0.0;
    let mut parts = 0;
    while parts == 0 || !rest.is_empty() {
        let (num, after) = rest.split_at(rest.find(|c| !is_num(c)).unwrap_or(rest.len()));
        let v: f64 = num.parse().map_err(|_| not_one())?;
        let (unit, next) = after.split_at(after.find(is_num).unwrap_or(after.len()));
        let scale = match unit.trim() {
            // A bare number is seconds; in a sum every part needs its unit.
            "" if parts == 0 => 1.0,
            "" => return Err(not_one()),
            "s" => 1.0,
            "ms" => 1e-3,
            "ns" => 1e-9,
            "us" => 1e-6,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            other => {
                return err(format!(
                    "unknown time unit '{other}' in '{s}' (use ns, us, ms, s, m or h)"
                ))
            }
        };
        secs += v * scale;
        parts += 1;
        rest = next;
    }
    if !secs.is_finite() || secs > 1e9 {
        return err(format!(
            "duration '{s}' is too long (at most 1e9 seconds, about 31 years)"
        ));
    }
    if secs < 0.0 {
        return err(format!("duration '{s}' must be positive"));
    }
    let d = Duration::from_secs_f64(secs);
    if secs > 0.0 && d.is_zero() {
        return err(format!("duration '{s}' is shorter than a nanosecond"));
    }
    Ok(d)
}

/// A Unix time in seconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub fn utc_text(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// nccl-tests' `step:` field for a list of sizes: `F(factor)` when every
/// size is F times the one before, `N(bytes)` when every one is N more,
/// else the first two's ratio, rounded, as a factor.
pub fn nccl_tests_step(sizes: &[u64]) -> String {
    let pairs: Vec<(u64, u64)> = sizes.windows(2).map(|w| (w[0], w[1])).collect();
    let Some(&(a, b)) = pairs.first() else {
        return "2(factor)".into();
    };
    if a > 0 && b % a == 0 && pairs.iter().all(|&(x, y)| x > 0 && y == x * (b / a)) {
        return format!("{}(factor)", b / a);
    }
    if pairs
        .iter()
        .all(|&(x, y)| y.wrapping_sub(x) == b.wrapping_sub(a))
    {
        return format!("{}(bytes)", b.wrapping_sub(a));
    }
    format!("{}(factor)", (b as f64 / a.max(1) as f64).round())
}

/// Whether `c` would act on a terminal rather than show as itself: a
/// control character, a bidirectional override or isolate, a line or
/// paragraph separator, or an invisible mark (zero-width space, joiners,
/// direction marks, the byte-order mark, the Arabic letter mark).
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200B}'..='\u{200F}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
                | '\u{061C}'
                | '\u{FEFF}'
        )
}

/// `s` with its hidden characters ([`is_hidden`]) written as JSON's
/// escapes (`\u001b`; every one is in the Basic Multilingual Plane, so
/// JSON shown through here stays JSON): text from a file (a dump's field,
/// a results file's name, a log's line) cannot move the cursor, recolour
/// the terminal, reorder what is shown or forge a line. `lines`: newlines
/// and tabs are kept (a message of several lines); otherwise they are
/// escaped too (one field of a line).
pub fn shown(s: &str, lines: bool) -> std::borrow::Cow<'_, str> {
    let hide = |c: char| is_hidden(c) && !(lines && (c == '\n' || c == '\t'));
    if !s.chars().any(hide) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hide(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// [`shown`] in place, one field: a string read from a file.
pub fn show_field(s: &mut String) {
    if let std::borrow::Cow::Owned(t) = shown(s, false) {
        *s = t;
    }
}

/// `[0, 1, 3]` as `ranks 0, 1, 3` (or `rank 2`; runs as spans, `ranks 0-5`).
pub fn ranks_text(ranks: &[usize]) -> String {
    let noun = if ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{noun} {}", rank_spans(ranks).join(", "))
}

/// `ranks` as they are listed: runs of three or more consecutive ranks as
/// `first-last` (`[0, 1, 2, 3, 7, 9, 10]` as `0-3`, `7`, `9`, `10`), so a
/// world of a million ranks is a few words.
pub fn rank_spans(ranks: &[usize]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j].wrapping_add(1) {
            j += 1;
        }
        if j - i >= 2 {
            out.push(format!("{}-{}", ranks[i], ranks[j]));
        } else {
            out.extend(ranks[i..=j].iter().map(usize::to_string));
        }
        i = j + 1;
    }
    out
}

/// `n` and `noun`, plural when `n` is not 1: `1 rank`, `3 ranks`.
pub fn count_of(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A number for a message: as written for everyday magnitudes, in
/// scientific notation past them (`1e300` was printed with 300 digits).
pub fn fmt_number(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e7).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// This process's command line as one string, for results' `meta.command`:
/// an argument that is not UTF-8 (a file name) is shown lossily rather than
/// stopping the run (`std::env::args` panics on one).
pub fn command_line() -> String {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Opens a file a user named for reading. A FIFO (or a pipe, as
/// `<(zcat r.json.gz)` gives) is opened without waiting for a writer: with
/// one (process substitution), reads wait for its data as usual; with none,
/// it reads as empty rather than blocking forever.
pub fn open_input(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let fifo = std::fs::metadata(path)?.file_type().is_fifo();
    if !fifo {
        return std::fs::File::open(path);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function owns; only the
    // non-blocking flag changes, so reads wait for a writer's data.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// `bytes` without a leading UTF-8 byte-order mark (editors on Windows
/// write one; JSON and TOML parsers refuse it).
pub fn without_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// Reads at most `limit` bytes of a text file a user named ([`open_input`]):
/// a device or a runaway file (`/dev/zero`) stops at the limit and is an
/// error saying so, as is text that is not UTF-8.
pub fn read_input_text(path: &std::path::Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_input(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("over the limit of {limit} bytes"),
        ));
    }
    if without_bom(&bytes).len() < bytes.len() {
        bytes.drain(..3);
    }
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "not text (invalid UTF-8)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_never_shows_as_a_whole_number_it_is_not() {
        assert_eq!(Bytes(16384).to_string(), "16KiB");
        assert_eq!(Bytes(16380).to_string(), "15.996KiB");
        // 400 GiB and 2 MiB: not "429498827392B".
        assert_eq!(Bytes(429_498_827_392).to_string(), "400.002GiB");
        assert_eq!(Bytes(1536).to_string(), "1.50KiB");
        assert_eq!(Bytes((1 << 30) - 1).to_string(), "1073741823B");
    }

    #[test]
    fn runs_of_ranks_are_spans() {
        assert_eq!(ranks_text(&[2]), "rank 2");
        assert_eq!(ranks_text(&[0, 1, 3]), "ranks 0, 1, 3");
        assert_eq!(ranks_text(&[0, 1, 2, 3, 7, 9, 10]), "ranks 0-3, 7, 9, 10");
        assert_eq!(ranks_text(&[4, 5, 6, 8, 9, 10, 11]), "ranks 4-6, 8-11");
        assert_eq!(rank_spans(&[]), Vec::<String>::new());
    }
    #[test]
    fn units_are_binary_or_decimal_as_documented() {
        assert_eq!(parse_bytes("8B"), Ok(8));
        assert_eq!(parse_bytes("8"), Ok(8));
        assert_eq!(parse_bytes("64K"), Ok(64 << 10));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("64KB"), Ok(64_000));
        assert_eq!(parse_bytes("1M"), Ok(1 << 20));
        assert_eq!(parse_bytes("1mb"), Ok(1_000_000));
        assert_eq!(parse_bytes("8G"), Ok(8 << 30));
        assert_eq!(parse_bytes("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_bytes("1.5K"), Ok(1536));
        assert!(parse_bytes("1.3B").is_err());
        assert!(parse_bytes("12Q").unwrap_err().0.contains("unknown unit"));
        assert!(parse_bytes("M").is_err());
        assert!(parse_bytes("").is_err());
        // Whole numbers exactly, past a float's 53 bits.
        assert_eq!(parse_bytes("9007199254740993"), Ok((1 << 53) + 1));
        assert_eq!(parse_bytes("9223372036854775807"), Ok(u64::MAX / 2));
        for big in [
            "9223372036854775808",
            "99999999999999999999999",
            "8589934592G",
        ] {
            assert!(
                parse_bytes(big).unwrap_err().0.contains("too large"),
                "{big}"
            );
        }
    }

    #[test]
    fn sweeps_grow_by_factor_or_step() {
        assert_eq!(parse_sweep("8B:64B").unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(parse_sweep("8B:256K:x4").unwrap().len(), 8);
        assert_eq!(
            parse_sweep("1K:4K:+1K").unwrap(),
            vec![1024, 2048, 3072, 4096]
        );
        assert_eq!(parse_sweep("1M").unwrap(), vec![1 << 20]);
        assert_eq!(parse_sweep("8B:8G").unwrap().len(), 31);
        assert_eq!(parse_sweep("8:100").unwrap(), vec![8, 16, 32, 64]);
        // A factor too small to move a small size still grows it by a byte.
        assert_eq!(
            parse_sweep("8B:16B:x1.1").unwrap(),
            vec![8, 9, 10, 11, 12, 13, 14, 15, 16]
        );
        assert_eq!(parse_sweep("8B:4K:x1.1").unwrap().last(), Some(&4046));
    }

    #[test]
    fn bad_sweeps_say_why() {
        assert!(parse_sweep("64M:8B")
            .unwrap_err()
            .0
            .contains("must not exceed"));
        assert!(parse_sweep("0:8").is_err());
        assert!(parse_sweep("8:16:x1").is_err());
        assert!(parse_sweep("8:16:+0").is_err());
        assert!(parse_sweep("8:16:y2").is_err());
        assert!(parse_sweep("1:2:3:4").is_err());
        assert!(parse_sweep("1:1G:+1").unwrap_err().0.contains("more than"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("300"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ns"), Ok(Duration::from_nanos(250)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("3 parsecs").is_err());
        assert_eq!(parse_duration("2m30s"), Ok(Duration::from_secs(150)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1s500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("1m30").is_err(), "a part without its unit");
        assert!(parse_duration("").is_err());
        assert!(parse_duration("1m-30s").is_err());
        assert!(
            parse_duration("2m30x").is_err_and(|e| e.to_string().contains("unknown time unit 'x'"))
        );
    }

    #[test]
    fn bytes_format_in_binary_units() {
        assert_eq!(Bytes(8).to_string(), "8B");
        assert_eq!(Bytes(64 << 20).to_string(), "64MiB");
        assert_eq!(Bytes(1536).to_string(), "1.50KiB");
    }

    #[test]
    fn unix_times_read_as_utc_dates() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_text(1_795_290_534), "2026-11-21T19:48:54Z");
        assert_eq!(utc_text(-1), "1969-12-31T23:59:59Z");
    }
}
