//! Progress bars for long commands: position, elapsed time and ETA, drawn
//! on stderr. Hidden when stderr is not a terminal or after
//! [`set_quiet`], so piped output and JSON never carry them.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

static QUIET: AtomicBool = AtomicBool::new(false);

/// `--quiet`: no progress bars for the rest of the process.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether bars are drawn at all.
pub fn shown() -> bool {
    !QUIET.load(Ordering::Relaxed) && std::io::stderr().is_terminal()
}

/// A bar of `len` steps named `what`; hidden where [`shown`] is false.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let target = if shown() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let pb = ProgressBar::with_draw_target(Some(len), target);
    pb.set_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} {elapsed_precise} ETA {eta} {msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
}

/// A bar for work that is often quick: drawn (where [`shown`]) only once
/// it has run past a second, so a quick run prints no bar at all.
pub struct SlowBar {
    bar: ProgressBar,
    since: Instant,
}

impl SlowBar {
    pub fn new(len: u64, what: &str) -> SlowBar {
        let bar = bar(len, what);
        bar.set_draw_target(ProgressDrawTarget::hidden());
        SlowBar {
            bar,
            since: Instant::now(),
        }
    }

    pub fn set(&self, position: u64, message: &str) {
        if self.bar.is_hidden() && shown() && self.since.elapsed() > Duration::from_secs(1) {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        self.bar.set_message(message.to_string());
        self.bar.set_position(position);
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under `cargo test` stderr is captured (not a terminal): bars are
    /// hidden, and quiet keeps them hidden.
    #[test]
    fn bars_are_hidden_off_a_terminal_and_when_quiet() {
        if !std::io::stderr().is_terminal() {
            assert!(bar(3, "x").is_hidden());
        }
        set_quiet(true);
        assert!(!shown());
        assert!(bar(3, "x").is_hidden());
        // A slow bar starts hidden and stays so where bars are not shown.
        let slow = SlowBar::new(3, "x");
        assert!(slow.bar.is_hidden());
        std::thread::sleep(Duration::from_millis(1100));
        slow.set(1, "y");
        assert!(slow.bar.is_hidden());
        assert_eq!(slow.bar.position(), 1);
        set_quiet(false);
    }
}
