//! A one-line progress bar on stderr for long runs, drawn only when stderr is a terminal (so
//! nothing reaches a pipe or a log file).

use std::io::{IsTerminal, Write};
use std::sync::Mutex;

pub struct Progress {
    total: u64,
    unit: &'static str,
    state: Mutex<(u64, String)>,
    on: bool,
}

impl Progress {
    pub fn new(total: u64, unit: &'static str) -> Progress {
        Progress {
            total,
            unit,
            state: Mutex::new((0, String::new())),
            on: std::io::stderr().is_terminal(),
        }
    }

    pub fn set_message(&self, message: String) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.1 = message;
        self.draw(&s);
    }

    pub fn inc(&self, n: u64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 = (s.0 + n).min(self.total);
        self.draw(&s);
    }

    /// Clears the line.
    pub fn finish(&self) {
        if self.on {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }

    fn draw(&self, (done, message): &(u64, String)) {
        if !self.on {
            return;
        }
        const WIDTH: u64 = 24;
        let filled = (done * WIDTH).checked_div(self.total).unwrap_or(0) as usize;
        eprint!(
            "\r\x1b[2K[{}{}] {done}/{} {} {message}",
            "#".repeat(filled),
            "-".repeat(WIDTH as usize - filled),
            self.total,
            self.unit
        );
        let _ = std::io::stderr().flush();
    }
}
