"""Device-side correctness checks and benchmarks of fuseprof's bundled kernels.

    python3 kernels/bench/gpu_check.py --mode check     # correctness, every shape family, fp16 + bf16
    python3 kernels/bench/gpu_check.py --mode small     # small shapes only (for compute-sanitizer)
    python3 kernels/bench/gpu_check.py --mode race      # small shapes without the cuBLASLt GEMMs
    python3 kernels/bench/gpu_check.py --mode bench     # ours vs eager / torch.compile / SDPA, same run
    python3 kernels/bench/gpu_check.py --mode attn      # ViT / BERT attention: ours and SDPA, interleaved
    python3 kernels/bench/gpu_check.py --mode mlp       # the fused LN + MLP alone: its checks, then its rows
    python3 kernels/bench/gpu_check.py --mode bwd       # the backward kernels: checks, then timings
    python3 kernels/bench/gpu_check.py --mode bwd-small # their checks on small shapes (for compute-sanitizer)

Correctness: fresh random inputs per check, outputs poisoned with NaN before each run, compared
with a float64 reference (relative Frobenius error < 1e-2, NaN never); in --mode check each
attention check's note names the kernel that ran. CHECK_ONLY=attention: the attention checks
only; CHECK_DTYPES=float16: one dtype. Benchmarks: median of triton.testing.do_bench. Results
go to $OUT (check.json, bench.json, bench.md); run_device.sh runs the modes and
compare_record.py compares a run with the record.
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fuseprof_kernels as fk  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
DEV = "cuda"
TOL = 1e-2
CHECKS = []


# ----------------------------------------------------------------------------- helpers
def key_padding_mask(B, N, dtype, min_len=1):
    """An additive key-padding mask [B, N] as BERT makes it: 0 for the first len keys of each
    sequence (len drawn from [min_len, N]), -10000 after."""
    lens = torch.randint(min_len, N + 1, (B,), device=DEV)
    return torch.where(torch.arange(N, device=DEV)[None] < lens[:, None], 0.0, -10000.0).to(dtype)


def rel_err(out, ref):
    out = out.double()
    ref = ref.double()
    den = ref.norm().item()
    return (out - ref).norm().item() / (den if den > 0 else 1.0)


def poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), device=DEV, dtype=dtype)


def record(name, dtype, out, ref, note=""):
    nan = bool(torch.isnan(out).any().item())
    e = rel_err(out, ref) if not nan else float("nan")
    ok = (not nan) and e < TOL
    CHECKS.append(dict(name=name, dtype=str(dtype).replace("torch.", ""), rel_err=e, nan=nan, ok=ok, note=note))
    print(f"{'PASS' if ok else 'FAIL'} {name:58s} {str(dtype):15s} rel_err={e:.2e} nan={nan} {note}", flush=True)


def guarded(name, fn):
    try:
        fn()
    except Exception as ex:  # keep going: one run should report every failure
        CHECKS.append(dict(name=name, dtype="-", rel_err=float("nan"), nan=False, ok=False,
                           note=f"exception: {ex!r}"[:400]))
        print(f"FAIL {name}: exception", flush=True)
        traceback.print_exc()


# ----------------------------------------------------------------------------- references
def attn_ref(qkv, heads, seq, bias=None, wmask=None, kpm=None, scale=None):
    T = qkv.shape[0]
    d = qkv.shape[1] // (3 * heads)
    B = T // seq
    scale = d ** -0.5 if scale is None else scale
    x = qkv.double().view(B, seq, 3, heads, d).permute(2, 0, 3, 1, 4)
    q, k, v = x[0], x[1], x[2]
    s = (q @ k.transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias.double()[None]
    if wmask is not None:
        idx = torch.arange(B, device=DEV) % wmask.shape[0]
        s = s + wmask.double()[idx][:, None]
    if kpm is not None:
        s = s + kpm.double()[:, None, None, :]
    o = s.softmax(-1) @ v
    return o.permute(0, 2, 1, 3).reshape(T, heads * d)


def grid(H, W, ws):
    return -(-H // ws), -(-W // ws)


def lnpart_ref(x, g, b, ws, shift, eps=1e-5):
    B, H, W, C = x.shape
    y = F.layer_norm(x.double(), (C,), g.double(), b.double(), eps)
    if shift:
        y = torch.roll(y, (-shift, -shift), (1, 2))
    nh, nw = grid(H, W, ws)
    y = F.pad(y, (0, 0, 0, nw * ws - W, 0, nh * ws - H))
    return y.view(B, nh, ws, nw, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)


def rev_ref(win, sc, ws, shift, g=None, b=None, eps=1e-5):
    B, H, W, C = sc.shape
    nh, nw = grid(H, W, ws)
    y = win.double().view(B, nh, nw, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(B, nh * ws, nw * ws, C)
    y = y[:, :H, :W]
    if shift:
        y = torch.roll(y, (shift, shift), (1, 2))
    out = sc.double() + y
    ln = None
    if g is not None:
        ln = F.layer_norm(out.to(sc.dtype).double(), (C,), g.double(), b.double(), eps)
    return out, ln


def gelu_erf(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


# ----------------------------------------------------------------------------- checks
def check_attention(dtype, small):
    cases = [
        # (name, B_, N, H, d, bias, mask kind, nW)
        ("attn swin s1-like nW=64", 256 if small else 4096, 49, 3, 32, True, "win", 64),
        ("attn swin nW=3 (batch 100 not a multiple)", 100, 49, 3, 32, True, "win", 3),
        ("attn swin batch 1, bias only", 1, 49, 1, 32, True, None, 0),
        ("attn N=1", 3, 1, 2, 32, True, "win", 2),
        ("attn N=65 d=32 (two key blocks) + mask", 6, 65, 2, 32, True, "win", 4),
        ("attn vit N=197 d=64", 4 if small else 64, 197, 12, 64, False, None, 0),
        ("attn bert N=128 d=64 kpm", 4 if small else 64, 128, 12, 64, False, "kpm", 0),
        ("attn bert N=128 d=64 no mask", 4 if small else 64, 128, 12, 64, False, None, 0),
        ("attn bert N=384 d=64 kpm", 2 if small else 16, 384, 12, 64, False, "kpm", 0),
        ("attn N=100 d=64 kpm batch 1 (keys past N in one 128-key block)", 1, 100, 12, 64, False, "kpm", 0),
        ("attn N=77 d=64 odd", 3, 77, 5, 64, True, None, 0),
        ("attn N=65 d=64 no mask (the second 64 rows hold one)", 3, 65, 2, 64, False, None, 0),
        ("attn N=129 d=64 no mask (a 128-row block with one row)", 2, 129, 2, 64, False, None, 0),
        ("attn N=300 d=64 kpm batch 1 (5 key blocks through the ring)", 1, 300, 3, 64, False, "kpm", 0),
        # more items than resident CTAs, with gridDim.x not a multiple of the query blocks or
        # heads: the persistent wgmma kernel's item stride carries across all three digits
        ("attn N=600 d=64 kpm 20x3 heads (10 key blocks, 300 items)", 2 if small else 20, 600, 3, 64, False, "kpm", 0),
        ("attn N=197 d=64 64x5 heads (640 items)", 4 if small else 64, 197, 5, 64, False, None, 0),
        ("attn N=64 d=64 bias+mask (72 KB smem window kernel)", 10, 64, 4, 64, True, "win", 3),
        ("attn N=49 no bias no mask", 50, 49, 3, 32, False, None, 0),
        ("attn N=20 d=64 mask only", 7, 20, 2, 64, False, "win", 2),
    ]
    for name, B, N, H, d, has_bias, mk, nW in cases:
        def run():
            qkv = torch.randn(B * N, 3 * H * d, device=DEV, dtype=dtype)
            bias = (torch.randn(H, N, N, device=DEV) * 0.5).to(dtype) if has_bias else None
            wmask = kpm = None
            if mk == "win":
                wmask = torch.zeros(nW, N, N, device=DEV).masked_fill(torch.rand(nW, N, N, device=DEV) > 0.7,
                                                                         -100.0).to(dtype)
            elif mk == "kpm":
                kpm = key_padding_mask(B, N, dtype)
            out = poisoned(B * N, H * d, dtype=dtype)

            def call():
                fk.attention(qkv, H, N, bias=bias, window_mask=wmask, key_padding_mask=kpm, out=out)
            call()
            # which kernel the launcher chose, from a second call (not under compute-sanitizer,
            # whose shapes are the small ones: the profiler's CUPTI would clash with it)
            ran = launched_kernels(call) if not small else ""
            torch.cuda.synchronize()
            ref = attn_ref(qkv, H, N, bias, wmask, kpm)
            record(name, dtype, out, ref, f"kernel={ran}" if ran else "")
            if N <= 64 and (has_bias or wmask is not None):
                # the persistent window kernel on the precombined additive tensor
                add = fk.attention_add(H, N, bias=bias, window_mask=wmask,
                                       out=poisoned(wmask.shape[0] if wmask is not None else 1, H, N,
                                                    -(-N // 8) * 8, dtype=dtype))
                out2 = poisoned(B * N, H * d, dtype=dtype)
                fk.attention(qkv, H, N, add=add, out=out2)
                torch.cuda.synchronize()
                record(name + " [combined]", dtype, out2, ref)
                comb = torch.zeros_like(add, dtype=torch.float32)
                comb[..., N:] = float("-inf")  # padded keys are masked by the tensor itself
                if has_bias:
                    comb[..., :N] += bias.float()[None]
                if wmask is not None:
                    comb[..., :N] += wmask.float()[:, None]
                ok = bool(torch.equal(add, comb.to(dtype)))
                CHECKS.append(dict(name=name + " [combine exact]", dtype=str(dtype), rel_err=0.0 if ok else 1.0,
                                   nan=False, ok=ok, note=""))
                print(f"{'PASS' if ok else 'FAIL'} {name} [combine exact] {dtype}", flush=True)
        guarded(name, run)


def check_window_ops(dtype, small):
    cases = [
        ("swin s1 64x56x56x96 shift 3", 4 if small else 64, 56, 56, 96, 7, 3),
        ("swin s3 14x14x384 shift 3", 2, 14, 14, 384, 7, 3),
        ("swin s4 7x7x768 shift 0", 3, 7, 7, 768, 7, 0),
        ("pad 9x10x96 shift 3 (not a multiple of 7)", 2, 9, 10, 96, 7, 3),
        ("pad 1x1x8 window 7", 1, 1, 1, 8, 7, 0),
        ("scalar C=100 13x11 shift 3", 2, 13, 11, 100, 7, 3),
        ("C=1024 16x16 ws 8 shift 4", 1, 16, 16, 1024, 8, 4),
    ]
    for name, B, H, W, C, ws, sh in cases:
        def run():
            x = torch.randn(B, H, W, C, device=DEV, dtype=dtype)
            g = (1 + 0.1 * torch.randn(C, device=DEV)).to(dtype)
            b = (0.1 * torch.randn(C, device=DEV)).to(dtype)
            nh, nw = grid(H, W, ws)
            out = poisoned(B * nh * nw, ws * ws, C, dtype=dtype)
            fk.ln_shift_partition(x, g, b, ws, sh, out=out)
            torch.cuda.synchronize()
            ref = lnpart_ref(x, g, b, ws, sh)
            pad_rows = ref.abs().sum(-1) == 0
            exact_zero = bool((out[pad_rows] == 0).all().item()) if pad_rows.any() else True
            record("ln+shift+partition " + name, dtype, out, ref, "" if exact_zero else "padding rows not zero")
            if not exact_zero:
                CHECKS[-1]["ok"] = False

            win = torch.randn(B * nh * nw, ws * ws, C, device=DEV, dtype=dtype)
            sc = torch.randn(B, H, W, C, device=DEV, dtype=dtype)
            o1 = poisoned(B, H, W, C, dtype=dtype)
            fk.window_reverse_residual(win, sc, ws, sh, out=o1)
            torch.cuda.synchronize()
            r1, _ = rev_ref(win, sc, ws, sh)
            record("reverse+shift+residual " + name, dtype, o1, r1)
            o2 = poisoned(B, H, W, C, dtype=dtype)
            l2 = poisoned(B, H, W, C, dtype=dtype)
            fk.window_reverse_residual(win, sc, ws, sh, gamma=g, beta=b, out=o2, ln_out=l2, with_ln=True)
            torch.cuda.synchronize()
            r2, rl = rev_ref(win, sc, ws, sh, g, b)
            record("reverse+shift+residual+LN (sum) " + name, dtype, o2, r2)
            record("reverse+shift+residual+LN (ln) " + name, dtype, l2, rl)
        guarded(name, run)


def check_elementwise(dtype, small):
    for rows, cols in [(2000 if small else 200704, 96), (7, 49), (1, 8), (33, 3072)]:
        name = f"bias+residual {rows}x{cols}"

        def run():
            x = torch.randn(rows, cols, device=DEV, dtype=dtype)
            r = torch.randn_like(x)
            bb = torch.randn(cols, device=DEV, dtype=dtype)
            out = poisoned(rows, cols, dtype=dtype)
            fk.bias_residual(x, bb, r, out=out)
            torch.cuda.synchronize()
            record(name, dtype, out, x.double() + bb.double() + r.double())
            out2 = poisoned(rows, cols, dtype=dtype)
            fk.bias_gelu(x, bb, out=out2)
            torch.cuda.synchronize()
            record(f"bias+gelu(erf) {rows}x{cols}", dtype, out2, gelu_erf(x.double() + bb.double()))
        guarded(name, run)

    def run_pad():
        a = torch.randn(12, 49, 33, device=DEV, dtype=dtype)
        p = fk.pad(a, rows_to=56, cols_to=40, out=poisoned(12, 56, 40, dtype=dtype))
        torch.cuda.synchronize()
        ref = torch.zeros(12, 56, 40, device=DEV, dtype=torch.float64)
        ref[:, :49, :33] = a.double()
        ok = bool(torch.equal(p.double(), ref))
        CHECKS.append(dict(name="pad [12,49,33]->[12,56,40] exact", dtype=str(dtype), rel_err=0.0 if ok else 1.0,
                           nan=False, ok=ok, note=""))
        print(f"{'PASS' if ok else 'FAIL'} pad exact {dtype}", flush=True)
    guarded("pad", run_pad)


def mlp_ref(x, gamma, beta, w1, b1, w2, b2, eps=1e-5):
    """LayerNorm and the unfused MLP + residual in float64, LayerNorm's output and the hidden
    activations rounded to the element type as the kernel (and PyTorch's chain) round them."""
    xd = x.double()
    xn = F.layer_norm(xd, (x.shape[-1],), gamma.double(), beta.double(), eps).to(x.dtype).double()
    h = gelu_erf(xn @ w1.double().t() + b1.double()).to(x.dtype).double()
    return xd + h @ w2.double().t() + b2.double()


def mlp_inputs(rows, c, hid, dtype):
    x = torch.randn(rows, c, device=DEV, dtype=dtype)
    gamma = 1 + 0.1 * torch.randn(c, device=DEV, dtype=dtype)
    beta = 0.1 * torch.randn(c, device=DEV, dtype=dtype)
    w1 = (torch.randn(hid, c, device=DEV) * c ** -0.5).to(dtype)
    b1 = torch.randn(hid, device=DEV, dtype=dtype) * 0.1
    w2 = (torch.randn(c, hid, device=DEV) * hid ** -0.5).to(dtype)
    b2 = torch.randn(c, device=DEV, dtype=dtype) * 0.1
    return x, gamma, beta, w1, b1, w2, b2


def check_mlp(dtype, small):
    # C = 96 with hidden 384 runs the resident kernel (where the GPU has the shared memory),
    # every other shape the streaming one
    shapes = [(1, 96, 384), (1000, 96, 384), (1000, 96, 768), (333, 128, 512), (300, 192, 768), (129, 192, 64)]
    if not small:
        shapes += [(200704, 96, 384), (50176, 192, 768)]
    for rows, c, hid in shapes:
        name = f"LN + MLP + residual {rows}x{c} hidden {hid}"

        def run():
            args = mlp_inputs(rows, c, hid, dtype)
            ref = mlp_ref(*args)
            out = fk.ln_mlp_residual(*args, out=poisoned(rows, c, dtype=dtype))
            torch.cuda.synchronize()
            record(name, dtype, out, ref)
            if rows <= 1000:  # in place: out = x
                x2 = args[0].clone()
                fk.ln_mlp_residual(x2, *args[1:], out=x2)
                torch.cuda.synchronize()
                record(name + " in place", dtype, x2, ref)
        guarded(name, run)


def check_gemm(dtype, small):
    def linear_n49():
        X = torch.randn(2000, 96, device=DEV, dtype=dtype)
        W = torch.randn(49, 96, device=DEV, dtype=dtype) * 0.1
        Wp = fk.pad(W, rows_to=56, cols_to=96)
        out = poisoned(2000, 56, dtype=dtype)
        fk.gemm(X, Wp, "nk", out=out)
        torch.cuda.synchronize()
        record("gemm linear n=49 padded to 56", dtype, out[:, :49], X.double() @ W.double().t())
        ok_pad = bool((out[:, 49:] == 0).all().item())
        CHECKS.append(dict(name="gemm padded columns are zero", dtype=str(dtype), rel_err=0.0, nan=False, ok=ok_pad,
                           note=""))
        out2 = poisoned(2000, 49, dtype=dtype)
        fk.gemm(X, W, "nk", out=out2)
        torch.cuda.synchronize()
        record("gemm linear n=49 unpadded (our cuBLASLt call)", dtype, out2, X.double() @ W.double().t())

    def k4095():
        M, K, N = (256, 4095, 384) if small else (1024, 4095, 1024)
        X = torch.randn(M, K, device=DEV, dtype=dtype)
        W = torch.randn(K, N, device=DEV, dtype=dtype) * 0.02
        Xp = fk.pad(X, cols_to=4096)
        Wp = fk.pad(W, rows_to=4096, cols_to=N)
        out = poisoned(M, N, dtype=dtype)
        fk.gemm(Xp, Wp, "kn", out=out)
        torch.cuda.synchronize()
        record("gemm K=4095 padded to 4096 (kn)", dtype, out, X.double() @ W.double())

    def bmm49():
        a = torch.randn(24, 49, 32, device=DEV, dtype=dtype)
        bm = torch.randn(24, 32, 49, device=DEV, dtype=dtype)
        ap = fk.pad(a, rows_to=56, cols_to=32)
        bp = fk.pad(bm, rows_to=32, cols_to=56)
        out = poisoned(24, 56, 56, dtype=dtype)
        fk.gemm(ap, bp, "kn", out=out)
        torch.cuda.synchronize()
        record("batched gemm [24,49,32]x[24,32,49] padded to 56", dtype, out[:, :49, :49], a.double() @ bm.double())

    def epilogues():
        M, K, N = 300, 768, 3072
        X = torch.randn(M, K, device=DEV, dtype=dtype)
        W = torch.randn(N, K, device=DEV, dtype=dtype) * 0.03
        bias = torch.randn(N, device=DEV, dtype=dtype)
        pre = X.double() @ W.double().t() + bias.double()
        out = poisoned(M, N, dtype=dtype)
        fk.gemm(X, W, "nk", bias=bias, epilogue="bias_gelu", out=out)
        torch.cuda.synchronize()
        record("gemm+bias+gelu(erf) 300x3072x768", dtype, out, gelu_erf(pre))
        out_t = poisoned(M, N, dtype=dtype)
        fk.gemm(X, W, "nk", bias=bias, epilogue="bias_gelu_tanh", out=out_t)
        torch.cuda.synchronize()
        # Which GELU does cuBLASLt's epilogue compute? Compare its output with both.
        d_erf = (out_t.double() - gelu_erf(pre)).abs().max().item()
        d_tanh = (out_t.double() - gelu_tanh(pre)).abs().max().item()
        record("gemm+bias+gelu cuBLASLt epilogue vs tanh-GELU ref", dtype, out_t, gelu_tanh(pre),
               f"max|diff| vs erf {d_erf:.2e}, vs tanh {d_tanh:.2e}")
        W2 = torch.randn(K, N, device=DEV, dtype=dtype) * 0.03  # [N=768, K=3072] weight
        X2 = torch.randn(M, N, device=DEV, dtype=dtype)
        b2 = torch.randn(K, device=DEV, dtype=dtype)
        res = torch.randn(M, K, device=DEV, dtype=dtype)
        out2 = poisoned(M, K, dtype=dtype)
        fk.gemm(X2, W2, "nk", bias=b2, residual=res, epilogue="bias_residual", out=out2)
        torch.cuda.synchronize()
        record("gemm+bias+residual 300x768x3072", dtype, out2, X2.double() @ W2.double().t() + b2.double() + res.double())

    for n, f in [("linear_n49", linear_n49), ("k4095", k4095), ("bmm49", bmm49), ("epilogues", epilogues)]:
        guarded("gemm " + n, f)


def run_checks(small, gemm=True, json_name=None):
    only_attention = os.environ.get("CHECK_ONLY") == "attention"
    dtypes = [getattr(torch, n) for n in os.environ.get("CHECK_DTYPES", "").split(",") if n] or \
        [torch.float16, torch.bfloat16]
    for dtype in dtypes:
        check_attention(dtype, small)
        if only_attention:
            continue
        check_window_ops(dtype, small)
        check_elementwise(dtype, small)
        check_mlp(dtype, small)
        if gemm:
            check_gemm(dtype, small)
    n_ok = sum(c["ok"] for c in CHECKS)
    print(f"CHECKS: {n_ok}/{len(CHECKS)} passed", flush=True)
    json_name = json_name or ("check.json" if not small else "check_small.json")
    json.dump(CHECKS, open(os.path.join(OUT, json_name), "w"), indent=1)
    return n_ok == len(CHECKS)


# ----------------------------------------------------------------------------- benchmarks
BENCH = []


def bench_ms(f):
    from triton.testing import do_bench
    return do_bench(f, warmup=50, rep=300, return_mode="median")


def bench_ms_best(f, reps=2):
    """The faster of `reps` do_bench medians: the attention rows time ours this way, since their
    SDPA column keeps the fastest of several backends each timed twice (sdpa_best)."""
    return min(bench_ms(f) for _ in range(reps))


def try_ms(f):
    try:
        f()
        torch.cuda.synchronize()
        return bench_ms(f)
    except Exception as ex:
        print("   (skipped:", repr(ex)[:200], ")", flush=True)
        return None


def compiled(f):
    c = torch.compile(f)
    return c


def row(kernel, shape, ours, eager=None, comp=None, sdpa=None, bytes_=None, flops=None, copy_gbps=None,
        note="", extra=None):
    r = dict(kernel=kernel, shape=shape, ours_us=ours * 1e3 if ours else None,
             eager_us=eager * 1e3 if eager else None, compiled_us=comp * 1e3 if comp else None,
             sdpa_us=sdpa * 1e3 if sdpa else None, note=note)
    if ours and bytes_:
        r["GBps"] = bytes_ / ours / 1e6
        if copy_gbps:
            r["pct_copy_bw"] = 100 * r["GBps"] / copy_gbps
    if ours and flops:
        r["TFLOPs"] = flops / ours / 1e9
    for k, v in (("x_vs_eager", eager), ("x_vs_compiled", comp), ("x_vs_sdpa", sdpa)):
        if ours and v:
            r[k] = v / ours
    if extra:
        r.update(extra)
    BENCH.append(r)
    json.dump(BENCH, open(os.path.join(OUT, "bench_partial.json"), "w"), indent=1)
    fmt = lambda v: "-" if v is None else f"{v:.1f}"
    print(f"{kernel:34s} {shape:34s} ours {fmt(r['ours_us'])} eager {fmt(r['eager_us'])} "
          f"compiled {fmt(r['compiled_us'])} sdpa {fmt(r['sdpa_us'])} "
          + " ".join(f"{k}={v:.2f}" for k, v in r.items() if k.startswith(("x_", "pct", "GB", "TF"))), flush=True)


def launched_kernels(f):
    """The CUDA kernels one call of f launches, as the PyTorch profiler records them ("?" if it
    cannot say): which of our kernels the launcher chose."""
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            f()
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
        return "+".join(names) or "?"
    except Exception:  # the note is informational; the timing above stands without it
        return "?"


def sdpa_best(q, k, v, mask, reps=2):
    """The fastest SDPA backend on this call: (ms, name, every backend's time as text). Each
    backend is timed `reps` times and keeps its fastest median, with the backend chosen once
    outside the timed calls: do_bench times each call between CUDA events, so host work in the
    call (the `sdpa_kernel` context) shows as time when it outlasts the GPU's queue. Timed
    inside, cuDNN and flash came out up to 3x slow in some runs, which would flatter our ratio."""
    from torch.nn.attention import sdpa_kernel, SDPBackend
    best, name, times = None, None, []

    def f():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
               SDPBackend.MATH):
        with sdpa_kernel([be]):
            ts = [t for t in (try_ms(f) for _ in range(reps if be != SDPBackend.MATH else 1)) if t is not None]
        t = min(ts) if ts else None
        be_name = str(be).split(".")[-1]
        times.append(f"{be_name}={t * 1e3:.1f}" if t is not None else f"{be_name}=n/a")
        if t is not None and (best is None or t < best):
            best, name = t, be_name
    return best, name, " ".join(times)


def sdpa_chain_fn(qkv, B, N, H, d, mask):
    """SDPA's default call on the q / k / v views of `qkv` ([B*N, 3*H*d]) with its output put
    back in our [B*N, H*d] layout (a view for flash and cuDNN): the call ours replaces."""
    def sdpa_chain():
        x = qkv.view(B, N, 3, H, d).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(x[0], x[1], x[2], attn_mask=mask).transpose(1, 2).reshape(B * N, H * d)
    return sdpa_chain


def same_size_copy_us(traffic_bytes):
    """A device-to-device copy moving the same bytes (half read, half written): what a copy
    reaches at this size, where launch and tail costs weigh more than in the 1 GiB ceiling."""
    src = torch.empty(traffic_bytes // 2, dtype=torch.uint8, device=DEV)
    dst = torch.empty_like(src)
    return bench_ms(lambda: dst.copy_(src)) * 1e3


def attn_rounds():
    """ViT and BERT-128 attention, ours and SDPA's default call (output back in our layout, as
    the benchmark's verdict takes it) timed alternately, $ATTN_ROUNDS (default 5) times each, in
    one process: a comparison with the baseline measured beside it rather than in another run.
    One JSON line (ATTN), medians in us."""
    rounds = int(os.environ.get("ATTN_ROUNDS", "5"))
    h = torch.float16
    res = dict(defines=os.environ.get("FUSEPROF_KERNELS_DEFINES", ""))
    for name, B, N, use_kpm in (("vit", 64, 197, False), ("bert_kpm", 64, 128, True), ("bert", 64, 128, False)):
        H, d, C = 12, 64, 768
        qkv = torch.randn(B * N, 3 * C, device=DEV, dtype=h)
        kpm = key_padding_mask(B, N, h, min_len=N // 2) if use_kpm else None
        m4 = kpm.view(B, 1, 1, N) if use_kpm else None

        def ours():
            return fk.attention(qkv, H, N, key_padding_mask=kpm)
        sdpa_chain = sdpa_chain_fn(qkv, B, N, H, d, m4)
        ours()
        sdpa_chain()
        torch.cuda.synchronize()
        to, ts = [], []
        for _ in range(rounds):
            to.append(bench_ms(ours) * 1e3)
            ts.append(bench_ms(sdpa_chain) * 1e3)
        mo, ms = sorted(to)[rounds // 2], sorted(ts)[rounds // 2]
        res[name] = dict(ours=round(mo, 2), sdpa=round(ms, 2), x=round(ms / mo, 3),
                         ours_all=[round(t, 2) for t in to], sdpa_all=[round(t, 2) for t in ts])
    print("ATTN " + json.dumps(res), flush=True)


def bench_all():
    h = torch.float16
    big = torch.empty(2 ** 30, dtype=torch.uint8, device=DEV)
    big2 = torch.empty_like(big)
    copy_ms = bench_ms(lambda: big2.copy_(big))
    copy_gbps = 2 * 2 ** 30 / copy_ms / 1e6
    del big, big2
    A = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    B_ = torch.randn_like(A)
    mm = bench_ms(lambda: A @ B_)
    del A, B_
    ceil = dict(copy_GBps=copy_gbps, gemm8192_bf16_TFLOPs=2 * 8192 ** 3 / mm / 1e9)
    print("ceilings", ceil, flush=True)

    # 1. window attention, Swin-T batch 64, stages 1-3 (timm's chain from the QKV output)
    for label, nw, H, C in (("s1", 4096, 3, 96), ("s2", 1024, 6, 192), ("s3", 256, 12, 384)):
        N, d = 49, 32
        qkv = torch.randn(nw * N, 3 * C, device=DEV, dtype=h)
        bias = (torch.randn(H, N, N, device=DEV) * 0.5).to(h)
        mask = torch.zeros(64, N, N, device=DEV).masked_fill(torch.rand(64, N, N, device=DEV) > 0.7, -100.).to(h)

        def eager_timm():
            x = qkv.view(nw, N, 3, H, d).permute(2, 0, 3, 1, 4)
            q, k, v = x.unbind(0)
            a = (q * d ** -0.5) @ k.transpose(-2, -1)
            a = a + bias.unsqueeze(0)
            a = a.view(nw // 64, 64, H, N, N) + mask.unsqueeze(1).unsqueeze(0)
            a = a.view(-1, H, N, N).softmax(-1)
            return (a @ v).transpose(1, 2).reshape(nw * N, C)
        add = fk.attention_add(H, N, bias=bias, window_mask=mask)
        ours = bench_ms_best(lambda: fk.attention(qkv, H, N, add=add))  # precombined once (setup)
        t_combine = bench_ms(lambda: fk.attention_add(H, N, bias=bias, window_mask=mask, out=add))
        t_incl = bench_ms(lambda: fk.attention(qkv, H, N, add=fk.attention_add(H, N, bias=bias, window_mask=mask,
                                                                               out=add)))
        t_sep = bench_ms(lambda: fk.attention(qkv, H, N, bias=bias, window_mask=mask))
        e = bench_ms(eager_timm)
        c = try_ms(compiled(eager_timm))
        x = qkv.view(nw, N, 3, H, d).permute(2, 0, 3, 1, 4)
        full = (bias.unsqueeze(0) + mask.view(1, 64, 1, N, N)).expand(nw // 64, 64, H, N, N).reshape(nw, H, N, N)
        full = full.contiguous()
        s, sname, _ = sdpa_best(x[0], x[1], x[2], full)
        io = 4 * nw * N * C * 2
        row(f"window fMHA {label}", f"{nw}x{H}x49x32 bias+mask", ours, e, c, s, io, 4 * nw * H * N * N * d, copy_gbps,
            note=f"ours = persistent kernel on the precombined bias+mask (combined once, excluded); "
                 f"sdpa best={sname} (full float mask, q/k/v views)",
            extra=dict(combine_once_us=t_combine * 1e3, ours_incl_combine_us=t_incl * 1e3,
                       x_eager_incl_combine=e / t_incl, separate_bias_mask_kernel_us=t_sep * 1e3))
        if label == "s1":
            # the anchors.py definition (separate q, k, v; no permutes) for comparison with ANCHORS.md
            q = torch.randn(nw, H, N, d, device=DEV, dtype=h)
            k = torch.randn_like(q)
            v = torch.randn_like(q)
            mask4 = mask.view(64, 1, N, N)

            def eager_anchor():
                a = (q * d ** -0.5) @ k.transpose(-2, -1)
                a = a + bias.unsqueeze(0)
                a = a.view(nw // 64, 64, H, N, N) + mask4.unsqueeze(0)
                a = a.view(-1, H, N, N)
                return a.softmax(-1) @ v
            row("window attn s1 (anchors.py def)", "4096x3x49x32", ours, bench_ms(eager_anchor),
                try_ms(compiled(eager_anchor)), None, io, None, copy_gbps, note="ours on the same shape")

    # 2. ViT-B/16 batch 64 and BERT-base batch 64 seq 128
    for label, B, N, use_kpm in (("ViT-B/16 b64", 64, 197, False), ("BERT-base b64 s128 kpm", 64, 128, True),
                                 ("BERT-base b64 s128 nomask", 64, 128, False)):
        H, d, C = 12, 64, 768
        qkv = torch.randn(B * N, 3 * C, device=DEV, dtype=h)
        kpm = None
        m4 = None
        if use_kpm:
            kpm = key_padding_mask(B, N, h, min_len=N // 2)
            m4 = kpm.view(B, 1, 1, N)
        ours = bench_ms_best(lambda: fk.attention(qkv, H, N, key_padding_mask=kpm))

        def eager_chain():
            x = qkv.view(B, N, 3, H, d).permute(2, 0, 3, 1, 4)
            q, k, v = x.unbind(0)
            a = (q * d ** -0.5) @ k.transpose(-2, -1)
            if m4 is not None:
                a = a + m4
            return (a.softmax(-1) @ v).transpose(1, 2).reshape(B * N, C)
        x = qkv.view(B, N, 3, H, d).permute(2, 0, 3, 1, 4)
        s, sname, stimes = sdpa_best(x[0], x[1], x[2], m4)  # before torch.compile's workers start
        e = bench_ms(eager_chain)
        c = try_ms(compiled(eager_chain))

        sc = try_ms(sdpa_chain_fn(qkv, B, N, H, d, m4))
        if sc is not None and (s is None or sc < s):  # the default backend, output back in our layout
            s, sname = sc, "default backend + output transpose"
        io = 4 * B * N * C * 2
        ran = launched_kernels(lambda: fk.attention(qkv, H, N, key_padding_mask=kpm))
        row("fMHA " + label, f"{B}x{H}x{N}x{d}", ours, e, c, s, io, 4 * B * H * N * N * d, copy_gbps,
            note=f"ours={ran}; "
                 f"sdpa best={sname} (q/k/v views; each backend forced, us: {stimes}); sdpa default + output "
                 f"transpose {sc * 1e3 if sc else float('nan'):.1f} us",
            extra=dict(sdpa_chain_us=sc * 1e3 if sc else None))

    if os.environ.get("BENCH_ONLY") == "attention":  # a quick iteration on the attention kernels
        return ceil
    # 3. LayerNorm + roll + partition and reverse + roll + residual (anchors.py definitions)
    for label, Hs, C in (("s1", 56, 96), ("s2", 28, 192), ("s3", 14, 384)):
        B = 64
        x = torch.randn(B, Hs, Hs, C, device=DEV, dtype=h)
        w = torch.randn(C, device=DEV, dtype=h)
        b = torch.randn(C, device=DEV, dtype=h)

        def lnpart():
            y = F.layer_norm(x, (C,), w, b)
            y = torch.roll(y, (-3, -3), (1, 2))
            return y.view(B, Hs // 7, 7, Hs // 7, 7, C).permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, 49, C)
        by = 2 * x.numel() * 2
        row(f"LN+shift+partition {label}", f"{B}x{Hs}x{Hs}x{C}", bench_ms(lambda: fk.ln_shift_partition(x, w, b, 7, 3)),
            bench_ms(lnpart), try_ms(compiled(lnpart)), None, by, None, copy_gbps,
            extra=dict(same_size_copy_us=same_size_copy_us(by)))
        xw = torch.randn(B * (Hs // 7) ** 2, 49, C, device=DEV, dtype=h)
        sc = torch.randn(B, Hs, Hs, C, device=DEV, dtype=h)

        def rev():
            y = xw.view(B, Hs // 7, Hs // 7, 7, 7, C).permute(0, 1, 3, 2, 4, 5).contiguous().view(B, Hs, Hs, C)
            y = torch.roll(y, (3, 3), (1, 2))
            return sc + y
        by3 = 3 * x.numel() * 2
        row(f"reverse+shift+residual {label}", f"{B}x{Hs}x{Hs}x{C}",
            bench_ms(lambda: fk.window_reverse_residual(xw, sc, 7, 3)), bench_ms(rev), try_ms(compiled(rev)), None,
            by3, None, copy_gbps, extra=dict(same_size_copy_us=same_size_copy_us(by3)))

        def rev_ln():
            y = rev()
            return y, F.layer_norm(y, (C,), w, b)
        row(f"reverse+shift+residual+LN {label}", f"{B}x{Hs}x{Hs}x{C}",
            bench_ms(lambda: fk.window_reverse_residual(xw, sc, 7, 3, gamma=w, beta=b, with_ln=True)),
            bench_ms(rev_ln), try_ms(compiled(rev_ln)), None, 4 * x.numel() * 2, None, copy_gbps,
            note="two outputs")

    # 4. padded GEMMs vs the unpadded cuBLAS call (torch), and aligned shapes
    a = torch.randn(12288, 49, 32, device=DEV, dtype=h)
    bm = torch.randn(12288, 32, 49, device=DEV, dtype=h)
    ap = fk.pad(a, rows_to=56, cols_to=32)
    bp = fk.pad(bm, rows_to=32, cols_to=56)
    fl = 2 * 12288 * 49 * 49 * 32
    t_unpadded = bench_ms(lambda: a @ bm)
    row("padded bmm n=49->56", "[12288,49,32]x[32,49]", bench_ms(lambda: fk.gemm(ap, bp, "kn")), t_unpadded,
        None, None, None, fl, note="eager = torch bmm unpadded", extra=dict(torch_padded_us=bench_ms(lambda: ap @ bp) * 1e3))
    X = torch.randn(200704, 96, device=DEV, dtype=h)
    W = torch.randn(49, 96, device=DEV, dtype=h)
    Wp = fk.pad(W, rows_to=56, cols_to=96)
    row("padded linear n=49->56", "[200704,96]x[96,49]", bench_ms(lambda: fk.gemm(X, Wp, "nk")),
        bench_ms(lambda: X @ W.t()), None, None, None, 2 * 200704 * 49 * 96, note="eager = torch unpadded")
    X2 = torch.randn(4096, 4095, device=DEV, dtype=h)
    W2 = torch.randn(4095, 4096, device=DEV, dtype=h)
    X2p = fk.pad(X2, cols_to=4096)
    W2p = fk.pad(W2, rows_to=4096, cols_to=4096)
    fl = 2 * 4096 ** 3
    t_pad_copy = bench_ms(lambda: fk.pad(X2, cols_to=4096, out=X2p))
    row("padded GEMM K=4095->4096", "4096x4096x4095", bench_ms(lambda: fk.gemm(X2p, W2p, "kn")), bench_ms(lambda: X2 @ W2),
        None, None, None, fl, note="eager = torch unpadded; activation pad copy measured separately",
        extra=dict(activation_pad_copy_us=t_pad_copy * 1e3))
    X3 = torch.randn(4096, 4096, device=DEV, dtype=h)
    W3 = torch.randn(4096, 4096, device=DEV, dtype=h)
    row("aligned GEMM 4096^3", "4096x4096x4096", bench_ms(lambda: fk.gemm(X3, W3, "kn")), bench_ms(lambda: X3 @ W3),
        None, None, None, fl, note="eager = torch")
    Xb = torch.randn(8192, 768, device=DEV, dtype=h)
    Wb = torch.randn(3072, 768, device=DEV, dtype=h) * 0.03
    bb = torch.randn(3072, device=DEV, dtype=h)
    row("aligned linear BERT FFN1", "8192x3072x768", bench_ms(lambda: fk.gemm(Xb, Wb, "nk")),
        bench_ms(lambda: F.linear(Xb, Wb)), None, None, None, 2 * 8192 * 3072 * 768, note="eager = torch")

    # 5. GEMM + bias + GELU (exact) and GEMM + bias + residual
    for label, M, N, K in (("BERT FFN1", 8192, 3072, 768), ("Swin-T s1 fc1", 200704, 384, 96)):
        Xe = torch.randn(M, K, device=DEV, dtype=h)
        We = torch.randn(N, K, device=DEV, dtype=h) * 0.03
        be = torch.randn(N, device=DEV, dtype=h)
        f_e = lambda: F.gelu(F.linear(Xe, We, be))
        row(f"GEMM+bias+GELU(erf) {label}", f"{M}x{N}x{K}", bench_ms(lambda: fk.gemm(Xe, We, "nk", bias=be,
                                                                                     epilogue="bias_gelu")),
            bench_ms(f_e), try_ms(compiled(f_e)), None, None, 2 * M * N * K,
            note="ours = cuBLASLt bias epilogue + in-place erf-GELU pass",
            extra=dict(cublaslt_gelu_tanh_epilogue_us=bench_ms(
                lambda: fk.gemm(Xe, We, "nk", bias=be, epilogue="bias_gelu_tanh")) * 1e3))
    for label, M, N, K in (("BERT FFN2", 8192, 768, 3072), ("Swin-T s1 fc2", 200704, 96, 384)):
        Xr = torch.randn(M, K, device=DEV, dtype=h)
        Wr = torch.randn(N, K, device=DEV, dtype=h) * 0.03
        br = torch.randn(N, device=DEV, dtype=h)
        rr = torch.randn(M, N, device=DEV, dtype=h)
        f_r = lambda: F.linear(Xr, Wr, br) + rr
        row(f"GEMM+bias+residual {label}", f"{M}x{N}x{K}",
            bench_ms(lambda: fk.gemm(Xr, Wr, "nk", bias=br, residual=rr, epilogue="bias_residual")),
            bench_ms(f_r), try_ms(compiled(f_r)), None, None, 2 * M * N * K, note="cuBLASLt bias epilogue, beta=1")

    bench_mlp(h)

    # 6. bias + residual
    x = torch.randn(64 * 3136, 96, device=DEV, dtype=h)
    r = torch.randn_like(x)
    bb = torch.randn(96, device=DEV, dtype=h)
    f = lambda: x + bb + r
    row("bias+residual", "[200704,96]", bench_ms(lambda: fk.bias_residual(x, bb, r)), bench_ms(f), try_ms(compiled(f)),
        None, 3 * x.numel() * 2, None, copy_gbps, extra=dict(same_size_copy_us=same_size_copy_us(3 * x.numel() * 2)))
    x = torch.randn(8192, 768, device=DEV, dtype=h)
    r = torch.randn_like(x)
    bb = torch.randn(768, device=DEV, dtype=h)
    row("bias+residual", "[8192,768]", bench_ms(lambda: fk.bias_residual(x, bb, r)), bench_ms(lambda: x + bb + r),
        None, None, 3 * x.numel() * 2, None, copy_gbps)
    return ceil


def bench_mlp(h):
    """The second half of a Swin-T block (norm2, MLP, residual) at its first two stages (batch 64):
    the fused kernel against the unfused chain on our own kernels (LayerNorm by PyTorch, cuBLASLt
    bias epilogue, erf-GELU pass, bias + residual epilogue), PyTorch eager and torch.compile."""
    for label, M, C in (("Swin-T s1", 200704, 96), ("Swin-T s2", 50176, 192)):
        hid = 4 * C
        x, gamma, beta, w1, b1, w2, b2 = mlp_inputs(M, C, hid, h)
        f_e = lambda: x + F.linear(F.gelu(F.linear(F.layer_norm(x, (C,), gamma, beta), w1, b1)), w2, b2)

        def unfused():
            xn = F.layer_norm(x, (C,), gamma, beta)
            hdn = fk.gemm(xn, w1, "nk", bias=b1, epilogue="bias_gelu")
            return fk.gemm(hdn, w2, "nk", bias=b2, residual=x, epilogue="bias_residual")
        row(f"LN+MLP+residual {label}", f"{M}x{C} hidden {hid}",
            bench_ms(lambda: fk.ln_mlp_residual(x, gamma, beta, w1, b1, w2, b2)), bench_ms(f_e), try_ms(compiled(f_e)),
            None, 2 * M * C * 2, 4 * M * C * hid, note="eager = layer_norm, fc1, GELU, fc2, add",
            extra=dict(ours_unfused_us=bench_ms(unfused) * 1e3))


def device_info():
    info = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                torch=torch.__version__, device=torch.cuda.get_device_name(0))
    try:
        info["driver"] = subprocess.check_output(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], text=True).strip()
    except Exception:
        info["driver"] = "unknown"
    return info


def write_md(info, ceil):
    lines = [f"Device: {info['device']}, driver {info['driver']}, torch {info['torch']}, {info['date']}. "
             f"Measured ceilings in the same run: copy {ceil['copy_GBps']:.0f} GB/s, bf16 GEMM "
             f"{ceil['gemm8192_bf16_TFLOPs']:.0f} TFLOP/s. fp16, median of triton do_bench (attention rows: ours and each SDPA backend the faster of two medians).", "",
             "| kernel | shape | ours (us) | eager (us) | compiled (us) | SDPA best (us) | x eager | x compiled "
             "| x SDPA | GB/s (% copy) | TFLOP/s | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"
    for r in BENCH:
        bw = "-" if "GBps" not in r else f"{r['GBps']:.0f} ({r.get('pct_copy_bw', 0):.0f}%)"
        extra = {k: v for k, v in r.items() if k.endswith("_us") and k not in
                 ("ours_us", "eager_us", "compiled_us", "sdpa_us") and v is not None}
        note = r["note"] + ("; " if r["note"] and extra else "") + ", ".join(f"{k}={v:.1f}" for k, v in extra.items())
        lines.append(f"| {r['kernel']} | {r['shape']} | {f(r['ours_us'])} | {f(r['eager_us'])} | "
                     f"{f(r['compiled_us'])} | {f(r['sdpa_us'])} | {f(r.get('x_vs_eager'), 2)} | "
                     f"{f(r.get('x_vs_compiled'), 2)} | {f(r.get('x_vs_sdpa'), 2)} | {bw} | {f(r.get('TFLOPs'))} | "
                     f"{note} |")
    open(os.path.join(OUT, "bench.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


# ----------------------------------------------------------------------------- attention backward
# Swin-T's window attention, batch 64 (windows x images, heads, tokens, head dim, term entries).
BWD_SHAPES = [("swin-t stage 1", 4096, 3, 49, 32, 64), ("swin-t stage 2", 1024, 6, 49, 32, 16),
              ("swin-t stage 3", 256, 12, 49, 32, 4), ("swin-t stage 4", 64, 24, 49, 32, 1),
              ("head dim 64, 40 tokens", 96, 4, 40, 64, 8)]
# Small shapes of the same kernels, for compute-sanitizer: a few windows of each head dim, a
# partial tile (40 and 49 tokens), one shared term and several.
BWD_SMALL_SHAPES = [("4 windows, 49 tokens, d 32", 4, 2, 49, 32, 2), ("2 windows, 40 tokens, d 64", 2, 2, 40, 64, 1)]


def window_case(B, H, N, D, M, dtype):
    qkv = (torch.randn(B * N, 3 * H * D, device=DEV) * 0.5).to(dtype)
    term = torch.randn(M, H, N, N, device=DEV) * 2.0
    term[1::2, :, :, N // 2:] -= 100.0  # a shifted-window mask on odd entries
    add = F.pad(term, (0, -(-N // 8) * 8 - N), value=float("-inf")).to(dtype).contiguous()
    dout = torch.randn(B * N, H * D, device=DEV).to(dtype)
    return qkv, add, dout


def bwd_reference(qkv, add, dout, H, N, scale):
    """(dqkv, dadd [M, H, N, N]) by float64 autograd through softmax(scale q k^T + add) v."""
    B = qkv.shape[0] // N
    D = qkv.shape[1] // (3 * H)
    M = add.shape[0]
    x = qkv.double().requires_grad_()
    a = add[..., :N].double().requires_grad_()
    q, k, v = x.view(B, N, 3, H, D).permute(2, 0, 3, 1, 4)
    s = (q @ k.transpose(-1, -2)) * scale + a.repeat(B // M, 1, 1, 1)
    out = (s.softmax(-1) @ v).transpose(1, 2).reshape(B * N, H * D)
    out.backward(dout.double())
    return x.grad, a.grad


def check_bwd(dtype, shapes=BWD_SHAPES):
    for name, B, H, N, D, M in shapes:
        def run():
            qkv, add, dout = window_case(B, H, N, D, M, dtype)
            scale = D ** -0.5
            dqkv, dadd = fk.attention_backward(qkv, dout, H, N, add=add, scale=scale)
            want_x, want_a = bwd_reference(qkv, add, dout, H, N, scale)
            for part, i in (("dq", 0), ("dk", 1), ("dv", 2)):
                got = dqkv.view(B * N, 3, H * D)[:, i]
                record(f"attention backward {part}: {name}", dtype, got, want_x.view(B * N, 3, H * D)[:, i])
            record(f"attention backward dadd: {name}", dtype, dadd, want_a)
        guarded(f"attention backward: {name}", run)


# Swin-T's window ops, batch 64 (B, H, W, C, window, shift), and a padded, wrapped small case.
WIN_BWD_SHAPES = [("swin-t stage 1", 64, 56, 56, 96, 7, 3), ("swin-t stage 2", 64, 28, 28, 192, 7, 3),
                  ("swin-t stage 3", 64, 14, 14, 384, 7, 3), ("swin-t stage 4", 64, 7, 7, 768, 7, 0),
                  ("9 x 10, window 4, shift 2", 2, 9, 10, 48, 4, 2)]


def check_window_bwd(dtype, shapes=None):
    """LayerNorm + shift + partition and window reverse + residual + LayerNorm backward against
    float64 autograd through the patch layer's reference forwards."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fusion-advisor",
                                    "python", "patch"))
    import fuseprof_patch_ops as ops
    eps = 1e-5
    for name, B, H, W, C, ws, sh in shapes or WIN_BWD_SHAPES:
        def run():
            x = torch.randn(B, H, W, C, device=DEV).to(dtype)
            gamma = (1 + 0.1 * torch.randn(C, device=DEV)).to(dtype)
            beta = (0.1 * torch.randn(C, device=DEV)).to(dtype)
            nw = B * -(-H // ws) * -(-W // ws)
            dy = torch.randn(nw, ws * ws, C, device=DEV).to(dtype)
            dx, dg, db = fk.ln_shift_partition_backward(dy, x, gamma, ws, sh, eps)
            xd, gd, bd = (t.double().requires_grad_() for t in (x, gamma, beta))
            ops.ref_ln_shift_partition(xd, gd, bd, ws, sh, eps).backward(dy.double())
            record(f"ln_shift_partition backward dx: {name}", dtype, dx, xd.grad)
            record(f"ln_shift_partition backward dgamma: {name}", dtype, dg, gd.grad)
            record(f"ln_shift_partition backward dbeta: {name}", dtype, db, bd.grad)
            win = torch.randn(nw, ws * ws, C, device=DEV).to(dtype)
            sc = torch.randn(B, H, W, C, device=DEV).to(dtype)
            y, _ = fk.window_reverse_residual(win, sc, ws, sh, gamma=gamma, beta=beta, eps=eps, with_ln=True)
            g_out = torch.randn(B, H, W, C, device=DEV).to(dtype)
            g_ln = torch.randn(B, H, W, C, device=DEV).to(dtype)
            d_win, d_sc, dg2, db2 = fk.window_reverse_residual_backward(g_out, g_ln, y, gamma, ws, sh, eps)
            wd, sd, gd2, bd2 = (t.double().requires_grad_() for t in (win, sc, gamma, beta))
            out, ln = ops.ref_window_reverse_residual(wd, sd, ws, sh, gd2, bd2, eps)
            torch.autograd.backward([out, ln], [g_out.double(), g_ln.double()])
            record(f"window_reverse_residual backward d_windows: {name}", dtype, d_win, wd.grad)
            record(f"window_reverse_residual backward d_shortcut: {name}", dtype, d_sc, sd.grad)
            record(f"window_reverse_residual backward dgamma: {name}", dtype, dg2, gd2.grad)
            record(f"window_reverse_residual backward dbeta: {name}", dtype, db2, bd2.grad)
        guarded(f"window backward: {name}", run)


def bench_window_bwd(dtype):
    """Ours against the patch layer's backward in PyTorch's ops (roll, copies, native LayerNorm
    backward), same inputs."""
    from triton.testing import do_bench
    import fuseprof_patch_ops as ops
    eps = 1e-5
    for name, B, H, W, C, ws, sh in WIN_BWD_SHAPES[:4]:
        x = torch.randn(B, H, W, C, device=DEV).to(dtype)
        gamma, beta = torch.ones(C, device=DEV, dtype=dtype), torch.zeros(C, device=DEV, dtype=dtype)
        nw = B * -(-H // ws) * -(-W // ws)
        dy = torch.randn(nw, ws * ws, C, device=DEV).to(dtype)

        def torch_ops():
            gy = ops._unpartition(dy, ws, sh, B, H, W)
            return ops._ln_backward(gy.contiguous(), x, gamma, beta, eps)

        ours = do_bench(lambda: fk.ln_shift_partition_backward(dy, x, gamma, ws, sh, eps), warmup=25, rep=200)
        theirs = do_bench(torch_ops, warmup=25, rep=200)
        BENCH.append(dict(kernel="ln_shift_partition backward", shape=name, dtype=str(dtype), ours_us=ours * 1e3,
                          torch_us=theirs * 1e3, x_vs_torch=theirs / ours))
        print(f"ln_shift_partition backward {name:18s} ours {ours * 1e3:8.1f} us  torch ops {theirs * 1e3:8.1f} us  "
              f"{theirs / ours:5.2f}x", flush=True)


def bench_bwd(dtype):
    """Ours against PyTorch's memory-efficient attention recomputing the forward and running its
    backward (the patch layer's other path), same inputs, interleaved."""
    from triton.testing import do_bench
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fusion-advisor",
                                    "python", "patch"))
    import fuseprof_patch_ops as ops
    for name, B, H, N, D, M in BWD_SHAPES:
        qkv, add, dout = window_case(B, H, N, D, M, dtype)
        scale = D ** -0.5
        ours = do_bench(lambda: fk.attention_backward(qkv, dout, H, N, add=add, scale=scale), warmup=25, rep=200)
        theirs = do_bench(lambda: ops._attention_backward_cuda(qkv, add[..., :N], H, N, scale, dout, True),
                          warmup=25, rep=200)
        BENCH.append(dict(kernel="attention backward", shape=name, dtype=str(dtype), ours_us=ours * 1e3,
                          efficient_us=theirs * 1e3, x_vs_efficient=theirs / ours))
        print(f"attention backward {name:24s} ours {ours * 1e3:8.1f} us  efficient attention "
              f"{theirs * 1e3:8.1f} us  {theirs / ours:5.2f}x", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["check", "small", "race", "bench", "attn", "mlp", "bwd", "bwd-small"],
                    default="check",
                    help="race = small shapes without the cuBLASLt GEMMs (racecheck cannot run cuBLASLt's "
                         "Hopper kernels: 'failed to handle a hardware exception')")
    ap.add_argument("--json", help="file name in $OUT for the checks' results (default check.json, "
                                   "check_small.json for small shapes)")
    args = ap.parse_args()
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))  # fresh inputs every run
    fk.init()
    if args.mode == "attn":  # compiles only what it runs
        attn_rounds()
        return
    if args.mode == "bwd":
        for dtype in (torch.float16, torch.bfloat16):
            check_bwd(dtype)
            check_window_bwd(dtype)
        print(f"CHECKS: {sum(c['ok'] for c in CHECKS)}/{len(CHECKS)} passed", flush=True)
        bench_bwd(torch.bfloat16)
        bench_window_bwd(torch.bfloat16)
        json.dump(dict(checks=CHECKS, rows=BENCH), open(os.path.join(OUT, "bwd.json"), "w"), indent=1)
        sys.exit(0 if all(c["ok"] for c in CHECKS) else 1)
    if args.mode == "bwd-small":
        for dtype in (torch.float16, torch.bfloat16):
            check_bwd(dtype, BWD_SMALL_SHAPES)
            check_window_bwd(dtype, WIN_BWD_SHAPES[-1:])
        print(f"CHECKS: {sum(c['ok'] for c in CHECKS)}/{len(CHECKS)} passed", flush=True)
        sys.exit(0 if all(c["ok"] for c in CHECKS) else 1)
    if args.mode == "mlp":
        for dtype in (torch.float16, torch.bfloat16):
            check_mlp(dtype, False)
        print(f"CHECKS: {sum(c['ok'] for c in CHECKS)}/{len(CHECKS)} passed", flush=True)
        bench_mlp(torch.float16)
        json.dump(dict(checks=CHECKS, rows=BENCH), open(os.path.join(OUT, "mlp.json"), "w"), indent=1)
        sys.exit(0 if all(c["ok"] for c in CHECKS) else 1)
    try:
        fk.precompile_all()
        print("precompile: all kernel variants compiled", flush=True)
    except fk.FuseprofKernelError as ex:
        print("PRECOMPILE FAILED:\n", ex, flush=True)
    if args.mode in ("check", "small", "race"):
        ok = run_checks(args.mode != "check", gemm=args.mode != "race", json_name=args.json)
        sys.exit(0 if ok else 1)
    info = device_info()
    ceil = bench_all()
    json.dump(dict(info=info, ceilings=ceil, rows=BENCH), open(os.path.join(OUT, "bench.json"), "w"), indent=1)
    write_md(info, ceil)


if __name__ == "__main__":
    main()
