"""The estimator's calibration: every bundled kernel family timed by `fuseprof bench`'s own driver
(the same builders, the same GPU-time-per-call measure) on the shapes of Swin-T, ViT-B/16,
BERT-base and GPT-2 at batch sizes 1 to 256, in fp16 and bf16.

    PYTHONPATH=kernels/python:fusion-advisor/python python3 fusion-advisor/bench/calibrate.py \
        OUT.json [--part I/N]

Writes one row per (shape, dtype, batch): the family and parameters the estimator reads
(`fusion-advisor/src/estimate.rs`), the driver's pattern and parameters, ours_us (GPU time per
call, median of the driver's CUDA-graph replays), the eager chain's time and the numerics.
`--part I/N` times every N-th row from the I-th, so that N GPUs share the sweep.
`python3 fusion-advisor/bench/calibration_tsv.py` turns the rows of record into
`fusion-advisor/src/calibration.tsv`.
"""
import datetime
import sys
import time

import torch

import fuseprof_bench as fb

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def shapes(b):
    """(label, estimator family, its parameters, driver pattern, driver parameters) at batch b."""
    rows = []
    for s, (side, c, heads, windows) in enumerate(((56, 96, 3, 64), (28, 192, 6, 16), (14, 384, 12, 4)), 1):
        bw = b * windows
        p = dict(batch=bw, heads=heads, seq=49, head_dim=32, windows=min(windows, bw))
        rows.append((f"window fMHA Swin-T s{s}", "window_fmha", p, "window_attention", p))
        lp = dict(b=b, h=side, w=side, c=c, window=7)
        rows.append((f"LN+shift+partition Swin-T s{s}", "ln_partition", lp, "window_partition", dict(lp, shift=3)))
        for ln in (0, 1):
            rp = dict(lp, with_ln=ln)
            rows.append((f"reverse+shift+residual{'+LN' if ln else ''} Swin-T s{s}", "window_reverse", rp,
                         "window_reverse", dict(rp, shift=3)))
    for label, n, km in (("ViT-B/16", 197, 0), ("BERT-base s128", 128, 1)):
        p = dict(batch=b, heads=12, seq=n, head_dim=64, key_mask=km)
        rows.append((f"fMHA {label}", "fmha", p, "full_attention", p))
    # Each epilogue beside the plain GEMM of its shape: the estimator adds an epilogue's cost to
    # the GEMM a trace recorded.
    for label, m, n, k, epilogue in (("Swin-T s1 fc1", b * 3136, 384, 96, "gelu"),
                                     ("BERT FFN1", b * 128, 3072, 768, "gelu"),
                                     ("Swin-T s1 fc2", b * 3136, 96, 384, "residual"),
                                     ("BERT FFN2", b * 128, 768, 3072, "residual")):
        p = dict(m=m, n=n, k=k)
        rows.append((f"GEMM {label}", "gemm", p, "odd_gemm", dict(p, batch=1, b_is_weight=1)))
        if epilogue == "gelu":
            rows.append((f"GEMM+bias+GELU(erf) {label}", "gemm_gelu", p, "gemm_gelu", p))
        else:
            rows.append((f"GEMM+bias+residual {label}", "gemm_residual", p, "gemm_residual", p))
    for label, r, c in (("Swin-T s1", b * 3136, 96), ("BERT", b * 128, 768)):
        p = dict(rows=r, cols=c)
        rows.append((f"bias+residual {label}", "bias_residual", p, "bias_residual", p))
    for s, (r, c) in enumerate(((b * 3136, 96), (b * 784, 192)), 1):
        p = dict(rows=r, width=c, hidden=4 * c)
        rows.append((f"LN+MLP+residual Swin-T s{s}", "ln_mlp", p, "fused_mlp", p))
    # GPT-2's LM head (50257 -> 50264) on 64 tokens a sequence; Swin's 49-wide bmm per window.
    p = dict(batch=1, m=b * 64, n=50257, k=768)
    rows.append(("padded LM head GPT-2", "padded_gemm", p, "odd_gemm", dict(p, b_is_weight=1)))
    p = dict(batch=b * 192, m=49, n=49, k=32)
    rows.append(("padded bmm Swin-T s1", "padded_gemm", p, "odd_gemm", dict(p, b_is_weight=0)))
    for label, c, patch in (("Swin-T", 96, 4), ("ViT-B/16", 768, 16)):
        p = dict(b=b, cin=3, h=224, w=224, c=c, ph=patch, pw=patch)
        rows.append((f"patch embedding {label}", "patch_embed", p, "patch_embed", p))
    return rows


def main():
    out_path = sys.argv[1]
    part, parts = 0, 1
    if "--part" in sys.argv:
        part, parts = (int(x) for x in sys.argv[sys.argv.index("--part") + 1].split("/"))
    todo = [(b, dt, s) for b in BATCHES for dt in ("fp16", "bf16") for s in shapes(b)][part::parts]
    torch.manual_seed(0)
    rows = []
    t0 = time.time()
    for i, (b, dt, (label, family, kp, pattern, bp)) in enumerate(todo):
        entry = {"id": f"{label} b{b} {dt}", "pattern": pattern, "dtype": dt, "params": bp}
        try:
            r = fb.bench_one(entry, 1, False)
        except Exception as e:  # noqa: BLE001 - a shape that does not fit is recorded as such
            r = {"status": "error", "ours_us": None, "eager_us": None, "rel_error": None,
                 "detail": {"error": f"{type(e).__name__}: {e}"[:300]}}
        torch.cuda.empty_cache()
        rows.append(dict(label=label, family=family, kernel_params=kp, pattern=pattern, params=bp, dtype=dt,
                         batch=b, status=r["status"], ours_us=r["ours_us"], eager_us=r["eager_us"],
                         rel_error=r["rel_error"], error=r["detail"].get("error")))
        if i % 20 == 0:
            print(f"[{i + 1}/{len(todo)}] {entry['id']}: {r['status']} {r['ours_us']} us "
                  f"({time.time() - t0:.0f} s)", flush=True)
    out = dict(device=torch.cuda.get_device_name(), driver=fb.driver_version(), torch=torch.__version__,
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               part=f"{part}/{parts}", rows=rows)
    fb.write_json(out_path, out)


if __name__ == "__main__":
    main()
