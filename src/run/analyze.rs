//! `collbench analyze DIR|FILE... [--json]`: diagnose a hang from dumps.

use super::{OK, USAGE};
use crate::analyze::{analyze_paths, render_text};
use crate::cli::AnalyzeArgs;

/// Exit 0 healthy, 1 problem, 2 nothing readable.
pub fn analyze(a: &AnalyzeArgs) -> i32 {
    match analyze_paths(&a.paths) {
        Ok(d) => {
            if a.json {
                match serde_json::to_string_pretty(&d) {
                    Ok(text) => println!("{text}"),
                    Err(e) => {
                        eprintln!("collbench analyze: cannot encode the diagnosis: {e}");
                        return USAGE;
                    }
                }
            } else {
                print!("{}", render_text(&d));
            }
            for u in &d.unreadable {
                eprintln!("collbench analyze: unreadable: {}: {}", u.path, u.reason);
            }
            let code = d.exit_code();
            debug_assert!(code == OK || code == 1);
            code
        }
        Err(e) => {
            eprintln!("collbench analyze: {e}");
            e.exit_code()
        }
    }
}
