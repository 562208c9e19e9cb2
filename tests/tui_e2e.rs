//! `fuseprof tui` as a person uses it: the real binary in a real terminal (tmux), keys sent,
//! the screen read back. Needs tmux: in CI (`CI` set) a missing tmux fails the test (`.ci/run`
//! installs it); elsewhere the test says why it is skipped.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "e2e"])
    }
    fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.cmd(&["send-keys", "-t", "e2e", k]);
            std::thread::sleep(Duration::from_millis(150));
        }
    }
    /// Waits until the screen passes `ok` (up to 30 s); returns it.
    fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            if t.elapsed() > Duration::from_secs(30) {
                panic!("waited 30 s for {what}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}

fn status_line(screen: &str) -> String {
    screen
        .lines()
        .rfind(|l| l.contains("? help"))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn tui_in_tmux_zoom_select_hotspot_jump_search_quit() {
    if Command::new("tmux").arg("-V").output().is_err() {
        if std::env::var_os("CI").is_some() {
            panic!("tmux is missing in CI: .ci/run installs it (apt-get install tmux)");
        }
        eprintln!("skipped: tmux is not installed (apt-get install tmux); CI runs this test");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("swin.sqlite");
    let gz = fuseprof_fixtures::path("recordings/swin_t_infer_modules.sqlite.gz");
    let mut r = flate2::read::GzDecoder::new(std::fs::File::open(gz).unwrap());
    std::io::copy(&mut r, &mut std::fs::File::create(&run).unwrap()).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_fuseprof"));
    let tmux = Tmux {
        socket: format!("fuseprof-e2e-{}", std::process::id()),
    };
    let shell = format!(
        "{} tui {}; echo FUSEPROF_EXITED $?; sleep 30",
        bin.display(),
        run.display()
    );
    tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "e2e",
        "-x",
        "140",
        "-y",
        "40",
        &shell,
    ]);

    // The timeline with every lane summarised.
    let s = tmux.wait("the timeline", |s| {
        s.contains("GPU0 s7")
            && s.contains("? help")
            && !s.contains("summarising")
            && s.contains("SwinTransformer")
    });
    assert!(s.contains("main 949"), "{s}");
    let col = |s: &str| {
        s.lines()
            .nth(1)
            .unwrap_or_default()
            .split(" /col")
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let fit_col = col(&s);

    // Zoom in four times: a column covers 16 times less.
    tmux.keys(&["+", "+", "+", "+"]);
    let s = tmux.wait("the zoom", |s| col(s) != fit_col);
    assert!(status_line(&s).contains("view"), "{s}");

    // Select the kernel under the cursor.
    tmux.keys(&["Enter"]);
    let s = tmux.wait("a selection", |s| status_line(s).contains("sel "));
    assert!(s.contains("details"), "{s}");

    // Hotspots: the third op row (aten::addmm), Enter jumps to its first instance, n to the next.
    tmux.keys(&["2"]);
    tmux.wait("the hotspot table", |s| {
        s.contains("by op") && s.contains("aten::addmm")
    });
    tmux.keys(&["j", "j", "Enter"]);
    let s = tmux.wait("the jump", |s| status_line(s).contains("sel aten::addmm"));
    let first = status_line(&s);
    tmux.keys(&["n"]);
    tmux.wait("the next instance", |s| {
        let l = status_line(s);
        l.contains("sel aten::addmm") && l != first
    });

    // Search kernel and range names.
    tmux.keys(&["/", "s", "o", "f", "t", "m", "a", "x", "Enter"]);
    let s = tmux.wait("the search", |s| status_line(s).contains("/softmax"));
    assert!(status_line(&s).to_lowercase().contains("softmax"), "{s}");

    // q quits with status 0 and gives the terminal back.
    tmux.keys(&["q"]);
    let s = tmux.wait("the exit", |s| s.contains("FUSEPROF_EXITED"));
    assert!(s.contains("FUSEPROF_EXITED 0"), "{s}");
    assert!(!s.contains("GPU0 s7"), "the alternate screen was left: {s}");
}

#[test]
fn tui_without_a_terminal_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("gpu_test.sqlite");
    let gz = fuseprof_fixtures::path("recordings/gpu_test.sqlite.gz");
    let mut r = flate2::read::GzDecoder::new(std::fs::File::open(gz).unwrap());
    std::io::copy(&mut r, &mut std::fs::File::create(&run).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fuseprof"))
        .args(["tui", run.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("needs a terminal"), "{err}");
    assert!(out.stdout.is_empty());

    // Not a run: the same one-line error, whatever the terminal.
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fuseprof"))
        .args(["tui", text.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
