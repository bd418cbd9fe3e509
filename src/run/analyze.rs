//! `collbench analyze DIR|FILE... [--json]`: diagnose a hang from dumps.

use super::{OK, USAGE};
use crate::analyze::{analyze_paths_observed, render_text, Limits};
use crate::cli::AnalyzeArgs;
use crate::report::progress::Progress;

/// Exit 0 healthy, 1 problem, 2 nothing readable.
pub fn analyze(a: &AnalyzeArgs) -> i32 {
    // A bar when there are enough files for reading them to take a while.
    let mut bar: Option<Progress> = None;
    let mut on_file = |i: usize, total: usize, path: &std::path::Path| {
        if i == 0 && total >= 16 {
            bar = Some(Progress::new(total as u64, "files", true));
        }
        if let Some(b) = &bar {
            if i > 0 {
                b.done_one();
            }
            b.current(path.display().to_string());
        }
    };
    let result = analyze_paths_observed(&a.paths, &Limits::default(), &mut on_file);
    if let Some(b) = &bar {
        b.finish();
    }
    match result {
        Ok(d) => {
            let text = if a.json {
                match serde_json::to_string_pretty(&d) {
                    Ok(text) => text + "\n",
                    Err(e) => {
                        say!("collbench analyze: cannot encode the diagnosis: {e}");
                        return USAGE;
                    }
                }
            } else {
                render_text(&d)
            };
            if let Err(e) = super::emit_output(&mut std::io::stdout().lock(), &text) {
                say!("collbench analyze: writing the diagnosis to stdout: {e}");
                return USAGE;
            }
            for u in &d.unreadable {
                say!("collbench analyze: unreadable: {}: {}", u.path, u.reason);
            }
            let code = d.exit_code();
            debug_assert!(code == OK || code == 1);
            code
        }
        Err(e) => {
            say!("collbench analyze: {e}");
            e.exit_code()
        }
    }
}
