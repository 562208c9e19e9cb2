//! While the program runs, `collect` passes SIGINT and SIGTERM on to it and does not die
//! itself, so it can still write the run once the program has flushed and exited.
//!
//! A Ctrl-C typed in the terminal already reaches the program (same process group), so a
//! SIGINT the kernel sent is not forwarded a second time; one sent with `kill` is.

use std::sync::atomic::{AtomicI32, Ordering};

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let code = unsafe { info.as_ref() }.map_or(libc::SI_USER, |i| i.si_code);
    let from_terminal = sig == libc::SIGINT && code == libc::SI_KERNEL;
    let child = CHILD.load(Ordering::Acquire);
    if child > 0 && !from_terminal {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, sig) };
    }
}

/// Installed handlers; dropping restores the previous ones.
pub struct Forwarding {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl Forwarding {
    pub fn install() -> Forwarding {
        let mut old = Vec::new();
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: sigaction with valid pointers.
            unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_signal as *const () as usize;
                new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut new.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &new, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        Forwarding { old }
    }

    pub fn set_child(&self, pid: i32) {
        CHILD.store(pid, Ordering::Release);
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        CHILD.store(0, Ordering::Release);
        for (sig, prev) in &self.old {
            // SAFETY: restoring the action sigaction gave us.
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
    }
}
