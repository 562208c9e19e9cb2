//! The collector's GPU test target: a small CUDA program with known counts.
//!
//! Three worker threads, each on its own stream, run `ITERS` iterations of: copy to the GPU,
//! two kernel launches, copy back (checked), fill with zeros. NVTX annotates it through the
//! `nvtx` crate: nested push/pop ranges in the default domain and in a named domain (with a
//! registered string, a named category and a colour), marks, and a start/end range that is
//! started on the main thread and ended on a worker. The expected counts go to stdout as one
//! JSON line, so a device script can compare them with what `fuseprof collect` recorded:
//!
//! ```text
//! fuseprof collect -o run.sqlite -- fuseprof-gpu-test > expected.json
//! ```

use std::sync::Arc;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

const WORKERS: usize = 3;
const ITERS: usize = 8;
const N: usize = 1 << 18;

/// `x[i] += 1.0` for i < n; hand-written PTX so the program needs no NVRTC at run time.
const PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64
.visible .entry add_one(.param .u64 p_x, .param .u32 p_n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<3>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [p_x];
  ld.param.u32 %r1, [p_n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.f32 %f1, [%rd4];
  add.f32 %f2, %f1, 0f3F800000;
  st.global.f32 [%rd4], %f2;
DONE:
  ret;
}
"#;

fn s(text: &str) -> nvtx::Str {
    nvtx::Str::from_str_lossy(text)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("fuseprof-gpu-test: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let main_range = nvtx::LocalRange::new(s("main"));
    let domain = nvtx::Domain::new(s("fuseprof-gpu-test"));
    let iteration = domain.register_string(s("iteration"));
    let worker_category = domain.register_category(s("worker"));
    let whole = domain.range(s("whole run"));

    let ctx = CudaContext::new(0)?;
    let module = ctx.load_module(Ptx::from_src(PTX))?;
    let func = module.load_function("add_one")?;

    // Started here, ended by worker 0 when it is done.
    let mut cross = Some(nvtx::Range::new(s("cross-thread")));

    std::thread::scope(|scope| -> Result<(), Box<dyn std::error::Error>> {
        let mut handles = Vec::new();
        for w in 0..WORKERS {
            let ctx = Arc::clone(&ctx);
            let func = func.clone();
            let domain = &domain;
            let cross = if w == 0 { cross.take() } else { None };
            handles.push(scope.spawn(move || -> Result<(), String> {
                ctx.bind_to_thread().map_err(|e| e.to_string())?;
                nvtx::name_current_thread(s(&format!("worker-{w}")));
                let stream = ctx.new_stream().map_err(|e| e.to_string())?;
                let host: Vec<f32> = (0..N).map(|i| (i % 97) as f32).collect();
                for _ in 0..ITERS {
                    let _iter = domain.local_range(
                        domain
                            .event_attributes_builder()
                            .category(worker_category)
                            .color(nvtx::color::Color::new(100, 149, 237, 255))
                            .message(iteration)
                            .build(),
                    );
                    let mut x = stream.clone_htod(&host).map_err(|e| e.to_string())?;
                    {
                        let _launch = nvtx::LocalRange::new(s("launch"));
                        for _ in 0..2 {
                            let n = N as u32;
                            let mut b = stream.launch_builder(&func);
                            b.arg(&mut x).arg(&n);
                            // SAFETY: add_one(float*, u32) reads and writes x[0..n], and x
                            // holds n floats.
                            unsafe { b.launch(LaunchConfig::for_num_elems(n)) }
                                .map_err(|e| e.to_string())?;
                        }
                    }
                    let back = stream.clone_dtoh(&x).map_err(|e| e.to_string())?;
                    if back.iter().zip(&host).any(|(b, h)| *b != h + 2.0) {
                        return Err("the kernel computed a wrong result".into());
                    }
                    stream.memset_zeros(&mut x).map_err(|e| e.to_string())?;
                    stream.synchronize().map_err(|e| e.to_string())?;
                }
                nvtx::mark(s("worker done"));
                drop(cross);
                Ok(())
            }));
        }
        for h in handles {
            h.join().map_err(|_| "a worker panicked")??;
        }
        Ok(())
    })?;
    domain.mark(s("all done"));
    drop(whole);
    drop(main_range);

    println!(
        "{{\"kernels\":{k},\"memcpy_htod\":{c},\"memcpy_dtoh\":{c},\"memsets\":{c},\
         \"nvtx_push_pop\":{pp},\"nvtx_start_end\":2,\"nvtx_marks\":{m},\
         \"cross_thread_ranges\":1,\"worker_threads\":{WORKERS},\"streams\":{WORKERS},\
         \"kernel_name\":\"add_one\",\"domain\":\"fuseprof-gpu-test\"}}",
        k = WORKERS * ITERS * 2,
        c = WORKERS * ITERS,
        pp = WORKERS * ITERS * 2 + 1,
        m = WORKERS + 1,
    );
    Ok(())
}
