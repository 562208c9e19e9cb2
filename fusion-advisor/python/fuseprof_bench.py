"""fuseprof bench's driver: each proposal's chain rebuilt as eager PyTorch on its recorded shapes
and dtype, timed against the bundled kernel (and against the chain under torch.compile),
interleaved, with a numerics gate.

    python3 fuseprof_bench.py job.json results.json

job.json: {"rounds": 3, "compile": true, "progress": false,
           "proposals": [{"id", "pattern", "dtype", "params": {...}}]}
Each pattern's builder returns the eager chain, the replacement and a float32 reference of the
same function (the eager chain on upcast inputs). Inputs are fresh random values, never zeros;
the replacement's outputs are poisoned with NaN before the checked call, so an unwritten element
fails the gate. Times are GPU time per call from CUDA-graph replays (graph_us), as a trace counts
it; a chain that cannot be captured is timed with triton.testing.do_bench and says so.

Exit codes: 2 no torch, 3 no CUDA GPU, 4 the kernels library does not load; the last stderr
line says which, for `fuseprof bench` to print.
"""
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def fail(code, msg):
    print(f"fuseprof bench: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001 - any import failure means the same to the user
    fail(2, f"this python3 cannot import torch ({e}); bench needs PyTorch with CUDA (--python)")
if not torch.cuda.is_available():
    fail(3, "no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False); bench runs "
            "on a GPU machine")
import fuseprof_kernels as fk  # noqa: E402

try:
    fk.init()
except Exception as e:  # noqa: BLE001
    fail(4, f"the bundled kernels do not load: {e}")

DT = {"fp16": torch.float16, "bf16": torch.bfloat16}
# ||out - ref|| / ||ref|| that a 16-bit replacement must stay under (the kernels' own checks use
# the same bound); the eager chain's own error is reported next to it.
TOL = {"fp16": 1e-2, "bf16": 1e-2}


def rand(*shape, dtype, scale=1.0):
    return (torch.randn(*shape, device="cuda", dtype=torch.float32) * scale).to(dtype)


def poison(t):
    return t.fill_(float("nan"))


def up(x):
    return x.float() if torch.is_tensor(x) and x.is_floating_point() else x


# Each builder: (eager(*inputs), ours(*inputs, poisoned_out=None) -> outputs, inputs, setup note)
# Outputs are a tensor or a tuple of tensors.

def window_attention(p, dt):
    bw, h, n, d, nw = p["batch"], p["heads"], p["seq"], p["head_dim"], p["windows"]
    c = h * d
    scale = d ** -0.5
    ws = int(round(math.sqrt(n)))
    table_rows = (2 * ws - 1) ** 2 if ws * ws == n else n * n
    qkv = rand(bw * n, 3 * c, dtype=dt)
    table = rand(table_rows, h, dtype=dt, scale=0.5)
    index = torch.randint(0, table_rows, (n * n,), device="cuda")
    mask = None
    if nw:
        mask = torch.zeros(nw, n, n, device="cuda")
        mask[:, :, n // 2:] = torch.where(torch.rand(nw, n, n - n // 2, device="cuda") < 0.5, -100.0, 0.0)
        mask = mask.to(dt)

    def eager(qkv, table, mask):
        x = qkv.view(bw, n, 3, h, d).permute(2, 0, 3, 1, 4)
        q, k, v = x.unbind(0)
        q = q * scale
        attn = q @ k.transpose(-2, -1)
        bias = table[index].view(n, n, h).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            attn = attn.view(-1, nw, h, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, h, n, n)
        attn = attn.softmax(-1)
        out = attn @ v
        return out.transpose(1, 2).reshape(bw * n, c)

    # The bias gather and the mask are constants of the layer: combined once, like padded weights.
    bias_const = table[index].view(n, n, h).permute(2, 0, 1).contiguous()
    add = fk.attention_add(h, n, bias=bias_const, window_mask=mask)

    def ours(qkv, table, mask, out=None):
        return fk.attention(qkv, heads=h, seq=n, add=add, out=out)

    return eager, ours, (qkv, table, mask)


def _full(p, dt, sdpa):
    b, h, n, d, km = p["batch"], p["heads"], p["seq"], p["head_dim"], p["key_mask"]
    c = h * d
    qkv = rand(b * n, 3 * c, dtype=dt)
    mask = None
    if km:
        mask = torch.zeros(b, n, device="cuda")
        lengths = torch.randint(n // 2, n + 1, (b,), device="cuda")
        mask[torch.arange(n, device="cuda")[None, :] >= lengths[:, None]] = -10000.0
        mask = mask.to(dt)

    def eager(qkv, mask):
        q, k, v = qkv.view(b, n, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)
        m4 = None if mask is None else mask.view(b, 1, 1, n)
        if sdpa:
            # The recorded chain is the SDPA call alone, on the projection's views.
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m4)
        attn = (q * d ** -0.5) @ k.transpose(-2, -1)
        if m4 is not None:
            attn = attn + m4
        attn = attn.softmax(-1)
        return (attn @ v).transpose(1, 2).reshape(b * n, c)

    def ours(qkv, mask, out=None):
        return fk.attention(qkv, heads=h, seq=n, key_padding_mask=mask, out=out)

    def as_tokens(y):
        # SDPA returns [B, heads, N, d]; ours writes [B*N, heads*d] (what the next op reads).
        return y.transpose(1, 2).reshape(b * n, c) if sdpa else y

    return eager, ours, (qkv, mask), as_tokens


def full_attention(p, dt):
    return _full(p, dt, sdpa=False)


def _sdpa_window(p, dt):
    """SDPA on short sequences with an additive [M, heads, N, N] term (Hugging Face's Swin passes
    its bias and window mask so; M = 1 or the batch), against the window fMHA reading the term
    padded per call as the patch layer pads it."""
    b, h, n, d, m = p["batch"], p["heads"], p["seq"], p["head_dim"], p["windows"] or 1
    c = h * d
    qkv = rand(b * n, 3 * c, dtype=dt)
    term = rand(m, h, n, n, dtype=dt, scale=0.5)
    full = term if m in (1, b) else term.repeat(b // m, 1, 1, 1)
    npad = -(-n // 8) * 8

    def eager(qkv, term, full):
        q, k, v = qkv.view(b, n, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=full)

    def ours(qkv, term, full, out=None):
        add = F.pad(term, (0, npad - n), value=float("-inf"))
        return fk.attention(qkv, heads=h, seq=n, add=add, out=out)

    def as_tokens(y):
        return y.transpose(1, 2).reshape(b * n, c)

    return eager, ours, (qkv, term, full), as_tokens


def sdpa(p, dt):
    if "windows" in p:
        return _sdpa_window(p, dt)
    return _full(p, dt, sdpa=True)


def _pads(h, w, ws):
    return (ws - h % ws) % ws, (ws - w % ws) % ws


def window_partition(p, dt):
    b, h, w, c, ws, shift = p["b"], p["h"], p["w"], p["c"], p["window"], p["shift"]
    x = rand(b, h, w, c, dtype=dt)
    g, beta = rand(c, dtype=dt, scale=0.5) + 1, rand(c, dtype=dt, scale=0.5)

    def eager(x, g, beta):
        y = F.layer_norm(x, (c,), g, beta, 1e-5)
        if shift:
            y = torch.roll(y, shifts=(-shift, -shift), dims=(1, 2))
        ph, pw = _pads(h, w, ws)
        y = F.pad(y, (0, 0, 0, pw, 0, ph))
        hp, wp = h + ph, w + pw
        y = y.view(b, hp // ws, ws, wp // ws, ws, c).permute(0, 1, 3, 2, 4, 5).contiguous()
        return y.view(-1, ws * ws, c)

    def ours(x, g, beta, out=None):
        return fk.ln_shift_partition(x, g, beta, ws, shift, eps=1e-5, out=out)

    return eager, ours, (x, g, beta)


def window_reverse(p, dt):
    b, h, w, c, ws, shift, with_ln = p["b"], p["h"], p["w"], p["c"], p["window"], p["shift"], p["with_ln"]
    ph, pw = _pads(h, w, ws)
    hp, wp = h + ph, w + pw
    windows = rand(b * (hp // ws) * (wp // ws), ws * ws, c, dtype=dt)
    shortcut = rand(b, h, w, c, dtype=dt)
    g, beta = rand(c, dtype=dt, scale=0.5) + 1, rand(c, dtype=dt, scale=0.5)

    def eager(windows, shortcut, g, beta):
        x = windows.view(b, hp // ws, wp // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)
        x = x[:, :h, :w, :].contiguous()
        if shift:
            x = torch.roll(x, shifts=(shift, shift), dims=(1, 2))
        y = shortcut + x
        if with_ln:
            return y, F.layer_norm(y.reshape(b, h * w, c), (c,), g, beta, 1e-5).view(b, h, w, c)
        return y

    def ours(windows, shortcut, g, beta, out=None):
        if with_ln:
            o, o_ln = out if out is not None else (None, None)
            return fk.window_reverse_residual(windows, shortcut, ws, shift, gamma=g, beta=beta, eps=1e-5,
                                              out=o, ln_out=o_ln, with_ln=True)
        return fk.window_reverse_residual(windows, shortcut, ws, shift, out=out)

    return eager, ours, (windows, shortcut, g, beta)


def gemm_gelu(p, dt):
    m, n, k = p["m"], p["n"], p["k"]
    x, wt, bias = rand(m, k, dtype=dt), rand(n, k, dtype=dt, scale=k ** -0.5), rand(n, dtype=dt)

    def eager(x, wt, bias):
        return F.gelu(F.linear(x, wt, bias))

    def ours(x, wt, bias, out=None):
        return fk.gemm(x, wt, "nk", bias=bias, epilogue="bias_gelu", out=out)

    return eager, ours, (x, wt, bias)


def gemm_residual(p, dt):
    m, n, k = p["m"], p["n"], p["k"]
    x, wt, bias = rand(m, k, dtype=dt), rand(n, k, dtype=dt, scale=k ** -0.5), rand(n, dtype=dt)
    res = rand(m, n, dtype=dt)

    def eager(x, wt, bias, res):
        return F.linear(x, wt, bias) + res

    def ours(x, wt, bias, res, out=None):
        return fk.gemm(x, wt, "nk", bias=bias, residual=res, epilogue="bias_residual", out=out)

    return eager, ours, (x, wt, bias, res)


def bias_residual(p, dt):
    r, c = p["rows"], p["cols"]
    x, bias, res = rand(r, c, dtype=dt), rand(c, dtype=dt), rand(r, c, dtype=dt)

    def eager(x, bias, res):
        return (x + bias) + res

    def ours(x, bias, res, out=None):
        return fk.bias_residual(x, bias, res, out=out)

    return eager, ours, (x, bias, res)


def odd_gemm(p, dt):
    batch, m, n, k, weight = p["batch"], p["m"], p["n"], p["k"], p["b_is_weight"]
    npad, kpad = -(-n // 8) * 8, -(-k // 8) * 8
    shape_a = (m, k) if batch == 1 else (batch, m, k)
    a = rand(*shape_a, dtype=dt)
    if weight:
        b = rand(n, k, dtype=dt, scale=k ** -0.5)
        b_pad = fk.pad(b, rows_to=npad, cols_to=kpad)  # once, at load time

        def eager(a, b):
            return F.linear(a, b)

        def ours(a, b, out=None):
            ap = fk.pad(a, cols_to=kpad) if kpad != k else a
            return fk.gemm(ap, b_pad, "nk")[..., :n]
    else:
        b = rand(*((k, n) if batch == 1 else (batch, k, n)), dtype=dt, scale=k ** -0.5)

        def eager(a, b):
            return torch.bmm(a, b) if batch > 1 else a @ b

        def ours(a, b, out=None):
            ap = fk.pad(a, cols_to=kpad) if kpad != k else a
            bp = fk.pad(b, rows_to=kpad, cols_to=npad)
            return fk.gemm(ap, bp, "kn")[..., :n]

    return eager, ours, (a, b)


def fused_mlp(p, dt):
    # Both sides normalise: where the recorded chain began at fc1, its LayerNorm was the window
    # reverse's, which the fused MLP takes over.
    m, c, hidden = p["rows"], p["width"], p["hidden"]
    x = rand(m, c, dtype=dt)
    g, beta = 1 + rand(c, dtype=dt, scale=0.1), rand(c, dtype=dt, scale=0.1)
    w1, b1 = rand(hidden, c, dtype=dt, scale=c ** -0.5), rand(hidden, dtype=dt, scale=0.1)
    w2, b2 = rand(c, hidden, dtype=dt, scale=hidden ** -0.5), rand(c, dtype=dt, scale=0.1)

    def eager(x, g, beta, w1, b1, w2, b2):
        h = F.gelu(F.linear(F.layer_norm(x, (c,), g, beta, 1e-5), w1, b1))
        return x + F.linear(h, w2, b2)

    def ours(x, g, beta, w1, b1, w2, b2, out=None):
        return fk.ln_mlp_residual(x, g, beta, w1, b1, w2, b2, eps=1e-5, out=out)

    return eager, ours, (x, g, beta, w1, b1, w2, b2)


def patch_embed(p, dt):
    b, cin, h, w, c, ph, pw = (p[k] for k in ("b", "cin", "h", "w", "c", "ph", "pw"))
    gh, gw, k = h // ph, w // pw, cin * ph * pw
    k8 = -(-k // 8) * 8
    x = rand(b, cin, h, w, dtype=dt)
    weight, bias = rand(c, cin, ph, pw, dtype=dt, scale=k ** -0.5), rand(c, dtype=dt, scale=0.1)
    w_pad = F.pad(weight.reshape(c, k), (0, k8 - k)).contiguous()  # once, at load time

    def eager(x, weight, bias):
        # The convolution and the NCHW -> NHWC tokens the module hands on.
        return F.conv2d(x, weight, bias, stride=(ph, pw)).permute(0, 2, 3, 1).reshape(b * gh * gw, c)

    def ours(x, weight, bias, out=None):
        patches = x.reshape(b, cin, gh, ph, gw, pw).permute(0, 2, 4, 1, 3, 5).reshape(b * gh * gw, k)
        if k8 != k:
            patches = F.pad(patches, (0, k8 - k))
        return fk.gemm(patches, w_pad, "nk", bias=bias, epilogue="bias", out=out)

    return eager, ours, (x, weight, bias)


BUILDERS = {
    "window_attention": window_attention,
    "full_attention": full_attention,
    "sdpa": sdpa,
    "window_partition": window_partition,
    "window_reverse": window_reverse,
    "gemm_gelu": gemm_gelu,
    "gemm_residual": gemm_residual,
    "bias_residual": bias_residual,
    "odd_gemm": odd_gemm,
    "fused_mlp": fused_mlp,
    "patch_embed": patch_embed,
}


def as_tuple(y):
    return y if isinstance(y, tuple) else (y,)


def poisoned_like(y):
    ys = tuple(poison(torch.empty_like(t)) for t in as_tuple(y))
    return ys if isinstance(y, tuple) else ys[0]


def rel_error(out, ref):
    worst = 0.0
    for o, r in zip(as_tuple(out), as_tuple(ref)):
        o, r = o.float(), r.float()
        if not torch.isfinite(o).all():
            return float("nan")
        worst = max(worst, ((o - r).norm() / r.norm().clamp_min(1e-30)).item())
    return worst


def graph_us(fn, calls=20, reps=15):
    """GPU time per call: `calls` calls captured in one CUDA graph, the median of `reps` replays
    timed with events. This counts what a trace counts (kernel time, no host launch gaps), with
    the inputs as warm in L2 as the previous op leaves them in a model."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    del graph
    return sorted(times)[len(times) // 2]


def median_us(fn, detail, name):
    try:
        return graph_us(fn)
    except Exception as e:  # noqa: BLE001 - a chain that cannot be captured is timed per call
        torch.cuda.synchronize()
        detail.setdefault("timed_per_call", {})[name] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        from triton.testing import do_bench
        return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


def bench_one(entry, rounds, compile_it):
    dt = DT[entry["dtype"]]
    built = BUILDERS[entry["pattern"]](entry["params"], dt)
    eager, ours, inputs = built[:3]
    to_tokens = built[3] if len(built) > 3 else (lambda y: y)
    detail = {}
    # Numerics: the replacement (into NaN-poisoned outputs) and the eager chain against the eager
    # chain on float32 copies of the same inputs.
    with torch.no_grad():
        ref = to_tokens(eager(*[up(x) for x in inputs]))
        y_eager = to_tokens(eager(*inputs))
        probe = ours(*inputs)
        out = poisoned_like(probe) if entry["pattern"] != "odd_gemm" else None
        y_ours = ours(*inputs, out=out)
        torch.cuda.synchronize()
    err = rel_error(y_ours, ref)
    detail["eager_rel_error"] = rel_error(y_eager, ref)
    tol = TOL[entry["dtype"]]
    passed = math.isfinite(err) and err <= tol
    compiled = None
    if compile_it:
        try:
            compiled = torch.compile(eager, dynamic=False)
            with torch.no_grad():
                compiled(*inputs)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a chain that does not compile is reported as such
            detail["compile_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            compiled = None
    times = {"ours": [], "eager": [], "compiled": []}
    with torch.no_grad():
        for _ in range(rounds):
            times["ours"].append(median_us(lambda: ours(*inputs), detail, "ours"))
            times["eager"].append(median_us(lambda: eager(*inputs), detail, "eager"))
            if compiled is not None:
                times["compiled"].append(median_us(lambda: compiled(*inputs), detail, "compiled"))
    med = {k: (sorted(v)[len(v) // 2] if v else None) for k, v in times.items()}
    detail["rounds_us"] = times
    return {
        "id": entry["id"],
        "status": "passed" if passed else "failed",
        "ours_us": med["ours"],
        "eager_us": med["eager"],
        "compiled_us": med["compiled"],
        "rel_error": err if math.isfinite(err) else None,
        "tolerance": tol,
        "detail": detail,
    }


def driver_version():
    try:
        import subprocess
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except Exception:  # noqa: BLE001 - the driver version is informative only
        return None


def main():
    job_path, out_path = sys.argv[1], sys.argv[2]
    with open(job_path) as f:
        job = json.load(f)
    torch.manual_seed(0)
    results = []
    n = len(job["proposals"])
    for i, entry in enumerate(job["proposals"]):
        t0 = time.time()
        try:
            r = bench_one(entry, job["rounds"], job["compile"])
        except Exception as e:  # noqa: BLE001 - one proposal failing must not hide the others
            r = {"id": entry["id"], "status": "error", "ours_us": None, "eager_us": None,
                 "compiled_us": None, "rel_error": None, "tolerance": None,
                 "detail": {"error": f"{type(e).__name__}: {e}"[:500]}}
        results.append(r)
        if job.get("progress"):
            print(f"[{i + 1}/{n}] {entry['id']}: {r['status']} ({time.time() - t0:.1f} s)", file=sys.stderr,
                  flush=True)
        torch.cuda.empty_cache()
    out = {
        "device": torch.cuda.get_device_name(),
        "driver": driver_version(),
        "torch": torch.__version__,
        "results": results,
    }
    write_json(out_path, out)


def write_json(path, obj):
    """obj as JSON at path, under a temporary name until it is whole."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
