//! The patch layer's Python tests (`tests/python/test_patch_layer.py`) on CPU: module matching
//! and replacement for timm Swin/ViT, Hugging Face BERT and odd-sized nn.Linear, weight
//! padding, the fuseprof::* operators' schemas and fake implementations, the numerics check,
//! the graph matcher on the captured graphs of timm, torchvision, Hugging Face and hand-written
//! models, and any model wrapped at its first outermost call. They need torch, torchvision, timm
//! and transformers: the interpreter of `.venv` (made by `.ci/setup`, which the README's test
//! command runs) or `FUSEPROF_TEST_PYTHON`.

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
    assert!(log.contains("Ran 54 tests"), "a test went missing:\n{log}");
    assert!(!log.contains("skipped"), "{log}");
}

/// Runs `script` with the step clock on (the patch folder's sitecustomize, as `bench` sets it
/// up) and returns the steps fuseprof finds in what it wrote.
fn steps_of(script: &str) -> fuseprof_fusion_advisor::steps::Steps {
    let dir = tempfile::tempdir().unwrap();
    let patch = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/patch");
    let prefix = dir.path().join("steps.json");
    let out = Command::new(python())
        .args(["-c", script])
        .env("PYTHONPATH", &patch)
        .env("FUSEPROF_STEPS_REPORT", &prefix)
        .env("PYTHONWARNINGS", "ignore")
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fuseprof_fusion_advisor::steps::find_in_files(&prefix).unwrap()
}

const MODEL: &str = "import torch, time\n\
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8))\n\
    x = torch.randn(64, 64)\n";

/// The step clock in a real PyTorch process (on the CPU, so only the host's clock): an
/// inference loop with no annotation is timed by its forwards, a step that calls two models in
/// turn by their group, a training loop by its optimizer steps, whatever its module calls, and
/// a model the program compiled by its calls.
#[test]
fn the_step_clock_finds_steps_without_annotation_on_cpu() {
    let s = steps_of(&format!(
        "{MODEL}with torch.no_grad():\n    for _ in range(15):\n        net(x)\n        time.sleep(0.004)\n"
    ));
    assert_eq!(
        (s.what.as_str(), s.count),
        ("calls of Sequential", 15),
        "{s:?}"
    );
    assert_eq!(s.clock, fuseprof_fusion_advisor::steps::Clock::Host);
    // Each step sleeps 4 ms; how much longer it takes depends on the machine's load.
    assert!(s.step_ms >= 4.0 && s.wall_per_step_ms() >= 4.0, "{s:?}");

    let s = steps_of(&format!(
        "{MODEL}head = torch.nn.Linear(8, 2)\nwith torch.no_grad():\n    for _ in range(10):\n        \
         head(net(x))\n        time.sleep(0.002)\n"
    ));
    assert_eq!(s.what, "groups of calls of Sequential, Linear", "{s:?}");
    assert_eq!(s.count, 10);

    let s = steps_of(&format!(
        "{MODEL}y = torch.randint(0, 8, (64,))\nloss = torch.nn.CrossEntropyLoss()\n\
         opt = torch.optim.AdamW(net.parameters())\nfor _ in range(9):\n    opt.zero_grad()\n    \
         loss(net(x), y).backward()\n    opt.step()\n"
    ));
    assert_eq!((s.what.as_str(), s.count), ("optimizer steps", 8), "{s:?}");

    // A model the program compiles itself: torch.compile traces through the clock's hook, and
    // the steps are named by the model inside.
    let s = steps_of(&format!(
        "{MODEL}fast = torch.compile(net)\nwith torch.no_grad():\n    for _ in range(8):\n        \
         fast(x)\n"
    ));
    assert_eq!(
        (s.what.as_str(), s.count),
        ("calls of Sequential", 8),
        "{s:?}"
    );
}
