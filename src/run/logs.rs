//! Logs on stderr through `tracing`: none by default, `-v` info, `-vv`
//! debug; `COLLBENCH_LOG` (tracing's env-filter syntax, e.g.
//! `collbench=debug` or `collbench::engine=trace`) overrides both. Lines
//! are written with any progress bar cleared, so they never mix.

use crate::report::progress;
use std::io::{IsTerminal, Write};
use tracing_subscriber::EnvFilter;

/// Writes one log record to stderr, the progress bar out of the way.
struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        progress::suspend(|| std::io::stderr().lock().write_all(buf))?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The filter for `verbose` (-v count), unless `COLLBENCH_LOG` says
/// otherwise; a bad `COLLBENCH_LOG` is said once and ignored.
fn filter(verbose: u8) -> EnvFilter {
    let level = match verbose {
        0 => "off",
        1 => "collbench=info",
        _ => "collbench=debug",
    };
    match std::env::var("COLLBENCH_LOG") {
        Ok(spec) if !spec.trim().is_empty() => {
            EnvFilter::try_new(spec.trim()).unwrap_or_else(|e| {
                say!("collbench: warning: COLLBENCH_LOG '{spec}' ignored: {e}");
                EnvFilter::new(level)
            })
        }
        _ => EnvFilter::new(level),
    }
}

/// Installs the subscriber for this process (once; later calls do nothing).
pub fn init(verbose: u8) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(verbose))
        .with_writer(|| Stderr)
        .with_timer(tracing_subscriber::fmt::time::uptime())
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .try_init();
}
