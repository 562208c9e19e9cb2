"""fuseprof's bundled kernels for PyTorch tensors (ctypes over libfuseprof_kernels.so).

Every call runs on torch.cuda.current_stream(), takes contiguous fp16/bf16 CUDA tensors and
raises FuseprofKernelError with the library's one-line message on failure.

    import fuseprof_kernels as fk
    out = fk.attention(qkv, heads=3, bias=rel_bias, window_mask=mask)   # qkv: [B_*N, 3*H*d]

The library is looked up in $FUSEPROF_KERNELS_LIB, then next to this file, then in
target/release of the workspace.
"""
import ctypes
import os

import torch

_DTYPES = {torch.float16: 0, torch.bfloat16: 1}
_EPILOGUES = {None: 0, "bias": 1, "bias_gelu": 2, "bias_gelu_tanh": 3, "bias_residual": 4}


class FuseprofKernelError(RuntimeError):
    pass


def _find_lib():
    env = os.environ.get("FUSEPROF_KERNELS_LIB")
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [env] if env else []
    candidates += [
        os.path.join(here, "libfuseprof_kernels.so"),
        os.path.join(here, "..", "..", "target", "release", "libfuseprof_kernels.so"),
    ]
    for c in candidates:
        if c and os.path.exists(c):
            return c
    raise FuseprofKernelError(
        "libfuseprof_kernels.so not found: build it with `cargo build --release -p fuseprof-kernels` "
        "and set FUSEPROF_KERNELS_LIB")


_lib = None
_U64, _I64, _I32, _F32, _VP = ctypes.c_uint64, ctypes.c_int64, ctypes.c_int32, ctypes.c_float, ctypes.c_void_p
_SIGS = {
    "fpk_init": [],
    "fpk_precompile_all": [],
    "fpk_abi_version": [],
    "fpk_attention": [_I32, _U64, _U64, _U64, _U64, _I64, _I64, _I64, _I64, _I32, _I64, _F32, _VP],
    "fpk_attention_combine": [_I32, _U64, _U64, _U64, _I64, _I64, _I64, _VP],
    "fpk_attention_backward": [_I32, _U64, _U64, _U64, _U64, _U64, _I64, _I64, _I64, _I64, _I64, _F32, _VP],
    "fpk_ln_shift_partition_backward": [_I32, _U64, _U64, _U64, _U64, _U64, _U64, _I64, _I64, _I64, _I64, _I64,
                                        _I64, _F32, _VP],
    "fpk_window_reverse_residual_backward": [_I32, _U64, _U64, _U64, _U64, _U64, _U64, _U64, _U64, _I64, _I64, _I64,
                                             _I64, _I64, _I64, _F32, _VP],
    "fpk_ln_shift_partition": [_I32, _U64, _U64, _U64, _U64, _I64, _I64, _I64, _I64, _I64, _I64, _F32, _VP],
    "fpk_window_reverse_residual": [_I32, _U64, _U64, _U64, _U64, _U64, _U64, _I64, _I64, _I64, _I64, _I64,
                                    _I64, _F32, _VP],
    "fpk_bias_residual": [_I32, _U64, _U64, _U64, _U64, _I64, _I64, _VP],
    "fpk_bias_act": [_I32, _U64, _U64, _U64, _I64, _I64, _I32, _VP],
    "fpk_ln_mlp_residual": [_I32, _U64, _U64, _U64, _F32, _U64, _U64, _U64, _U64, _U64, _I64, _I64, _I64, _VP],
    "fpk_pad": [_I32, _U64, _U64, _I64, _I64, _I64, _I64, _I64, _I64, _I64, _VP],
    "fpk_gemm": [_I32, _I64, _I64, _I64, _I64, _U64, _I64, _I64, _U64, _I64, _I64, _I32, _U64, _U64, _U64,
                 _I64, _I64, _I32, _VP],
}


def lib():
    global _lib
    if _lib is None:
        l = ctypes.CDLL(_find_lib())
        for name, args in _SIGS.items():
            f = getattr(l, name)
            f.argtypes = args
            f.restype = ctypes.c_int32
        l.fpk_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        l.fpk_last_error.restype = ctypes.c_size_t
        _lib = l
    return _lib


def _check(status):
    if status != 0:
        buf = ctypes.create_string_buffer(1 << 16)
        lib().fpk_last_error(buf, len(buf))
        raise FuseprofKernelError(f"status {status}: {buf.value.decode(errors='replace')}")


def _stream():
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


def _dt(t):
    if t.dtype not in _DTYPES:
        raise FuseprofKernelError(f"dtype {t.dtype} not supported (fp16, bf16)")
    if not t.is_cuda:
        raise FuseprofKernelError("tensor must be on a CUDA device")
    return _DTYPES[t.dtype]


def _ptr(t):
    if t is None:
        return 0
    if not t.is_contiguous():
        raise FuseprofKernelError("tensor must be contiguous")
    return t.data_ptr()


def init():
    torch.cuda.init()
    _check(lib().fpk_init())


def precompile_all():
    """Compile every kernel now; raises with every compile error at once."""
    _check(lib().fpk_precompile_all())


def attention_add(heads, seq, bias=None, window_mask=None, out=None):
    """Precombine bias [heads, seq, seq] and window_mask [nW, seq, seq] (either may be None) into the
    [nW or 1, heads, seq, seq rounded up to 8] additive tensor that attention(add=...) takes (seq <= 64).
    A one-time setup per layer, like weight padding: bias and mask are constants of the model."""
    t = bias if bias is not None else window_mask
    if t is None:
        raise FuseprofKernelError("attention_add needs a bias or a window mask")
    dt = _dt(t)
    for u in (bias, window_mask):
        if u is not None and u.dtype != t.dtype:
            raise FuseprofKernelError("bias and mask must have the same dtype")
    n = window_mask.shape[0] if window_mask is not None else 1
    npad = -(-seq // 8) * 8
    if out is None:
        out = torch.empty(n, heads, seq, npad, device=t.device, dtype=t.dtype)
    _check(lib().fpk_attention_combine(dt, _ptr(bias), _ptr(window_mask), _ptr(out), seq, heads, n, _stream()))
    return out


def attention(qkv, heads, seq, bias=None, window_mask=None, key_padding_mask=None, scale=None, out=None,
              add=None):
    """Fused attention on the QKV linear's output.

    qkv: [B*seq, 3*heads*d] (or [B, seq, 3*heads*d]); returns [B*seq, heads*d].
    bias: [heads, seq, seq]; window_mask: [nW, seq, seq] (batch entry b uses b % nW);
    key_padding_mask: [B, seq] additive.
    add: the output of attention_add() (bias + window mask precombined; seq <= 64); the fast path
    for Swin windows (the persistent kernel). Not together with bias / window_mask.
    """
    dt = _dt(qkv)
    tokens = qkv.numel() // qkv.shape[-1]
    d = qkv.shape[-1] // (3 * heads)
    if tokens % seq:
        raise FuseprofKernelError("token count is not a multiple of seq")
    batch = tokens // seq
    if scale is None:
        scale = d ** -0.5
    if out is None:
        out = torch.empty(tokens, heads * d, device=qkv.device, dtype=qkv.dtype)
    mask, kind, n_mask = None, 0, 0
    if add is not None:
        if bias is not None or window_mask is not None or key_padding_mask is not None:
            raise FuseprofKernelError("add already holds the bias and mask")
        mask, kind, n_mask = add, 3, add.shape[0]
    elif window_mask is not None:
        mask, kind, n_mask = window_mask, 1, window_mask.shape[0]
    elif key_padding_mask is not None:
        mask, kind, n_mask = key_padding_mask, 2, batch
    for t in (bias, mask):
        if t is not None and t.dtype != qkv.dtype:
            raise FuseprofKernelError("bias and mask must have qkv's dtype")
    _check(lib().fpk_attention(dt, _ptr(qkv), _ptr(out), _ptr(bias), _ptr(mask), batch, seq, heads, d, kind,
                               n_mask, float(scale), _stream()))
    return out


def attention_backward(qkv, dout, heads, seq, add=None, scale=None, need_add=True):
    """The gradient of attention(qkv, heads, seq, add=add, scale=scale) for seq <= 64: (dqkv,
    dadd). dout: [B*seq, heads*d] in qkv's dtype; dqkv like qkv; dadd: [n, heads, seq, seq]
    float32, the additive tensor's gradient summed over the batch entries that share an entry
    (None without add, or when need_add is false). The probabilities are recomputed from qkv and
    add: nothing of the forward is kept."""
    dt = _dt(qkv)
    tokens = qkv.numel() // qkv.shape[-1]
    d = qkv.shape[-1] // (3 * heads)
    if tokens % seq:
        raise FuseprofKernelError("token count is not a multiple of seq")
    if dout.dtype != qkv.dtype or add is not None and add.dtype != qkv.dtype:
        raise FuseprofKernelError("dout and add must have qkv's dtype")
    batch = tokens // seq
    if scale is None:
        scale = d ** -0.5
    qkv, dout = qkv.contiguous(), dout.contiguous()
    add = None if add is None else add.contiguous()
    dqkv = torch.empty_like(qkv)
    dadd = None
    if add is not None and need_add:
        dadd = torch.zeros(add.shape[0], heads, seq, seq, device=qkv.device, dtype=torch.float32)
    _check(lib().fpk_attention_backward(dt, _ptr(qkv), _ptr(dout), _ptr(add), _ptr(dqkv), _ptr(dadd), batch, seq,
                                        heads, d, 0 if add is None else add.shape[0], float(scale), _stream()))
    return dqkv, dadd


def window_grid(h, w, window):
    return -(-h // window), -(-w // window)


def ln_shift_partition(x, gamma, beta, window, shift, eps=1e-5, out=None):
    """x: [B, H, W, C] -> [B*nWh*nWw, window*window, C] (LayerNorm, roll(-shift), zero pad, partition)."""
    dt = _dt(x)
    B, H, W, C = x.shape
    nwh, nww = window_grid(H, W, window)
    if out is None:
        out = torch.empty(B * nwh * nww, window * window, C, device=x.device, dtype=x.dtype)
    _check(lib().fpk_ln_shift_partition(dt, _ptr(x), _ptr(gamma), _ptr(beta), _ptr(out), B, H, W, C, window, shift,
                                        float(eps), _stream()))
    return out


def window_reverse_residual(windows, shortcut, window, shift, gamma=None, beta=None, eps=1e-5, out=None,
                            ln_out=None, with_ln=False):
    """windows: [B*nW, window*window, C], shortcut: [B, H, W, C] -> out [B, H, W, C]
    (= shortcut + roll(reverse(windows), +shift)); with_ln also returns LayerNorm(out)."""
    dt = _dt(windows)
    B, H, W, C = shortcut.shape
    if out is None:
        out = torch.empty_like(shortcut)
    if with_ln and ln_out is None:
        ln_out = torch.empty_like(shortcut)
    _check(lib().fpk_window_reverse_residual(dt, _ptr(windows), _ptr(shortcut), _ptr(out), _ptr(gamma), _ptr(beta),
                                             _ptr(ln_out) if with_ln else 0, B, H, W, C, window, shift, float(eps),
                                             _stream()))
    return (out, ln_out) if with_ln else out


def ln_shift_partition_backward(dy, x, gamma, window, shift, eps=1e-5, need_params=True):
    """The gradient of ln_shift_partition(x, gamma, beta, window, shift, eps): (dx, dgamma, dbeta)
    for the windows' gradient dy [B*nWh*nWw, window*window, C]; dgamma and dbeta float32 [C]
    (None when need_params is false). gamma in x's dtype or None."""
    dt = _dt(x)
    B, H, W, C = x.shape
    dy, x = dy.contiguous(), x.contiguous()  # kept until the launch: a freed copy could be reused
    dx = torch.empty_like(x)
    dgamma = dbeta = None
    if need_params:
        dgamma = torch.zeros(C, device=x.device, dtype=torch.float32)
        dbeta = torch.zeros(C, device=x.device, dtype=torch.float32)
    _check(lib().fpk_ln_shift_partition_backward(dt, _ptr(dy), _ptr(x), _ptr(gamma),
                                                 _ptr(dx), _ptr(dgamma), _ptr(dbeta), B, H, W, C, window, shift,
                                                 float(eps), _stream()))
    return dx, dgamma, dbeta


def window_reverse_residual_backward(g_out, g_ln, y, gamma, window, shift, eps=1e-5, need_shortcut=True,
                                     need_params=True):
    """The gradient of window_reverse_residual(windows, shortcut, window, shift, gamma, beta, eps,
    with_ln=g_ln is not None): (d_windows, d_shortcut, dgamma, dbeta) for the sum's gradient g_out
    (or None) and the LayerNorm output's g_ln (or None) at the saved sum y [B, H, W, C]."""
    c = lambda t: None if t is None else t.contiguous()  # noqa: E731
    g_out, g_ln, y = c(g_out), c(g_ln), c(y)  # kept until the launch: a freed copy could be reused
    ref = g_out if g_out is not None else g_ln
    dt = _dt(ref)
    B, H, W, C = ref.shape
    nwh, nww = window_grid(H, W, window)
    d_windows = torch.empty(B * nwh * nww, window * window, C, device=ref.device, dtype=ref.dtype)
    d_shortcut = torch.empty_like(ref) if need_shortcut else None
    dgamma = dbeta = None
    if need_params and g_ln is not None:
        dgamma = torch.zeros(C, device=ref.device, dtype=torch.float32)
        dbeta = torch.zeros(C, device=ref.device, dtype=torch.float32)
    _check(lib().fpk_window_reverse_residual_backward(dt, _ptr(g_out), _ptr(g_ln), _ptr(y), _ptr(gamma),
                                                      _ptr(d_shortcut), _ptr(d_windows), _ptr(dgamma), _ptr(dbeta),
                                                      B, H, W, C, window, shift, float(eps), _stream()))
    return d_windows, d_shortcut, dgamma, dbeta


def bias_residual(x, bias, res, out=None):
    dt = _dt(x)
    cols = x.shape[-1]
    rows = x.numel() // cols
    if out is None:
        out = torch.empty_like(x)
    _check(lib().fpk_bias_residual(dt, _ptr(x), _ptr(bias), _ptr(res), _ptr(out), rows, cols, _stream()))
    return out


def ln_mlp_residual(x, gamma, beta, w1, b1, w2, b2, eps=1e-5, out=None):
    """out = x + gelu_erf(layer_norm(x) w1^T + b1) w2^T + b2 in one kernel (the hidden tensor stays on
    chip). x: [..., C] with C in 96, 128, 192; w1 [H, C], w2 [C, H] (nn.Linear weights), H a multiple of 64;
    out may be x."""
    dt = _dt(x)
    width, hidden = x.shape[-1], w1.shape[0]
    rows = x.numel() // width
    if out is None:
        out = torch.empty_like(x)
    _check(lib().fpk_ln_mlp_residual(dt, _ptr(x), _ptr(gamma), _ptr(beta), float(eps), _ptr(w1), _ptr(b1), _ptr(w2),
                                     _ptr(b2), _ptr(out), rows, width, hidden, _stream()))
    return out


def bias_gelu(x, bias=None, out=None):
    dt = _dt(x)
    cols = x.shape[-1]
    rows = x.numel() // cols
    if out is None:
        out = torch.empty_like(x)
    _check(lib().fpk_bias_act(dt, _ptr(x), _ptr(bias), _ptr(out), rows, cols, 1, _stream()))
    return out


def pad(t, rows_to=None, cols_to=None, out=None):
    """Zero-pad the last two dims of t ([..., rows, cols]) to (rows_to, cols_to); default: next multiple of 8
    for cols, rows unchanged."""
    dt = _dt(t)
    rows, cols = t.shape[-2], t.shape[-1]
    batch = t.numel() // (rows * cols)
    rows_to = rows if rows_to is None else rows_to
    cols_to = -(-cols // 8) * 8 if cols_to is None else cols_to
    if out is None:
        out = torch.empty(*t.shape[:-2], rows_to, cols_to, device=t.device, dtype=t.dtype)
    _check(lib().fpk_pad(dt, _ptr(t), _ptr(out), batch, rows, cols, rows * cols, cols, rows_to, cols_to, _stream()))
    return out


def gemm(a, b, b_layout="nk", bias=None, residual=None, epilogue=None, out=None, n=None):
    """Row-major (batched) GEMM through cuBLASLt.

    a: [..., M, K]; b: [..., N, K] (b_layout 'nk', a linear weight) or [..., K, N] ('kn');
    out: [..., M, N]. epilogue: None, 'bias', 'bias_gelu' (exact erf), 'bias_gelu_tanh', 'bias_residual'.
    Pass operands already padded to multiples of 8 (see pad()) for the fast path.
    """
    dt = _dt(a)
    M, K = a.shape[-2], a.shape[-1]
    batch = a.numel() // (M * K)
    if b_layout == "nk":
        N, lay, ldb = b.shape[-2], 0, K
    else:
        N, lay, ldb = b.shape[-1], 1, b.shape[-1]
    if b.shape[-1 if b_layout == "nk" else -2] != K:
        raise FuseprofKernelError("inner dimensions differ")
    b_batch = b.numel() // (b.shape[-1] * b.shape[-2])
    stride_b = b.shape[-1] * b.shape[-2] if b_batch > 1 else 0
    if out is None:
        out = torch.empty(*a.shape[:-2], M, N, device=a.device, dtype=a.dtype)
    code = _EPILOGUES[epilogue]
    _check(lib().fpk_gemm(dt, M, N, K, batch, _ptr(a), K, M * K, _ptr(b), ldb, stride_b, lay, _ptr(bias),
                          _ptr(residual), _ptr(out), N, M * N, code, _stream()))
    return out
