//! Process entry: parse the command line, run, exit with the code.

use std::io::Write;

fn main() {
    // A closed stdout (`collbench compare a b | head`) is no reason to die:
    // writes to it fail (and are ignored), so a command still writes its
    // files and exits with its own code (a regression's 1, not SIGPIPE's
    // 141); a sweep stops as for a signal (see run::emit).
    // SAFETY: setting the disposition of one signal at start-up.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let argv = collbench::cli::aliases::command_line(std::env::args_os().collect());
    let cli = match collbench::cli::parse_from(argv) {
        Ok(c) => c,
        Err(e) if is_bad_value(&e) => {
            // One line: the flag, the value, why, and the valid values.
            let text = e.render().to_string();
            let line: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                .collect();
            // Ignoring errors: stderr may be a closed pipe too.
            let _ = writeln!(std::io::stderr(), "{}", line.join(" "));
            std::process::exit(collbench::run::USAGE);
        }
        Err(e) => {
            // --help and --version print and exit 0; usage errors exit 2.
            let _ = e.print();
            std::process::exit(if e.use_stderr() {
                collbench::run::USAGE
            } else {
                collbench::run::OK
            });
        }
    };
    std::process::exit(collbench::run::run(cli));
}

/// A flag's value was refused (not a missing or unknown flag).
fn is_bad_value(e: &clap::Error) -> bool {
    use clap::error::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    )
}
