//! Progress of `bench -- CMD` on stderr, only when stderr is a terminal (nothing reaches a pipe
//! or a log file): one line per step, with a bar, since the benchmarked program prints to the
//! same terminal between the steps and a line redrawn in place would mix with its output.

use std::io::IsTerminal;
use std::sync::Mutex;

pub struct Progress {
    total: u64,
    unit: &'static str,
    done: Mutex<u64>,
    on: bool,
}

impl Progress {
    pub fn new(total: u64, unit: &'static str) -> Progress {
        Progress {
            total,
            unit,
            done: Mutex::new(0),
            on: std::io::stderr().is_terminal(),
        }
    }

    /// Starts a step: prints the bar of the steps done so far and what runs now.
    pub fn set_message(&self, message: String) {
        let done = *self.done.lock().unwrap_or_else(|e| e.into_inner());
        self.draw(done, &message);
    }

    /// Counts steps done; the next message shows them.
    pub fn inc(&self, n: u64) {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        *done = (*done + n).min(self.total);
    }

    fn draw(&self, done: u64, message: &str) {
        if !self.on {
            return;
        }
        const WIDTH: u64 = 24;
        let filled = (done * WIDTH).checked_div(self.total).unwrap_or(0) as usize;
        eprintln!(
            "[{}{}] {done}/{} {} {message}",
            "#".repeat(filled),
            "-".repeat(WIDTH as usize - filled),
            self.total,
            self.unit
        );
    }
}
