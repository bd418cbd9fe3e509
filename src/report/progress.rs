//! Progress on stderr for long runs (sweeps, qualify, many dump files): a
//! bar with done/total, the current item, elapsed time and ETA. Drawn only
//! when stderr is a terminal and the caller wants it; whatever else is
//! written while a bar is up (the table, logs) goes through [`suspend`] so
//! the two never interleave.

use super::{Results, Row, Sink};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{self, IsTerminal};
use std::sync::Mutex;

/// The bar on screen now, if any.
static ACTIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

fn active() -> Option<ProgressBar> {
    ACTIVE.lock().ok().and_then(|a| a.clone())
}

/// Runs `f` (which writes to the terminal) with the bar cleared, and draws
/// the bar again afterwards.
pub fn suspend<R>(f: impl FnOnce() -> R) -> R {
    match active() {
        Some(bar) => bar.suspend(f),
        None => f(),
    }
}

/// A progress bar over `total` items.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar titled `what` (e.g. "cases"), drawn when `wanted` and stderr
    /// is a terminal; hidden otherwise.
    pub fn new(total: u64, what: &str, wanted: bool) -> Progress {
        let bar = if wanted && io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(&format!(
                "{{bar:30}} {{pos}}/{{len}} {what}  {{elapsed_precise}} (ETA {{eta}})  {{wide_msg}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        } else {
            ProgressBar::hidden()
        };
        if !bar.is_hidden() {
            if let Ok(mut a) = ACTIVE.lock() {
                *a = Some(bar.clone());
            }
        }
        Progress { bar }
    }

    /// Whether the bar is drawn.
    pub fn visible(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// Names the item being worked on.
    pub fn current(&self, item: impl Into<String>) {
        self.bar.set_message(item.into());
    }

    /// One more item done.
    pub fn done_one(&self) {
        self.bar.inc(1);
    }

    /// Clears the bar from the screen.
    pub fn finish(&self) {
        if let Ok(mut a) = ACTIVE.lock() {
            *a = None;
        }
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A sink that advances a bar by one case per `per_case` rows, naming the
/// case that runs next (`labels`, in sweep order).
pub struct ProgressSink {
    progress: Progress,
    labels: Vec<String>,
    per_case: usize,
    rows: usize,
}

impl ProgressSink {
    pub fn new(progress: Progress, labels: Vec<String>, per_case: usize) -> ProgressSink {
        if let Some(first) = labels.first() {
            progress.current(first.clone());
        }
        ProgressSink {
            progress,
            labels,
            per_case: per_case.max(1),
            rows: 0,
        }
    }
}

impl Sink for ProgressSink {
    fn row(&mut self, _row: &Row) -> io::Result<()> {
        self.rows += 1;
        if self.rows % self.per_case == 0 {
            self.progress.done_one();
            if let Some(next) = self.labels.get(self.rows / self.per_case) {
                self.progress.current(next.clone());
            }
        }
        Ok(())
    }

    fn finish(&mut self, _results: &Results) -> io::Result<()> {
        self.progress.finish();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::row;

    #[test]
    fn a_hidden_bar_still_counts_cases_and_names_the_next() {
        let p = Progress::new(2, "cases", false);
        assert!(!p.visible());
        let mut s = ProgressSink::new(p, vec!["a".into(), "b".into()], 2);
        assert_eq!(s.progress.bar.message(), "a");
        s.row(&row(8, "out")).unwrap();
        assert_eq!(s.progress.bar.position(), 0);
        s.row(&row(8, "in")).unwrap();
        assert_eq!(s.progress.bar.position(), 1);
        assert_eq!(s.progress.bar.message(), "b");
        assert_eq!(suspend(|| 7), 7);
    }
}
