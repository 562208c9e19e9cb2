//! The patch layer's Python tests (`tests/python/test_patch_layer.py`) on CPU: module matching
//! and replacement for timm Swin/ViT, Hugging Face BERT and odd-sized nn.Linear, weight
//! padding, the fuseprof::* operators' schemas and fake implementations, the numerics check.
//! They need torch, timm and transformers: the interpreter of `.venv` (made by `.ci/setup`,
//! which the README's test command runs) or `FUSEPROF_TEST_PYTHON`.

use std::path::PathBuf;
use std::process::Command;

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("FUSEPROF_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = root.join(".venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: run `bash .ci/setup` (it installs torch, timm and transformers there) or set \
         FUSEPROF_TEST_PYTHON to a python with them",
        venv.display()
    );
    venv
}

#[test]
fn patch_layer_on_cpu() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python())
        .args(["-m", "unittest", "-v", "test_patch_layer"])
        .current_dir(dir.join("tests/python"))
        .env("PYTHONPATH", dir.join("python/patch"))
        .env("PYTHONWARNINGS", "ignore")
        .env_remove("FUSEPROF_PATCH_APPLY")
        .output()
        .expect("run python");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "patch layer tests failed:\n{log}");
    // Every test ran (none skipped for a missing module).
    assert!(log.contains("Ran 22 tests"), "a test went missing:\n{log}");
    assert!(!log.contains("skipped"), "{log}");
}
