//! A program that annotates with NVTX until a signal ends it: prints `ready` once 100 ranges
//! are recorded, then keeps pushing and popping. Used by `tests/nvtx_injection.rs` to check that
//! SIGTERM still leaves every record gathered before it, with a final flush.

use std::io::Write;

fn text(s: &str) -> nvtx::Str {
    nvtx::Str::from(std::ffi::CString::new(s).expect("no NUL"))
}

fn main() {
    let mut n = 0u64;
    loop {
        {
            let _r = nvtx::LocalRange::new(text("work"));
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        n += 1;
        if n == 100 {
            println!("ready");
            let _ = std::io::stdout().flush();
        }
    }
}
