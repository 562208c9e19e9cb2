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
//! fuseprof collect -o /tmp/n.sqlite -- nvtx-bench 1000000 direct
//! ```
//!
//! `direct` pushes through the tracer's own entry points (`fuseprof_range_push` /
//! `fuseprof_range_pop`, found through NVTX_INJECTION64_PATH), as fuseprof's PyTorch op
//! observer does, instead of through NVTX.

use std::ffi::{c_char, c_int, CString};
use std::fmt::Write;
use std::time::Instant;

type Push = unsafe extern "C" fn(*const c_char, usize) -> c_int;
type Pop = unsafe extern "C" fn() -> c_int;

/// The tracer's direct entry points, from the library NVTX_INJECTION64_PATH names.
fn direct_entry_points() -> Option<(Push, Pop)> {
    let path = CString::new(std::env::var("NVTX_INJECTION64_PATH").ok()?).ok()?;
    // SAFETY: dlopen/dlsym with NUL-terminated names; the symbols have the types above
    // (collector/tracer/src/lib.rs).
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        if h.is_null() {
            return None;
        }
        let push = libc::dlsym(h, c"fuseprof_range_push".as_ptr());
        let pop = libc::dlsym(h, c"fuseprof_range_pop".as_ptr());
        if push.is_null() || pop.is_null() {
            return None;
        }
        Some((
            std::mem::transmute::<*mut libc::c_void, Push>(push),
            std::mem::transmute::<*mut libc::c_void, Pop>(pop),
        ))
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let direct = match std::env::args().nth(2).as_deref() {
        Some("direct") => match direct_entry_points() {
            Some(d) => Some(d),
            None => {
                eprintln!(
                    "nvtx-bench: direct needs NVTX_INJECTION64_PATH naming the fuseprof tracer"
                );
                std::process::exit(2);
            }
        },
        _ => None,
    };
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
        pair(direct, &name);
    }
    let t0 = Instant::now();
    for i in 0..n {
        make(i, &mut name);
        pair(direct, &name);
    }
    let dt = t0.elapsed();
    let traced = std::env::var_os("NVTX_INJECTION64_PATH").is_some();
    println!(
        "{{\"pairs\":{n},\"traced\":{traced},\"direct\":{},\"ns_per_pair\":{:.1}}}",
        direct.is_some(),
        dt.as_nanos() as f64 / n as f64
    );
}

/// One push/pop pair named `name`, through NVTX or the tracer's direct entry points.
fn pair(direct: Option<(Push, Pop)>, name: &str) {
    match direct {
        Some((push, pop)) => {
            // SAFETY: the tracer's entry points take a pointer and a length.
            unsafe {
                push(name.as_ptr().cast(), name.len());
                pop();
            }
        }
        None => {
            let r = nvtx::LocalRange::new(nvtx::Str::from(CString::new(name).unwrap_or_default()));
            drop(r);
        }
    }
}
