//! The terminal: raw mode and the alternate screen on the way in, restored on the way out,
//! on an error and on a panic; the event loop.

use std::io::{IsTerminal, Stdout};
use std::time::Duration;

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{
    self, DisableMouseCapture, EnableMouseCapture, Event, KeyEventKind,
};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::Terminal;

use crate::app::App;
use crate::{Error, Result};

/// Puts the terminal back as it was (best effort: called from the panic hook too).
fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(std::io::stdout(), LeaveAlternateScreen, DisableMouseCapture);
}

/// Restores the terminal when dropped, so an early return or a panic unwinding through the
/// loop leaves a usable shell.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

/// Refuses to start without a terminal on both ends.
pub fn check_tty() -> Result<()> {
    if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        Ok(())
    } else {
        Err(Error::NoTty)
    }
}

pub fn run(mut app: App) -> Result<()> {
    check_tty()?;
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        hook(info);
    }));
    enable_raw_mode()?;
    let _guard = Guard;
    execute!(std::io::stdout(), EnterAlternateScreen, EnableMouseCapture)?;
    let mut terminal: Terminal<CrosstermBackend<Stdout>> =
        Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    terminal.clear()?;
    let mut dirty = true;
    loop {
        if app.poll() {
            dirty = true;
        }
        if dirty {
            let t = std::time::Instant::now();
            terminal.draw(|f| crate::ui::draw(f, &mut app))?;
            tracing::debug!("frame {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
            dirty = false;
        }
        // Wake up often while background work may change the picture, else wait for input.
        let wait = if app.busy() {
            Duration::from_millis(50)
        } else {
            Duration::from_millis(500)
        };
        if event::poll(wait)? {
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => app.on_key(k),
                Event::Mouse(m) => app.on_mouse(m),
                Event::Resize(..) => {}
                _ => continue,
            }
            dirty = true;
        }
        if app.quit {
            break;
        }
    }
    Ok(())
}
