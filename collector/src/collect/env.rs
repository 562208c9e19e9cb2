//! Finding the tracer and libcupti, and the environment the traced program gets.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{spool, CollectConfig, CollectError, Result};

/// Overrides where the tracer library is looked for.
pub const TRACER_ENV: &str = "FUSEPROF_TRACER";
pub const TRACER_FILE_NAME: &str = "libfuseprof_tracer.so";
const SITECUSTOMIZE: &str = include_str!("../../python/sitecustomize.py");
/// fuseprof's PyTorch op observer, compiled by the hook on first use (see sitecustomize.py).
const OPS_OBSERVER: &str = include_str!("../../python/fuseprof_ops.cpp");

/// The tracer library: `$FUSEPROF_TRACER`, else next to the running executable, else in
/// `../lib` or `../lib/fuseprof` beside it.
pub fn find_tracer() -> Result<PathBuf> {
    let mut searched = Vec::new();
    if let Some(p) = std::env::var_os(TRACER_ENV) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        searched.push(p);
    }
    for cand in beside_executable(TRACER_FILE_NAME) {
        if cand.is_file() {
            return Ok(cand);
        }
        searched.push(cand);
    }
    Err(CollectError::TracerNotFound {
        searched: searched
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Where a file installed with fuseprof may lie, in the order to look: next to the running
/// executable (a cargo build), then in `../lib` and `../lib/fuseprof` beside it (the pip wheel
/// puts the libraries in the environment's `lib/fuseprof`).
pub fn beside_executable(file: &str) -> Vec<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
        .map(|dir| {
            vec![
                dir.join(file),
                dir.join("../lib").join(file),
                dir.join("../lib/fuseprof").join(file),
            ]
        })
        .unwrap_or_default()
}

fn has_libcupti(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("libcupti.so"))
        })
    })
}

/// A folder holding libcupti: from `$CUDA_HOME`/`$CUDA_PATH`, /usr/local/cuda, or the pip
/// package nvidia-cuda-cupti. `None` when none is found (it may still be on the default path).
pub fn find_libcupti_dir() -> Option<PathBuf> {
    let mut homes: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    homes.push("/usr/local/cuda".into());
    let mut cands = Vec::new();
    for h in &homes {
        cands.push(h.join("targets/x86_64-linux/lib"));
        cands.push(h.join("extras/CUPTI/lib64"));
        cands.push(h.join("lib64"));
    }
    // pip wheels: nvidia/cu13/lib (CUDA 13) and nvidia/cuda_cupti/lib (CUDA 12).
    let mut site_dirs: Vec<PathBuf> = Vec::new();
    if let Some(pp) = std::env::var_os("PYTHONPATH") {
        site_dirs.extend(std::env::split_paths(&pp));
    }
    let mut prefixes: Vec<PathBuf> = ["/usr/local/lib", "/usr/lib", "/opt/conda/lib"]
        .iter()
        .map(PathBuf::from)
        .collect();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var) {
            prefixes.push(PathBuf::from(v).join("lib"));
        }
    }
    for prefix in prefixes {
        if let Ok(entries) = std::fs::read_dir(&prefix) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with("python3") {
                    site_dirs.push(e.path().join("site-packages"));
                    site_dirs.push(e.path().join("dist-packages"));
                }
            }
        }
    }
    for s in site_dirs {
        cands.push(s.join("nvidia/cu13/lib"));
        cands.push(s.join("nvidia/cuda_cupti/lib"));
    }
    cands.into_iter().find(|d| has_libcupti(d))
}

fn link_libcupti(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)?.flatten() {
        let name = e.file_name();
        if name.to_string_lossy().starts_with("libcupti.so") {
            std::os::unix::fs::symlink(e.path(), to.join(&name))?;
        }
    }
    Ok(())
}

fn libcupti_on_default_path() -> bool {
    if let Some(ld) = std::env::var_os("LD_LIBRARY_PATH") {
        if std::env::split_paths(&ld).any(|d| has_libcupti(&d)) {
            return true;
        }
    }
    ["/sbin/ldconfig", "ldconfig"].iter().any(|l| {
        Command::new(l)
            .arg("-p")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libcupti.so"))
    })
}

fn prepend(var: &str, dirs: &[PathBuf]) -> OsString {
    let mut parts = dirs.to_vec();
    if let Some(old) = std::env::var_os(var) {
        parts.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(&parts).unwrap_or_else(|_| parts[0].as_os_str().to_owned())
}

/// Sets the traced program's environment.
pub fn prepare(
    cmd: &mut Command,
    tracer: &Path,
    spool_dir: &Path,
    cfg: &CollectConfig,
    warnings: &mut Vec<String>,
) {
    cmd.env(spool::ENV_SPOOL_DIR, spool_dir);
    for (k, v) in &cfg.env {
        cmd.env(k, v);
    }
    if !cfg.python_path.is_empty() {
        cmd.env("PYTHONPATH", prepend("PYTHONPATH", &cfg.python_path));
    }
    if cfg.all_api {
        cmd.env("FUSEPROF_ALL_API", "1");
    }
    match &cfg.metrics {
        Some(m) => {
            cmd.env(spool::ENV_METRICS, &m.set);
            match m.interval_ns {
                Some(ns) => cmd.env(spool::ENV_METRICS_INTERVAL_NS, ns.to_string()),
                None => cmd.env_remove(spool::ENV_METRICS_INTERVAL_NS),
            };
        }
        None => {
            cmd.env_remove(spool::ENV_METRICS);
            cmd.env_remove(spool::ENV_METRICS_INTERVAL_NS);
        }
    }
    match cfg.capture.env_value() {
        Some(v) => cmd.env(spool::ENV_CAPTURE, v),
        None => cmd.env_remove(spool::ENV_CAPTURE),
    };
    for var in ["CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH"] {
        match std::env::var_os(var) {
            Some(old) if !old.is_empty() && Path::new(&old) != tracer => {
                warnings.push(format!(
                    "{var} is already set (to {}): another tool injects itself; fuseprof \
                     leaves it and does not record what it would carry",
                    Path::new(&old).display()
                ));
            }
            _ => {
                cmd.env(var, tracer);
            }
        }
    }
    match find_libcupti_dir() {
        Some(dir) => {
            // Only libcupti is put on the library path: a folder of links to it, not the CUDA
            // folder itself, which would swap the program's cuBLAS/cuDNN/cudart for others.
            let link_dir = spool_dir.join("cupti");
            match link_libcupti(&dir, &link_dir) {
                Ok(()) => {
                    cmd.env(
                        "LD_LIBRARY_PATH",
                        prepend("LD_LIBRARY_PATH", std::slice::from_ref(&link_dir)),
                    );
                }
                Err(e) => warnings.push(format!(
                    "could not link libcupti from {} into {}: {e}",
                    dir.display(),
                    link_dir.display()
                )),
            }
        }
        None if libcupti_on_default_path() => {}
        None => warnings.push(
            "libcupti was not found (looked in $CUDA_HOME, /usr/local/cuda and the pip package \
             nvidia-cuda-cupti); the program runs, but CUDA activity is not recorded"
                .into(),
        ),
    }
    if let Some(mode) = cfg.pytorch.env_value() {
        let py_dir = spool_dir.join("python");
        let written = std::fs::create_dir_all(&py_dir)
            .and_then(|()| std::fs::write(py_dir.join("sitecustomize.py"), SITECUSTOMIZE))
            .and_then(|()| std::fs::write(py_dir.join("fuseprof_ops.cpp"), OPS_OBSERVER));
        match written {
            Ok(()) => {
                let mut dirs = vec![py_dir.clone()];
                dirs.extend(cfg.python_path.iter().cloned());
                cmd.env("PYTHONPATH", prepend("PYTHONPATH", &dirs));
                cmd.env("FUSEPROF_PYTORCH", mode);
            }
            Err(e) => warnings.push(format!(
                "could not write the PyTorch hook into {}: {e}; PyTorch ops are not annotated",
                py_dir.display()
            )),
        }
    } else {
        cmd.env_remove("FUSEPROF_PYTORCH");
    }
}

pub fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for its length; gethostname NUL-terminates within it.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if r != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The NVIDIA kernel driver's version, where the system says.
pub fn driver_version() -> Option<String> {
    if let Ok(v) = std::fs::read_to_string("/sys/module/nvidia/version") {
        return Some(v.trim().to_string());
    }
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..."
    text.lines().next().and_then(|l| {
        l.split_whitespace()
            .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
            .map(str::to_string)
    })
}
