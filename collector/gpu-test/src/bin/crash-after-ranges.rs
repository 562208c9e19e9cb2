//! A program that records 50 NVTX ranges and then crashes: `segv` (a write through a null
//! pointer, the default) or `abort`. Used by `tests/nvtx_injection.rs` to check that a crash
//! still leaves every record made before it.

fn text(s: &str) -> nvtx::Str {
    nvtx::Str::from(std::ffi::CString::new(s).expect("no NUL"))
}

fn main() {
    for _ in 0..50 {
        let _r = nvtx::LocalRange::new(text("before-crash"));
    }
    if std::env::args().nth(1).as_deref() == Some("abort") {
        std::process::abort();
    }
    // SAFETY: none; the point is a real SIGSEGV.
    unsafe { std::ptr::null_mut::<u8>().write_volatile(1) };
    unreachable!("the write above faults");
}
