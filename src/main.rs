//! Process entry: parse the command line, run, exit with the code.

use clap::Parser;

fn main() {
    // A closed stdout (`collbench info | head`) ends the process quietly, as
    // it does for other Unix tools, instead of a panic in println!.
    // SAFETY: restoring the default disposition of one signal at start-up.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = match collbench::cli::Cli::try_parse() {
        Ok(c) => c,
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
