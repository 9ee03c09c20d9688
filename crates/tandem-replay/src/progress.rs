//! A progress bar on stderr (indicatif) while a replay runs, only when stderr is a terminal:
//! quiet in CI, in pipes and under `--json`.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::shared::ReplayProgress;

/// The bar; absent when stderr is not a terminal.
pub struct TerminalProgress {
    bar: ProgressBar,
}

impl TerminalProgress {
    /// A bar over `total` requests (a spinner when unknown), or `None` when stderr is not a
    /// terminal.
    pub fn new(total: Option<u64>) -> Option<Self> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let (bar, template) = match total {
            Some(n) => (
                ProgressBar::new(n),
                "{elapsed_precise} [{bar:40}] {pos}/{len} requests {msg}",
            ),
            None => (
                ProgressBar::new_spinner(),
                "{elapsed_precise} {spinner} {pos} requests {msg}",
            ),
        };
        bar.set_draw_target(ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        Some(TerminalProgress { bar })
    }

    /// Show `p`.
    pub fn update(&self, p: &ReplayProgress) {
        self.bar.set_position(p.requests_done);
        let epoch = p.epoch.map_or_else(|| "-".to_string(), |e| e.to_string());
        self.bar.set_message(format!(
            "step {} epoch {} restarts {}",
            p.steps, epoch, p.epoch_changes
        ));
    }

    /// Remove the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
