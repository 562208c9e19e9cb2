//! The `--pytorch` hook (`collector/python/sitecustomize.py`) without torch or a GPU: a stand-in
//! `torch` package records what the hook asks of it, so the choice between fuseprof's op
//! observer and `emit_nvtx`, and the fallback message, are checked here. (The observer itself
//! is C++ against torch's headers; it is checked on the device against emit_nvtx.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FAKE_TORCH: &str = r#"
import types
__version__ = "0.0-fake"
calls = []
class _EmitNvtx:
    def __init__(self, record_shapes=False):
        calls.append(("emit_nvtx", record_shapes))
    def __enter__(self):
        calls.append(("enter",))
    def __exit__(self, *a):
        pass
_C = types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True)
autograd = types.SimpleNamespace(profiler=types.SimpleNamespace(emit_nvtx=_EmitNvtx),
                                 _disable_profiler=lambda: None)
cuda = types.SimpleNamespace(synchronize=lambda *a, **k: calls.append(("synchronize",)))
"#;

fn hook_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// Runs `import torch; print(torch.calls)` with the hook on PYTHONPATH; None without python3.
fn run_hook(dir: &Path, envs: &[(&str, &str)]) -> Option<Output> {
    let fake = dir.join("fake");
    std::fs::create_dir_all(fake.join("torch")).unwrap();
    std::fs::write(fake.join("torch/__init__.py"), FAKE_TORCH).unwrap();
    let path = format!("{}:{}", hook_dir().display(), fake.display());
    let mut cmd = Command::new("python3");
    cmd.args(["-c", "import torch; print(torch.calls)"])
        .env("PYTHONPATH", path)
        .env("FUSEPROF_PYTORCH", "shapes")
        .env("FUSEPROF_CACHE", dir.join("cache"))
        .env_remove("NVTX_INJECTION64_PATH")
        .env_remove("FUSEPROF_OPS_OBSERVER");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    match cmd.output() {
        Ok(out) => Some(out),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("python3 not found: the PyTorch hook is not tested here");
            None
        }
        Err(e) => panic!("python3: {e}"),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The program ran, with emit_nvtx(record_shapes=True) entered without the GPU synchronisation
/// its `__enter__` would do.
fn assert_emit_nvtx_with_shapes(out: &Output) {
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text(&out.stdout).trim(),
        "[('emit_nvtx', True), ('enter',)]"
    );
}

#[test]
fn outside_collect_the_hook_uses_emit_nvtx_without_a_word() {
    let dir = tempfile::tempdir().unwrap();
    let Some(out) = run_hook(dir.path(), &[]) else {
        return;
    };
    assert_emit_nvtx_with_shapes(&out);
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn an_observer_that_cannot_be_built_falls_back_to_emit_nvtx_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let tracer = dir.path().join("libfuseprof_tracer.so");
    let tracer = tracer.to_str().unwrap();
    let Some(out) = run_hook(
        dir.path(),
        &[("NVTX_INJECTION64_PATH", tracer), ("CXX", "false")],
    ) else {
        return;
    };
    assert_emit_nvtx_with_shapes(&out);
    let err = text(&out.stderr);
    assert!(
        err.starts_with("fuseprof: op observer unavailable (false -std=c++20 failed: exit code 1)"),
        "{err}"
    );
    assert!(err.trim_end().ends_with("using emit_nvtx"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // Nothing half-built is left in the cache.
    let cached: Vec<_> = std::fs::read_dir(dir.path().join("cache"))
        .unwrap()
        .collect();
    assert!(cached.is_empty(), "{cached:?}");
}

#[test]
fn emit_nvtx_can_be_asked_for_under_collect() {
    let dir = tempfile::tempdir().unwrap();
    let Some(out) = run_hook(
        dir.path(),
        &[
            (
                "NVTX_INJECTION64_PATH",
                "/nonexistent/libfuseprof_tracer.so",
            ),
            ("FUSEPROF_OPS_OBSERVER", "emit_nvtx"),
            ("CXX", "false"),
        ],
    ) else {
        return;
    };
    assert_emit_nvtx_with_shapes(&out);
    assert_eq!(text(&out.stderr), "");
}

/// With the real torch (the test environment's, on the CPU): in `shapes` mode each outermost
/// `nn.Module` call gets one `module::<Class>` range, and calls made inside it none.
#[test]
fn outermost_module_calls_get_one_range_each() {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    let python = std::env::var_os("FUSEPROF_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or(venv);
    assert!(
        python.exists(),
        "{} is missing: run `bash .ci/setup` or set FUSEPROF_TEST_PYTHON",
        python.display()
    );
    let script = "import torch\n\
        pushed = []\n\
        torch.cuda.nvtx.range_push = lambda name: pushed.append(name)\n\
        torch.cuda.nvtx.range_pop = lambda: pushed.append('pop')\n\
        net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())\n\
        head = torch.nn.Linear(8, 2)\n\
        with torch.no_grad():\n    for _ in range(3):\n        head(net(torch.randn(4, 8)))\n\
        print(pushed)\n";
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(python)
        .args(["-c", script])
        .env("PYTHONPATH", hook_dir())
        .env("FUSEPROF_PYTORCH", "shapes")
        .env("FUSEPROF_CACHE", dir.path().join("cache"))
        .env_remove("NVTX_INJECTION64_PATH")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let one = "'module::Sequential', 'pop', 'module::Linear', 'pop'";
    assert_eq!(
        printed.trim(),
        format!("[{one}, {one}, {one}]"),
        "{}",
        text(&out.stderr)
    );
}
