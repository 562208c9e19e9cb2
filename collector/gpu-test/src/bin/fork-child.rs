//! A process that forks a child the way Python's multiprocessing starts DataLoader workers: the
//! child annotates with NVTX and leaves through `_exit`, which runs no exit handler. Prints the
//! two pids as JSON. Used by `tests/nvtx_injection.rs` to check that the child's records reach
//! the run even so.

fn text(s: &str) -> nvtx::Str {
    nvtx::Str::from(std::ffi::CString::new(s).expect("no NUL"))
}

fn main() {
    let _outer = nvtx::LocalRange::new(text("parent"));
    // SAFETY: fork in a single-threaded program; the child only calls NVTX and _exit.
    let child = unsafe { libc::fork() };
    if child == 0 {
        for _ in 0..5 {
            nvtx::mark(text("item"));
        }
        {
            let _r = nvtx::LocalRange::new(text("child-range"));
        }
        // SAFETY: ends the child without running exit handlers, as multiprocessing does.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    unsafe { libc::waitpid(child, &mut status, 0) };
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    println!("{{\"parent\":{parent},\"child\":{child}}}");
}
