//! Compile every kernel source to PTX with NVRTC, as the runtime would for each GPU
//! architecture given, and write one file per build: `OUT/FILE-DTYPE-VARIANT-TARGET.ptx`.
//! Needs libnvrtc (on `LD_LIBRARY_PATH`), no GPU. With `kernels/bench/ptx_diff.py` it shows
//! whether a change to the sources changes any kernel's code:
//!
//! ```text
//! cargo run -p fuseprof-kernels --example ptx -- /tmp/ptx-after 80 90
//! python3 kernels/bench/ptx_diff.py /tmp/ptx-before /tmp/ptx-after
//! ```

use fuseprof_kernels::runtime::compile_ptx;
use fuseprof_kernels::{all_sources, DType};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .ok_or("usage: ptx OUT_DIR [ARCH...] (ARCH as 80, 90)")?;
    let mut archs: Vec<(i32, i32)> = args
        .map(|a| {
            let n: i32 = a.parse()?;
            Ok((n / 10, n % 10))
        })
        .collect::<Result<_, std::num::ParseIntError>>()?;
    if archs.is_empty() {
        archs = vec![(8, 0), (9, 0)];
    }
    std::fs::create_dir_all(&out)?;
    for source in all_sources() {
        for &arch in archs.iter().filter(|a| source.runs_on(**a)) {
            for dtype in [DType::F16, DType::BF16] {
                for &variant in source.variant_list() {
                    let ptx = compile_ptx(&source, dtype, variant, arch)?;
                    let path = format!(
                        "{out}/{}-{}-{variant}-{}.ptx",
                        source.file_name,
                        dtype.name(),
                        source.nvrtc_arch(arch)
                    );
                    std::fs::write(&path, ptx)?;
                    println!("{path}");
                }
            }
        }
    }
    Ok(())
}
