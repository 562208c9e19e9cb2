//! `fuseprof collect` without a GPU: bad input, faults, exit codes, and spool ingestion.
//! What needs a GPU (CUPTI records, NVTX from real programs) is checked on the device by
//! collector/gpu-test/device/run.sh.

#[path = "../tracer/src/spool.rs"]
mod spool;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use fuseprof_collector::collect::{
    ingest_spool_dir, run, Capture, CollectConfig, CollectError, PytorchMode,
};
use fuseprof_store::{CopyKind, MemoryKind, RangeKind, Store};
use spool::{tag, Enc};

/// A stand-in tracer path: programs without CUDA or NVTX never load it.
fn fake_tracer(dir: &Path) -> PathBuf {
    let p = dir.join("libfuseprof_tracer.so");
    std::fs::write(&p, b"not loaded by programs without CUDA").unwrap();
    p
}

fn config(dir: &Path, out: &str, command: &[&str]) -> CollectConfig {
    CollectConfig {
        output: dir.join(out),
        overwrite: false,
        pytorch: PytorchMode::None,
        capture: Capture::All,
        command: command.iter().map(OsString::from).collect(),
        tracer_path: Some(fake_tracer(dir)),
        all_api: false,
        python_path: Vec::new(),
        env: Vec::new(),
        progress: None,
        metrics: None,
    }
}

fn assert_valid_empty_run(path: &Path) {
    let mut store = Store::open(path).expect("a valid run file");
    let info = store.info().unwrap();
    assert_eq!(info.counts.kernels, 0);
    assert_eq!(store.run().unwrap().source_format, "cupti");
}

#[test]
fn program_exit_code_passes_through_and_run_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "run.sqlite", &["sh", "-c", "exit 3"]);
    let o = run(&cfg).unwrap();
    assert_eq!(o.exit_code, 3);
    assert_eq!(o.signal, None);
    assert!(
        o.warnings.iter().any(|w| w.contains("exited with code 3")),
        "{:?}",
        o.warnings
    );
    assert!(
        o.warnings.iter().any(|w| w.contains("no CUDA activity")),
        "{:?}",
        o.warnings
    );
    assert_valid_empty_run(&o.output);
    let mut store = Store::open(&o.output).unwrap();
    assert_eq!(
        store.run().unwrap().command.as_deref(),
        Some("sh -c exit 3")
    );
}

#[test]
fn zero_exit_gives_zero() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&config(dir.path(), "run.sqlite", &["true"])).unwrap();
    assert_eq!(o.exit_code, 0);
    assert_valid_empty_run(&o.output);
}

#[test]
fn missing_command_gives_127_and_an_empty_run() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "run.sqlite", &["fuseprof-no-such-command-xyz"]);
    let o = run(&cfg).unwrap();
    assert_eq!(o.exit_code, 127);
    assert!(
        o.warnings
            .iter()
            .any(|w| w.contains("could not run `fuseprof-no-such-command-xyz`")),
        "{:?}",
        o.warnings
    );
    assert_valid_empty_run(&cfg.output);
}

#[test]
fn killed_program_gives_128_plus_signal() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "run.sqlite", &["sh", "-c", "kill -9 $$"]);
    let o = run(&cfg).unwrap();
    assert_eq!(o.exit_code, 137);
    assert_eq!(o.signal, Some(9));
    assert_valid_empty_run(&cfg.output);
}

#[test]
fn existing_output_is_refused_before_running_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let cmd = format!("touch {}", marker.display());
    let cfg = config(dir.path(), "run.sqlite", &["sh", "-c", &cmd]);
    std::fs::write(&cfg.output, b"keep me").unwrap();
    match run(&cfg) {
        Err(e @ CollectError::OutputExists { .. }) => {
            assert!(e.to_string().contains("already exists"), "{e}")
        }
        other => panic!("expected OutputExists, got {other:?}"),
    }
    assert_eq!(std::fs::read(&cfg.output).unwrap(), b"keep me");
    assert!(!marker.exists(), "the program must not run");

    let mut cfg = cfg;
    cfg.overwrite = true;
    let o = run(&cfg).unwrap();
    assert_eq!(o.exit_code, 0);
    assert!(marker.exists());
    assert_valid_empty_run(&cfg.output);
}

#[test]
fn two_collects_writing_one_output_both_keep_their_run() {
    let dir = tempfile::tempdir().unwrap();
    let a = config(dir.path(), "run.sqlite", &["sh", "-c", "sleep 0.3; exit 4"]);
    let b = config(dir.path(), "run.sqlite", &["sh", "-c", "sleep 0.6; exit 5"]);
    let ta = std::thread::spawn(move || run(&a).unwrap());
    let tb = std::thread::spawn(move || run(&b).unwrap());
    let (oa, ob) = (ta.join().unwrap(), tb.join().unwrap());
    assert_eq!((oa.exit_code, ob.exit_code), (4, 5));
    assert_eq!(oa.output, dir.path().join("run.sqlite"));
    assert_ne!(ob.output, oa.output);
    assert!(ob
        .warnings
        .iter()
        .any(|w| w.contains("appeared while the program ran")));
    assert_valid_empty_run(&oa.output);
    assert_valid_empty_run(&ob.output);
}

#[test]
fn empty_command_and_missing_tracer_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "run.sqlite", &[]);
    assert!(matches!(run(&cfg), Err(CollectError::EmptyCommand)));
    let mut cfg = config(dir.path(), "run.sqlite", &["true"]);
    cfg.tracer_path = Some(dir.path().join("nope.so"));
    let e = run(&cfg).unwrap_err();
    assert!(matches!(e, CollectError::TracerNotFound { .. }));
    assert!(e.to_string().contains("FUSEPROF_TRACER"), "{e}");
    assert!(!cfg.output.exists());
}

#[test]
fn options_parse_with_clear_errors() {
    assert_eq!(
        "modules".parse::<PytorchMode>().unwrap(),
        PytorchMode::Modules
    );
    assert_eq!("none".parse::<PytorchMode>().unwrap(), PytorchMode::None);
    assert!("layers"
        .parse::<PytorchMode>()
        .unwrap_err()
        .to_string()
        .contains("--pytorch layers"));
    assert_eq!(
        "cudaProfilerApi".parse::<Capture>().unwrap(),
        Capture::CudaProfilerApi
    );
    assert_eq!(
        "nvtx:train step".parse::<Capture>().unwrap(),
        Capture::Nvtx("train step".into())
    );
    assert!("nvtx:".parse::<Capture>().is_err());
    assert!("everything".parse::<Capture>().is_err());
}

#[test]
fn environment_reaches_the_program_and_children() {
    // The spool folder and injection variables are set for the command and inherited by the
    // processes it starts; PYTHONPATH carries the PyTorch hook.
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("env.txt");
    let script = format!(
        "sh -c 'echo \"$FUSEPROF_SPOOL_DIR|$CUDA_INJECTION64_PATH|$NVTX_INJECTION64_PATH|$FUSEPROF_PYTORCH|$FUSEPROF_CAPTURE|$PYTHONPATH|$(ls \"${{PYTHONPATH%%:*}}\" | tr \"\\n\" \" \")\"' > {}",
        seen.display()
    );
    let mut cfg = config(dir.path(), "run.sqlite", &["sh", "-c", &script]);
    cfg.pytorch = PytorchMode::Modules;
    cfg.capture = Capture::Nvtx("step".into());
    let o = run(&cfg).unwrap();
    assert_eq!(o.exit_code, 0);
    let text = std::fs::read_to_string(&seen).unwrap();
    let parts: Vec<&str> = text.trim().split('|').collect();
    let tracer = cfg.tracer_path.as_ref().unwrap().display().to_string();
    assert!(parts[0].contains("fuseprof-spool-"), "{text}");
    assert_eq!(parts[1], tracer);
    assert_eq!(parts[2], tracer);
    assert_eq!(parts[3], "modules");
    assert_eq!(parts[4], "nvtx:step");
    assert!(
        parts[5].ends_with("/python") || parts[5].contains("/python:"),
        "{text}"
    );
    // The hook and the op observer's source it compiles.
    assert_eq!(
        parts[6].trim(),
        "fuseprof_ops.cpp sitecustomize.py",
        "{text}"
    );
    assert!(
        !Path::new(parts[0]).exists(),
        "the spool folder is removed afterwards"
    );
}

// ---- spool ingestion --------------------------------------------------------------------------

fn rec(buf: &mut Vec<u8>, t: u8, f: impl FnOnce(&mut Enc)) {
    let mut e = Enc(buf);
    let at = e.begin(t);
    f(&mut e);
    e.end(at);
}

fn attrs(e: &mut Enc, category: u32, color: Option<u32>, text: &str) {
    e.u32(category);
    e.u8(color.is_some() as u8);
    e.u32(color.unwrap_or(0));
    e.u8(spool::msg::TEXT);
    e.str(text);
}

/// A spool as the tracer writes it for one process, cut short at the end like a crash.
fn sample_spool() -> Vec<u8> {
    sample_spool_of(spool::VERSION)
}

/// [`sample_spool`] as a tracer of spool format `version` writes it.
fn sample_spool_of(version: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(spool::MAGIC);
    b.extend_from_slice(&version.to_le_bytes());
    let (pid, t1, t2) = (4242u32, 100u32, 101u32);
    rec(&mut b, tag::PROCESS, |e| {
        e.u32(pid);
        e.u32(1);
        e.u32(130001);
        e.u8(0);
        e.i64(1_700_000_000_000_000_000);
        e.u64(0);
        e.str("/usr/bin/python3");
        e.str("python3 train.py");
    });
    rec(&mut b, tag::CLOCK, |e| e.i64(-50));
    rec(&mut b, tag::STRING, |e| {
        e.u32(1);
        e.str("void gemm<float>(float*)");
    });
    rec(&mut b, tag::STRING, |e| {
        e.u32(2);
        e.str("cudaLaunchKernel");
    });
    rec(&mut b, tag::CONTEXT, |e| {
        e.u32(1);
        e.u32(0);
    });
    rec(&mut b, tag::NVTX_DOMAIN, |e| {
        e.u64(7);
        e.str("mydomain");
    });
    rec(&mut b, tag::NVTX_CATEGORY, |e| {
        e.u64(7);
        e.u32(3);
        e.str("io");
    });
    rec(&mut b, tag::NVTX_STRING, |e| {
        e.u64(9);
        e.u64(7);
        e.str("registered text");
    });
    rec(&mut b, tag::THREAD_NAME, |e| {
        e.u32(t2);
        e.str("loader");
    });
    // Nested push/pop on t1 (default domain), times on the host clock (+ offset -50).
    rec(&mut b, tag::NVTX_PUSH, |e| {
        e.u32(t1);
        e.u64(1000);
        e.u64(0);
        attrs(e, 0, None, "outer");
    });
    rec(&mut b, tag::NVTX_PUSH, |e| {
        e.u32(t1);
        e.u64(1100);
        e.u64(0);
        attrs(
            e,
            0,
            Some(0xff00ff00),
            "aten::addmm, seq = 12, sizes = [[256], [64, 128], []]",
        );
    });
    rec(&mut b, tag::API, |e| {
        e.u8(1);
        e.u32(211);
        e.u64(1100);
        e.u64(1120);
        e.u32(pid);
        e.u32(t1);
        e.u32(55);
        e.u32(0);
        e.u32(2);
    });
    rec(&mut b, tag::NVTX_POP, |e| {
        e.u32(t1);
        e.u64(1200);
        e.u64(0);
    });
    rec(&mut b, tag::NVTX_POP, |e| {
        e.u32(t1);
        e.u64(1300);
        e.u64(0);
    });
    // A domain push/pop with a registered string and a named category.
    rec(&mut b, tag::NVTX_PUSH, |e| {
        e.u32(t2);
        e.u64(1400);
        e.u64(7);
        e.u32(3);
        e.u8(0);
        e.u32(0);
        e.u8(spool::msg::REGISTERED);
        e.u64(9);
    });
    rec(&mut b, tag::NVTX_POP, |e| {
        e.u32(t2);
        e.u64(1450);
        e.u64(7);
    });
    // A start/end range crossing threads, a mark, a module range.
    rec(&mut b, tag::NVTX_START, |e| {
        e.u64(1);
        e.u32(t1);
        e.u64(1500);
        e.u64(0);
        attrs(e, 0, None, "epoch");
    });
    rec(&mut b, tag::NVTX_END, |e| {
        e.u64(1);
        e.u32(t2);
        e.u64(1900);
    });
    rec(&mut b, tag::NVTX_MARK, |e| {
        e.u32(t1);
        e.u64(1600);
        e.u64(0);
        attrs(e, 0, None, "checkpoint");
    });
    rec(&mut b, tag::NVTX_PUSH, |e| {
        e.u32(t1);
        e.u64(1700);
        e.u64(0);
        attrs(e, 0, None, "module:layers.0.attn:WindowAttention");
    });
    rec(&mut b, tag::NVTX_POP, |e| {
        e.u32(t1);
        e.u64(1800);
        e.u64(0);
    });
    rec(&mut b, tag::KERNEL, |e| {
        e.u64(1170);
        e.u64(1190);
        e.u32(0);
        e.u32(1);
        e.u32(7);
        e.u32(55);
        for v in [4, 1, 1, 128, 1, 1] {
            e.i32(v);
        }
        e.u16(32);
        e.i32(0);
        e.i32(1024);
        e.u32(1);
        e.u32(0);
    });
    rec(&mut b, tag::MEMCPY, |e| {
        e.u64(1010);
        e.u64(1020);
        e.u32(0);
        e.u32(1);
        e.u32(7);
        e.u32(54);
        e.u64(4096);
        e.u8(1);
        e.u32(0);
        if version >= 2 {
            // Pageable to device, in CUPTI's numbering.
            e.u8(1);
            e.u8(3);
        }
    });
    rec(&mut b, tag::SYNC, |e| {
        e.u32(3);
        e.u64(1200);
        e.u64(1250);
        e.u32(56);
        e.u32(1);
        e.u32(7);
        e.u32(0);
    });
    rec(&mut b, tag::DROPPED, |e| {
        e.u64(0);
        e.u64(0);
    });
    // An open range at the end, then a record cut short: the process died while writing.
    rec(&mut b, tag::NVTX_PUSH, |e| {
        e.u32(t1);
        e.u64(2000);
        e.u64(0);
        attrs(e, 0, None, "never closed");
    });
    let mut cut = Vec::new();
    rec(&mut cut, tag::KERNEL, |e| e.u64(1));
    b.extend_from_slice(&cut[..cut.len() - 3]);
    b
}

#[test]
fn spool_ingestion_pairs_ranges_and_keeps_a_crashed_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    std::fs::write(spool_dir.join("fuseprof-4242-1.spool"), sample_spool()).unwrap();
    let out = dir.path().join("run.sqlite");
    let counts = ingest_spool_dir(&spool_dir, &out).unwrap();
    assert_eq!(counts.kernels, 1);
    assert_eq!(counts.memcpys, 1);
    assert_eq!(counts.api_calls, 1);

    let mut store = Store::open(&out).unwrap();
    let strings = store.strings().unwrap();
    let mut ranges = Vec::new();
    store.for_each_range(|r| ranges.push(r)).unwrap();
    let find = |name: &str| {
        ranges
            .iter()
            .find(|r| strings.get(r.name) == name)
            .unwrap_or_else(|| panic!("no range {name}"))
            .clone()
    };
    let outer = find("outer");
    assert_eq!(
        (outer.kind, outer.depth, outer.start_ns, outer.end_ns),
        (RangeKind::NvtxPushPop, Some(0), 950, Some(1250))
    );
    let op = find("aten::addmm");
    assert_eq!(op.depth, Some(1));
    assert_eq!(op.color, Some(0xff00ff00));
    assert_eq!(strings.get(op.input_dims.unwrap()), "[[256],[64,128],[]]");
    let reg = find("registered text");
    assert_eq!(strings.get(reg.domain.unwrap()), "mydomain");
    assert_eq!(strings.get(reg.category.unwrap()), "io");
    let epoch = find("epoch");
    assert_eq!(
        (epoch.kind, epoch.tid, epoch.end_tid),
        (RangeKind::NvtxStartEnd, 100, Some(101))
    );
    let mark = find("checkpoint");
    assert_eq!((mark.kind, mark.end_ns), (RangeKind::NvtxMark, None));
    let module = find("layers.0.attn");
    assert_eq!(strings.get(module.domain.unwrap()), "pytorch.modules");
    assert_eq!(strings.get(module.category.unwrap()), "WindowAttention");
    let open = find("never closed");
    assert_eq!(open.end_ns, None);
    let sync = find("cudaStreamSynchronize");
    assert_eq!(
        (sync.kind, sync.pid, sync.tid, sync.correlation_id),
        (RangeKind::CudaSync, 0, 7, Some(56))
    );

    let mut kernels = Vec::new();
    store.for_each_kernel(|k| kernels.push(k)).unwrap();
    let k = &kernels[0];
    assert_eq!(
        (k.pid, k.correlation_id, k.stream_id),
        (Some(4242), Some(55), 7)
    );
    assert_eq!(strings.get(k.name), "void gemm<float>(float*)");
    assert_eq!(k.block, Some([128, 1, 1]));
    assert_eq!(k.dynamic_smem_bytes, Some(1024));
    // The launch call and its kernel join on (pid, correlation id) and sit inside the op range.
    let mut calls = Vec::new();
    store.for_each_api_call(|a| calls.push(a)).unwrap();
    assert_eq!((calls[0].pid, calls[0].correlation_id), (4242, Some(55)));
    assert!(op.start_ns <= calls[0].start_ns && calls[0].end_ns <= op.end_ns.unwrap());

    let threads = store.threads().unwrap();
    assert!(threads
        .iter()
        .any(|(p, t, n)| (*p, *t) == (4242, 101) && n.as_deref() == Some("loader")));
    let processes = store.processes().unwrap();
    assert_eq!(processes[0], (4242, Some("python3 train.py".to_string())));
    assert_eq!(
        store.run().unwrap().cupti_version.as_deref(),
        Some("130001")
    );
}

/// The copies of a spool, as (copy kind, source memory, destination memory).
fn spool_copies(spool: Vec<u8>) -> Vec<(Option<CopyKind>, Option<MemoryKind>, Option<MemoryKind>)> {
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    std::fs::write(spool_dir.join("fuseprof-4242-1.spool"), spool).unwrap();
    let out = dir.path().join("run.sqlite");
    ingest_spool_dir(&spool_dir, &out).unwrap();
    let mut copies = Vec::new();
    Store::open(&out)
        .unwrap()
        .for_each_memop(|m| copies.push((m.copy_kind, m.src_memory, m.dst_memory)))
        .unwrap();
    copies
}

#[test]
fn spool_copies_keep_their_memory_kinds_and_older_spools_read_as_unknown() {
    assert_eq!(
        spool_copies(sample_spool()),
        [(
            Some(CopyKind::HtoD),
            Some(MemoryKind::Pageable),
            Some(MemoryKind::Device)
        )]
    );
    assert_eq!(
        spool_copies(sample_spool_of(1)),
        [(Some(CopyKind::HtoD), None, None)]
    );
    // A spool from a newer tracer is refused with both versions named.
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    std::fs::write(
        spool_dir.join("fuseprof-1-1.spool"),
        sample_spool_of(spool::VERSION + 1),
    )
    .unwrap();
    let e = ingest_spool_dir(&spool_dir, &dir.path().join("run.sqlite")).unwrap_err();
    assert!(e.to_string().contains("spool format version 3"), "{e}");
}

#[test]
fn a_foreign_file_in_the_spool_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    std::fs::write(
        spool_dir.join("fuseprof-1-1.spool"),
        b"this is not a spool file",
    )
    .unwrap();
    let e = ingest_spool_dir(&spool_dir, &dir.path().join("run.sqlite")).unwrap_err();
    assert!(e.to_string().contains("not a fuseprof spool file"), "{e}");
}

/// One process of a job that sees only its own GPU, as device 0 (`CUDA_VISIBLE_DEVICES`):
/// a kernel and the device record. `visible: None` writes the older PROCESS record.
fn one_gpu_process_spool(pid: u32, visible: Option<&str>) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(spool::MAGIC);
    b.extend_from_slice(&spool::VERSION.to_le_bytes());
    rec(&mut b, tag::PROCESS, |e| {
        e.u32(pid);
        e.u32(1);
        e.u32(130001);
        e.u8(0);
        e.i64(1_700_000_000_000_000_000);
        e.u64(0);
        e.str("/usr/bin/python3");
        e.str("python3 train.py");
        if let Some(v) = visible {
            e.str(v);
        }
    });
    rec(&mut b, tag::STRING, |e| {
        e.u32(1);
        e.str("ncclDevKernel_AllReduce_Sum_f32_RING_LL");
    });
    rec(&mut b, tag::DEVICE, |e| {
        e.u32(0);
        e.u32(9);
        e.u32(0);
        e.u32(132);
        e.u64(80 << 30);
        e.u32(1_980_000);
        e.u64(3_350_000_000);
        e.str("NVIDIA H100 80GB HBM3");
    });
    rec(&mut b, tag::KERNEL, |e| {
        e.u64(1000 + u64::from(pid));
        e.u64(2000 + u64::from(pid));
        e.u32(0); // device 0 as the process sees it
        e.u32(1);
        e.u32(7);
        e.u32(5);
        for v in [8, 1, 1, 256, 1, 1] {
            e.i32(v);
        }
        e.u16(32);
        e.i32(0);
        e.i32(0);
        e.u32(1);
        e.u32(0);
    });
    rec(&mut b, tag::FLUSHED, |e| {
        e.u64(3000);
        e.u8(spool::flush_reason::EXIT);
    });
    b
}

#[test]
fn processes_that_each_see_their_gpu_as_device_0_keep_their_gpus_apart() {
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    for (pid, visible) in [(10u32, "2"), (11, " 3 ")] {
        let path = spool_dir.join(format!("fuseprof-{pid}-1.spool"));
        std::fs::write(path, one_gpu_process_spool(pid, Some(visible))).unwrap();
    }
    let out = dir.path().join("run.sqlite");
    ingest_spool_dir(&spool_dir, &out).unwrap();
    let mut store = Store::open(&out).unwrap();
    let mut by_pid = Vec::new();
    store
        .for_each_kernel(|k| by_pid.push((k.pid.unwrap(), k.device_id)))
        .unwrap();
    by_pid.sort_unstable();
    assert_eq!(by_pid, [(10, 2), (11, 3)]);
    let mut devices: Vec<i64> = store.devices().unwrap().iter().map(|d| d.id).collect();
    devices.sort_unstable();
    assert_eq!(devices, [2, 3]);
    // So the job gets its ranks, numbered by GPU.
    let labels = fuseprof_collector::import::ranks::ranks_by_device(&mut store)
        .unwrap()
        .expect("two processes on two GPUs are two ranks");
    assert_eq!(labels.process_rank, [(10, 0), (11, 1)]);

    // Unset, UUIDs or an older spool without the field: the process's own ids are kept.
    for (i, visible) in [Some(""), Some("GPU-5f3c2a1e-0000"), None]
        .into_iter()
        .enumerate()
    {
        let d = dir.path().join(format!("keep{i}"));
        std::fs::create_dir(&d).unwrap();
        std::fs::write(
            d.join("fuseprof-12-1.spool"),
            one_gpu_process_spool(12, visible),
        )
        .unwrap();
        let out = dir.path().join(format!("keep{i}.sqlite"));
        ingest_spool_dir(&d, &out).unwrap();
        let mut store = Store::open(&out).unwrap();
        let mut ids = Vec::new();
        store.for_each_kernel(|k| ids.push(k.device_id)).unwrap();
        assert_eq!(ids, [0], "{visible:?}");
    }
}

/// Counter records (`--metrics`) become the run's counters: device ids through
/// CUDA_VISIBLE_DEVICES, values scaled, sample times put on CUPTI's clock by the clock
/// readings, and the samples attributed to the kernels that ran in them.
#[test]
fn counter_records_become_counters_attributed_to_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    std::fs::create_dir(&spool_dir).unwrap();
    let mut b = Vec::new();
    b.extend_from_slice(spool::MAGIC);
    b.extend_from_slice(&spool::VERSION.to_le_bytes());
    rec(&mut b, tag::PROCESS, |e| {
        e.u32(77);
        e.u32(1);
        e.u32(130001);
        e.u8(0);
        e.i64(1_700_000_000_000_000_000);
        e.u64(0);
        e.str("/usr/bin/python3");
        e.str("python3 infer.py");
        e.str("2"); // the process's device 0 is the machine's GPU 2
    });
    // Two kernels back to back on device 0, CUPTI times 10_000..10_400..10_800.
    for (start, corr) in [(10_000u64, 1u32), (10_400, 2)] {
        rec(&mut b, tag::KERNEL, |e| {
            e.u64(start);
            e.u64(start + 400);
            e.u32(0);
            e.u32(1);
            e.u32(7);
            e.u32(corr);
            for v in [1, 1, 1, 32, 1, 1] {
                e.i32(v);
            }
            e.u16(32);
            e.i32(0);
            e.i32(0);
            e.u32(1);
            e.u32(0);
        });
    }
    rec(&mut b, tag::STRING, |e| {
        e.u32(1);
        e.str("copy_kernel");
    });
    for (index, kind, scale, name, quantity) in [
        (0u32, 0u8, 32.0, "dram__sectors_read.sum", "dram_read_bytes"),
        (1, 1, 1.0, "lts__t_sector_hit_rate.pct", "l2_hit_pct"),
    ] {
        rec(&mut b, tag::COUNTER_METRIC, |e| {
            e.u32(0);
            e.u32(index);
            e.u8(kind);
            e.f64(scale);
            e.u64(200);
            e.str("pm_sampling");
            e.str(name);
            e.str(quantity);
            e.str(if kind == 0 { "byte" } else { "percent" });
        });
    }
    // The device's clock runs 9_000 ns behind CUPTI's.
    rec(&mut b, tag::GPU_CLOCK, |e| {
        e.u32(0);
        e.u64(9_500);
        e.u64(500);
    });
    // Four samples of 200 ns on the device clock 1_000..1_800 = CUPTI 10_000..10_800.
    rec(&mut b, tag::COUNTER_SAMPLES, |e| {
        e.u32(0);
        e.u32(2);
        e.u32(4);
        for (i, (sectors, hit)) in [(10.0, 50.0), (20.0, 50.0), (30.0, 80.0), (40.0, 90.0)]
            .into_iter()
            .enumerate()
        {
            e.u64(1_000 + 200 * i as u64);
            e.u64(1_200 + 200 * i as u64);
            e.f64(sectors);
            e.f64(hit);
        }
    });
    rec(&mut b, tag::FLUSHED, |e| {
        e.u64(20_000);
        e.u8(spool::flush_reason::EXIT);
    });
    std::fs::write(spool_dir.join("fuseprof-77-1.spool"), &b).unwrap();
    let out = dir.path().join("run.sqlite");
    let (_, warnings) =
        fuseprof_collector::collect::ingest_spool_dir_with_warnings(&spool_dir, &out).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");

    let mut store = Store::open(&out).unwrap();
    let metrics = store.counter_metrics().unwrap();
    assert_eq!(metrics.len(), 2);
    assert_eq!(metrics[0].device_id, 2);
    assert_eq!(metrics[0].quantity, "dram_read_bytes");
    assert_eq!(metrics[1].kind, fuseprof_store::CounterKind::Average);
    let samples = store.counter_samples(metrics[0].id).unwrap();
    assert_eq!(
        samples
            .iter()
            .map(|s| (s.start_ns, s.end_ns, s.value))
            .collect::<Vec<_>>(),
        vec![
            (10_000, 10_200, 320.0),
            (10_200, 10_400, 640.0),
            (10_400, 10_600, 960.0),
            (10_600, 10_800, 1280.0)
        ]
    );
    let per_kernel: Vec<(i64, i64, f64)> = store
        .kernel_counters()
        .unwrap()
        .iter()
        .map(|k| (k.kernel_id, k.metric_id, k.value))
        .collect();
    assert_eq!(
        per_kernel,
        vec![(1, 1, 960.0), (1, 2, 50.0), (2, 1, 2240.0), (2, 2, 85.0)]
    );
}
