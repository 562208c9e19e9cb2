//! Cost of one NVTX push/pop pair as a traced program sees it, without a GPU.
//!
//! Pushes and pops `N` ranges named like PyTorch's `emit_nvtx(record_shapes=True)` ranges
//! (each name different, as the `seq` numbers make them) and prints ns per pair as JSON. Run
//! once plain (NVTX calls are no-ops) and once under `fuseprof collect` to see what the
//! tracer's NVTX handler adds:
//!
//! ```text
//! nvtx-bench 1000000
//! fuseprof collect -o /tmp/n.sqlite -- nvtx-bench 1000000
//! ```

use std::fmt::Write;
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut name = String::with_capacity(256);
    // Names are made in both runs, so the difference between runs is the handler alone.
    let make = |i: usize, name: &mut String| {
        name.clear();
        let _ = write!(
            name,
            "aten::linear, seq = {i}, sizes = [[64, 3136, 96], [288, 96], [288]], input_op_ids = [{}, 0, 0]",
            i.wrapping_mul(7) % 100_000
        );
    };
    for i in 0..n / 10 {
        make(i, &mut name);
        let r = nvtx::LocalRange::new(nvtx::Str::from(
            std::ffi::CString::new(name.as_str()).unwrap_or_default(),
        ));
        drop(r);
    }
    let t0 = Instant::now();
    for i in 0..n {
        make(i, &mut name);
        let r = nvtx::LocalRange::new(nvtx::Str::from(
            std::ffi::CString::new(name.as_str()).unwrap_or_default(),
        ));
        drop(r);
    }
    let dt = t0.elapsed();
    let traced = std::env::var_os("NVTX_INJECTION64_PATH").is_some();
    println!(
        "{{\"pairs\":{n},\"traced\":{traced},\"ns_per_pair\":{:.1}}}",
        dt.as_nanos() as f64 / n as f64
    );
}
