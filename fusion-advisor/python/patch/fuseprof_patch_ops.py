"""The bundled kernels as torch.library operators (namespace `fuseprof`), for the patch layer.

Dispatch: on CUDA, from C++ (fuseprof_torch_ops.cpp, compiled with g++ against the installed
torch on first use and cached in FUSEPROF_CACHE or ~/.cache/fuseprof); where that cannot be
built, the same schemas are defined here and call the kernels through fuseprof_kernels'
ctypes bindings (`DISPATCH` says which). Every op has a fake implementation (torch.compile
traces through it), a CPU reference implementation in plain torch (what the CPU tests run,
and the definition each CUDA kernel is checked against) and a backward pass in torch ops.
"""
import hashlib
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

SCHEMAS = {
    "ln_shift_partition": "(Tensor x, Tensor gamma, Tensor beta, int window, int shift, float eps) -> Tensor",
    "window_attention": "(Tensor qkv, Tensor add, int heads, int seq, float scale) -> Tensor",
    "attention": "(Tensor qkv, int heads, int seq, float scale, Tensor? key_padding_mask=None) -> Tensor",
    "window_reverse_residual": "(Tensor windows, Tensor shortcut, int window, int shift, Tensor gamma, Tensor beta, "
                               "float eps) -> (Tensor, Tensor)",
    "linear_residual": "(Tensor x, Tensor weight, Tensor bias, Tensor residual) -> Tensor",
    "linear_gelu_tanh": "(Tensor x, Tensor weight, Tensor bias) -> Tensor",
    "linear": "(Tensor x, Tensor weight_padded, Tensor? bias, int n) -> Tensor",
    "window_reverse_add": "(Tensor windows, Tensor shortcut, int window, int shift) -> Tensor",
    "ln_mlp_residual": "(Tensor x, Tensor gamma, Tensor beta, float eps, Tensor w1, Tensor b1, Tensor w2, Tensor b2) "
                       "-> Tensor",
    # The backward kernels, called from the forward ops' backward passes. Operators of their own,
    # so that torch.compile's traced backward keeps them opaque; gradients a call does not need
    # come back empty ([0]).
    "window_attention_backward": "(Tensor qkv, Tensor add, Tensor grad, int heads, int seq, float scale, "
                                 "bool need_add) -> (Tensor, Tensor)",
    "ln_shift_partition_backward": "(Tensor grad, Tensor x, Tensor gamma, int window, int shift, float eps, "
                                   "bool need_params) -> (Tensor, Tensor, Tensor)",
    "window_reverse_backward": "(Tensor? g_out, Tensor? g_ln, Tensor? y, Tensor? gamma, int window, int shift, "
                               "float eps, bool need_shortcut, bool need_params) -> (Tensor, Tensor, Tensor, Tensor)",
}
# Operators that are themselves gradients: no backward pass of their own.
BACKWARD_OPS = ("window_attention_backward", "ln_shift_partition_backward", "window_reverse_backward")

# "C++" or "Python (ctypes)": how the CUDA implementations are dispatched in this process;
# why the C++ build was not used, when it was not.
DISPATCH = None
DISPATCH_NOTE = ""
# Calls of each CPU reference implementation (the tests check that the patched path ran).
REFERENCE_CALLS = {}


def _fk():
    import fuseprof_kernels

    return fuseprof_kernels


# ---- CPU references: the definition of each op --------------------------------------------------

def _count(name):
    REFERENCE_CALLS[name] = REFERENCE_CALLS.get(name, 0) + 1


def partition(x, window):
    """[B, H, W, C] -> [B * nWh * nWw, window * window, C], zero-padding H and W up to the window."""
    b, h, w, c = x.shape
    ph, pw = (window - h % window) % window, (window - w % window) % window
    x = F.pad(x, (0, 0, 0, pw, 0, ph))
    hp, wp = h + ph, w + pw
    x = x.view(b, hp // window, window, wp // window, window, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, window * window, c)


def reverse(windows, window, b, h, w):
    """partition's inverse, dropping the padding: -> [B, H, W, C]."""
    c = windows.shape[-1]
    hp, wp = -(-h // window) * window, -(-w // window) * window
    x = windows.reshape(b, hp // window, wp // window, window, window, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, hp, wp, c)[:, :h, :w, :]


def ref_ln_shift_partition(x, gamma, beta, window, shift, eps):
    _count("ln_shift_partition")
    y = F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)
    if shift:
        y = torch.roll(y, shifts=(-shift, -shift), dims=(1, 2))
    return partition(y, window).contiguous()


def _wide(t):
    """t in float32, or float64 where it is (the gradient checks)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _attend(q, k, v, add, scale):
    """q, k, v: [B, H, N, d]; add: broadcastable to [B, H, N, N] or None."""
    s = (_wide(q) @ _wide(k).transpose(-1, -2)) * scale
    if add is not None:
        s = s + _wide(add)
    return (s.softmax(-1) @ _wide(v)).to(q.dtype)


def _split_qkv(qkv, heads, seq):
    tokens, width = qkv.numel() // qkv.shape[-1], qkv.shape[-1]
    d = width // (3 * heads)
    q, k, v = qkv.reshape(tokens // seq, seq, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)
    return q, k, v, d


def ref_window_attention(qkv, add, heads, seq, scale):
    """add: attention_add's layout [nW, heads, seq, seq rounded up to 8], -inf in the padding
    columns (the kernel reads them); window b uses b % nW."""
    _count("window_attention")
    if add.shape[-1] != -(-seq // 8) * 8 or not bool((add[..., seq:] == float("-inf")).all()):
        raise ValueError("fuseprof::window_attention: the additive term must be [nW, heads, seq, seq rounded up "
                         "to 8] with -inf in the padding columns (attention_add's layout)")
    q, k, v, d = _split_qkv(qkv, heads, seq)
    n_win = add.shape[0]
    a = add[..., :seq]
    a = a.repeat(q.shape[0] // n_win, 1, 1, 1) if n_win > 1 else a
    o = _attend(q, k, v, a, scale)
    return o.transpose(1, 2).reshape(-1, heads * d)


def ref_attention(qkv, heads, seq, scale, key_padding_mask=None):
    """key_padding_mask: [B, seq] additive (0 keeps a key, a large negative value drops it)."""
    _count("attention")
    q, k, v, d = _split_qkv(qkv, heads, seq)
    add = key_padding_mask.reshape(q.shape[0], 1, 1, seq) if key_padding_mask is not None else None
    o = _attend(q, k, v, add, scale)
    return o.transpose(1, 2).reshape(-1, heads * d)


def ref_window_reverse_residual(windows, shortcut, window, shift, gamma, beta, eps):
    _count("window_reverse_residual")
    b, h, w, c = shortcut.shape
    y = reverse(windows, window, b, h, w)
    if shift:
        y = torch.roll(y, shifts=(shift, shift), dims=(1, 2))
    out = shortcut + y
    return out, F.layer_norm(out, (c,), gamma, beta, eps)


def ref_linear_residual(x, weight, bias, residual):
    _count("linear_residual")
    return residual + F.linear(x, weight, bias)


def ref_linear_gelu_tanh(x, weight, bias):
    _count("linear_gelu_tanh")
    return F.gelu(F.linear(x, weight, bias), approximate="tanh")


def ref_linear(x, weight_padded, bias, n):
    _count("linear")
    k8 = weight_padded.shape[1]
    if x.shape[-1] != k8:
        x = F.pad(x, (0, k8 - x.shape[-1]))
    y = F.linear(x, weight_padded, bias)
    return y if y.shape[-1] == n else y[..., :n].contiguous()


def ref_window_reverse_add(windows, shortcut, window, shift):
    _count("window_reverse_add")
    b, h, w, c = shortcut.shape
    y = reverse(windows, window, b, h, w)
    if shift:
        y = torch.roll(y, shifts=(shift, shift), dims=(1, 2))
    return shortcut + y


def ref_ln_mlp_residual(x, gamma, beta, eps, w1, b1, w2, b2):
    _count("ln_mlp_residual")
    xn = F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)
    return x + F.linear(F.gelu(F.linear(xn, w1, b1)), w2, b2)


REFERENCES = {
    "ln_shift_partition": ref_ln_shift_partition,
    "window_attention": ref_window_attention,
    "attention": ref_attention,
    "window_reverse_residual": ref_window_reverse_residual,
    "linear_residual": ref_linear_residual,
    "linear_gelu_tanh": ref_linear_gelu_tanh,
    "linear": ref_linear,
    "window_reverse_add": ref_window_reverse_add,
    "ln_mlp_residual": ref_ln_mlp_residual,
}


# ---- fake implementations: output shapes only ---------------------------------------------------

def _fake_ln_shift_partition(x, gamma, beta, window, shift, eps):
    b, h, w, c = x.shape
    return x.new_empty(b * (-(-h // window)) * (-(-w // window)), window * window, c)


def _fake_attention_out(qkv, heads):
    tokens = qkv.numel() // qkv.shape[-1]
    return qkv.new_empty(tokens, qkv.shape[-1] // 3)


def _fake_linear(x, weight, *rest):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


FAKES = {
    "ln_shift_partition": _fake_ln_shift_partition,
    "window_attention": lambda qkv, add, heads, seq, scale: _fake_attention_out(qkv, heads),
    "attention": lambda qkv, heads, seq, scale, key_padding_mask=None: _fake_attention_out(qkv, heads),
    "window_reverse_residual": lambda windows, shortcut, window, shift, gamma, beta, eps: (
        torch.empty_like(shortcut), torch.empty_like(shortcut)),
    "linear_residual": _fake_linear,
    "linear_gelu_tanh": _fake_linear,
    "linear": lambda x, weight_padded, bias, n: x.new_empty(*x.shape[:-1], n),
    "window_reverse_add": lambda windows, shortcut, window, shift: torch.empty_like(shortcut),
    "ln_mlp_residual": lambda x, gamma, beta, eps, w1, b1, w2, b2: torch.empty_like(x),
}


# ---- CUDA through ctypes: used when the C++ operators cannot be built ---------------------------

def _cuda_ln_shift_partition(x, gamma, beta, window, shift, eps):
    return _fk().ln_shift_partition(x.contiguous(), gamma.contiguous(), beta.contiguous(), window, shift, eps=eps)


def _cuda_window_attention(qkv, add, heads, seq, scale):
    return _fk().attention(qkv.contiguous(), heads=heads, seq=seq, add=add.contiguous(), scale=scale)


def _cuda_attention(qkv, heads, seq, scale, key_padding_mask=None):
    kpm = key_padding_mask.contiguous() if key_padding_mask is not None else None
    return _fk().attention(qkv.contiguous(), heads=heads, seq=seq, key_padding_mask=kpm, scale=scale)


def _cuda_window_reverse_residual(windows, shortcut, window, shift, gamma, beta, eps):
    return _fk().window_reverse_residual(windows.contiguous(), shortcut.contiguous(), window, shift, gamma=gamma,
                                         beta=beta, eps=eps, with_ln=True)


def _flat_linear(x, weight, bias, residual, epilogue):
    k = x.shape[-1]
    x2 = x.contiguous().view(-1, k)
    res = residual.contiguous().view(x2.shape[0], -1) if residual is not None else None
    y = _fk().gemm(x2, weight.contiguous(), "nk", bias=bias, residual=res, epilogue=epilogue)
    return y.view(*x.shape[:-1], weight.shape[0])


def _cuda_linear(x, weight_padded, bias, n):
    k8 = weight_padded.shape[1]
    if x.shape[-1] != k8:
        x = F.pad(x, (0, k8 - x.shape[-1]))
    y = _flat_linear(x, weight_padded, bias, None, "bias" if bias is not None else None)
    return y if y.shape[-1] == n else y[..., :n].contiguous()


CUDA_PYTHON = {
    "ln_shift_partition": _cuda_ln_shift_partition,
    "window_attention": _cuda_window_attention,
    "attention": _cuda_attention,
    "window_reverse_residual": _cuda_window_reverse_residual,
    "linear_residual": lambda x, w, b, r: _flat_linear(x, w, b, r, "bias_residual"),
    "linear_gelu_tanh": lambda x, w, b: _flat_linear(x, w, b, None, "bias_gelu_tanh"),
    "linear": _cuda_linear,
    "window_reverse_add": lambda windows, shortcut, window, shift: _fk().window_reverse_residual(
        windows.contiguous(), shortcut.contiguous(), window, shift),
    "ln_mlp_residual": lambda x, gamma, beta, eps, w1, b1, w2, b2: _fk().ln_mlp_residual(
        x.contiguous(), gamma.contiguous(), beta.contiguous(), w1.contiguous(), b1.contiguous(), w2.contiguous(),
        b2.contiguous(), eps=eps),
}


# ---- backward passes: registered with torch.library.register_autograd --------------------------
# Each saves its inputs (or an output) and nothing else: what it needs of the forward (LayerNorm's
# row statistics, attention's probabilities, the MLP's hidden activations) is recomputed from them,
# as FlashAttention recomputes its probabilities. Written in torch ops, so that autograd, CUDA
# graphs and torch.compile's traced backward all take them.

def _ln_backward(g, x, gamma, beta, eps):
    """(dx, dgamma, dbeta) of LayerNorm over the last dimension, its statistics recomputed. The
    weights may be wider than x (float32 under autocast): the backward runs in x's dtype (it
    accumulates in float32 inside) and hands each gradient back in its own input's dtype."""
    c = x.shape[-1]
    gm, bt = gamma.to(x.dtype), beta.to(x.dtype)
    _, mean, rstd = torch.native_layer_norm(x, [c], gm, bt, eps)
    dx, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(g.to(x.dtype), x, [c], mean, rstd, gm, bt,
                                                                 [True, True, True])
    return dx, dgamma.to(gamma.dtype), dbeta.to(beta.dtype)


def _unpartition(gw, window, shift, b, h, w):
    """The adjoint of roll(-shift), zero padding and partition: the windows' gradient put back
    into the [B, H, W, C] map."""
    y = reverse(gw, window, b, h, w)
    return torch.roll(y, shifts=(shift, shift), dims=(1, 2)) if shift else y


def _repartition(g, window, shift):
    """The adjoint of reverse, cropping and roll(+shift): the map's gradient cut into windows."""
    return partition(torch.roll(g, shifts=(-shift, -shift), dims=(1, 2)) if shift else g, window).contiguous()


def _setup_ln_shift_partition(ctx, inputs, output):
    x, gamma, beta, window, shift, eps = inputs
    ctx.save_for_backward(x, gamma, beta)
    ctx.window, ctx.shift, ctx.eps = window, shift, eps


def _window_backward_kernels(x):
    """Whether fuseprof's window backward kernels take tensors like x: 16-bit CUDA tensors."""
    return x.is_cuda and x.dtype in (torch.float16, torch.bfloat16)


def _param_grads(dg, db, gamma, beta, need):
    """The LayerNorm weights' gradients from a backward operator (float32, empty when not
    needed), in each weight's dtype."""
    return (dg.to(gamma.dtype), db.to(beta.dtype)) if need else (None, None)


def _empty(like):
    return like.new_empty(0)


def ref_ln_shift_partition_backward(grad, x, gamma, window, shift, eps, need_params):
    """(dx, dgamma, dbeta) of ln_shift_partition: the windows' gradient put back into the map,
    then LayerNorm's backward with its statistics recomputed; dgamma and dbeta in float32."""
    b, h, w, _ = x.shape
    gy = _unpartition(grad.to(x.dtype), window, shift, b, h, w)
    dx, dg, db = _ln_backward(gy.contiguous(), x, gamma, torch.zeros_like(gamma), eps)
    f32 = torch.promote_types(x.dtype, torch.float32)
    if need_params:
        return dx, dg.to(f32), db.to(f32)
    return dx, x.new_empty(0, dtype=f32), x.new_empty(0, dtype=f32)


def _backward_ln_shift_partition(ctx, g):
    x, gamma, beta = ctx.saved_tensors
    need = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
    args = (g, x, gamma.to(x.dtype), ctx.window, ctx.shift, ctx.eps, need)
    if _window_backward_kernels(x):
        dx, dg, db = torch.ops.fuseprof.ln_shift_partition_backward(*args)
    else:
        dx, dg, db = ref_ln_shift_partition_backward(*args)
    return (dx, *_param_grads(dg, db, gamma, beta, need), None, None, None)


def _setup_window_reverse_add(ctx, inputs, output):
    ctx.window, ctx.shift = inputs[2], inputs[3]
    ctx.win_shape = inputs[0].shape


def _backward_window_reverse_add(ctx, g):
    if _window_backward_kernels(g):
        d_win, _, _, _ = torch.ops.fuseprof.window_reverse_backward(g, None, None, None, ctx.window, ctx.shift, 0.0,
                                                                    False, False)
        return d_win.view(ctx.win_shape), g, None, None
    return _repartition(g, ctx.window, ctx.shift), g, None, None


def ref_window_reverse_backward(g_out, g_ln, y, gamma, window, shift, eps, need_shortcut, need_params):
    """(d_windows, d_shortcut, dgamma, dbeta) of window_reverse_residual (window_reverse_add
    without g_ln): the sum's gradient g_out plus LayerNorm's backward of g_ln at the saved sum y,
    cut back into windows; dgamma and dbeta in float32."""
    g = None if g_out is None else g_out.to(y.dtype if y is not None else g_out.dtype)
    dg = db = None
    if g_ln is not None:
        dx, dg, db = _ln_backward(g_ln.to(y.dtype).contiguous(), y, gamma, torch.zeros_like(gamma), eps)
        g = dx if g is None else g + dx
    d_win = _repartition(g, window, shift)
    d_sc = g.clone() if need_shortcut else _empty(g)
    if need_params and dg is not None:
        f32 = torch.promote_types(y.dtype, torch.float32)
        return d_win, d_sc, dg.to(f32), db.to(f32)
    return d_win, d_sc, _empty(g), _empty(g)


def _setup_window_reverse_residual(ctx, inputs, output):
    windows, shortcut, window, shift, gamma, beta, eps = inputs
    ctx.save_for_backward(output[0], gamma, beta)
    ctx.window, ctx.shift, ctx.eps = window, shift, eps
    ctx.win_shape = windows.shape


def _backward_window_reverse_residual(ctx, g_out, g_ln):
    out, gamma, beta = ctx.saved_tensors
    need = ctx.needs_input_grad[4] or ctx.needs_input_grad[5]
    args = (g_out, g_ln, out, gamma.to(out.dtype), ctx.window, ctx.shift, ctx.eps, True, need)
    if _window_backward_kernels(out):
        d_win, d_sc, dg, db = torch.ops.fuseprof.window_reverse_backward(*args)
    else:
        d_win, d_sc, dg, db = ref_window_reverse_backward(*args)
    return (d_win.view(ctx.win_shape), d_sc, None, None, *_param_grads(dg, db, gamma, beta, need), None)


def _attention_backward_cuda(qkv, add, heads, seq, scale, g, need_add):
    """_attention_backward on the GPU in fp16/bf16, through PyTorch's memory-efficient attention:
    its forward recomputes the row statistics (log-sum-exp), its backward recomputes the
    probabilities tile by tile on chip and gives the additive term's gradient, so nothing of
    [B, heads, seq, seq] is stored but the term itself, written once (in q's dtype, its rows
    padded to 16 elements as the kernel needs)."""
    q, k, v, d = _split_qkv(qkv, heads, seq)
    bias = None
    if add is not None:
        full = torch.empty(q.shape[0], heads, seq, -(-seq // 16) * 16, device=q.device, dtype=q.dtype)
        bias = full[..., :seq]
        bias.unflatten(0, (-1, add.shape[0])).copy_(add.unsqueeze(0))
    do = g.to(q.dtype).reshape(q.shape[0], seq, heads, d).transpose(1, 2)
    out, lse, seed, offset = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, bias, True, 0.0, False, scale=scale)
    dq, dk, dv, dbias = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
        do, q, k, v, bias, out, lse, seed, offset, 0.0, [True, True, True, need_add and bias is not None], False,
        scale=scale)
    return pack_qkv(dq, dk, dv).reshape(qkv.shape), dbias


def _attention_backward(qkv, add, heads, seq, scale, g, need_add=True):
    """(dqkv, the gradient of each batch entry's additive term [B, heads, seq, seq]) of
    softmax(q kᵀ·scale + add) v, with the probabilities recomputed. add: None or [M, heads or 1,
    seq or 1, seq], batch entry b adding add[b % M] (M divides B: window terms, key-padding rows)."""
    if qkv.is_cuda and qkv.dtype in (torch.float16, torch.bfloat16):
        return _attention_backward_cuda(qkv, add, heads, seq, scale, g, need_add)
    q, k, v, d = _split_qkv(qkv, heads, seq)
    q, k, v = _wide(q), _wide(k), _wide(v)
    s = (q @ k.transpose(-1, -2)) * scale
    if add is not None:
        s = s + _wide(add).repeat(q.shape[0] // add.shape[0], 1, 1, 1)
    p = s.softmax(-1)
    do = _wide(g).reshape(q.shape[0], seq, heads, d).transpose(1, 2)
    dv = p.transpose(-1, -2) @ do
    dp = do @ v.transpose(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    dq = (ds @ k) * scale
    dk = (ds.transpose(-1, -2) @ q) * scale
    return pack_qkv(dq, dk, dv).reshape(qkv.shape).to(qkv.dtype), ds


def _setup_window_attention(ctx, inputs, output):
    qkv, add, heads, seq, scale = inputs
    ctx.save_for_backward(qkv, add)
    ctx.heads, ctx.seq, ctx.scale = heads, seq, scale


def _window_backward_kernel(qkv, add, heads, seq):
    """Whether fuseprof's own backward kernel (fmha_bwd_window) takes this call: 16-bit CUDA
    tensors, at most 64 tokens, head dim 32 or 64."""
    d = qkv.shape[-1] // (3 * heads)
    return (qkv.is_cuda and qkv.dtype in (torch.float16, torch.bfloat16) and seq <= 64 and d in (32, 64)
            and add.dtype == qkv.dtype)


def ref_window_attention_backward(qkv, add, grad, heads, seq, scale, need_add):
    """(dqkv, dadd) of window_attention: dadd in add's layout (the padding columns take no
    gradient), summed over the windows that share a term."""
    n_win = add.shape[0]
    batch = qkv.numel() // qkv.shape[-1] // seq
    dqkv, ds = _attention_backward(qkv, add[..., :seq], heads, seq, scale, grad, need_add)
    if not need_add:
        return dqkv, _empty(add)
    dadd = _wide(ds).reshape(batch // n_win, n_win, heads, seq, seq).sum(0)
    return dqkv, F.pad(dadd, (0, add.shape[-1] - seq)).to(add.dtype)


def _backward_window_attention(ctx, g):
    qkv, add = ctx.saved_tensors
    need = ctx.needs_input_grad[1]
    args = (qkv, add, g, ctx.heads, ctx.seq, ctx.scale, need)
    if _window_backward_kernel(qkv, add, ctx.heads, ctx.seq):
        dqkv, dadd = torch.ops.fuseprof.window_attention_backward(*args)
    else:
        dqkv, dadd = ref_window_attention_backward(*args)
    return dqkv, (dadd if need else None), None, None, None


def _cuda_window_attention_backward(qkv, add, grad, heads, seq, scale, need_add):
    dqkv, dadd = _fk().attention_backward(qkv, grad.to(qkv.dtype).reshape(-1, grad.shape[-1]), heads, seq, add=add,
                                          scale=scale, need_add=need_add)
    if dadd is None:
        return dqkv.reshape(qkv.shape), _empty(add)
    return dqkv.reshape(qkv.shape), F.pad(dadd, (0, add.shape[-1] - seq)).to(add.dtype)


def _cuda_ln_shift_partition_backward(grad, x, gamma, window, shift, eps, need_params):
    dx, dg, db = _fk().ln_shift_partition_backward(grad.to(x.dtype), x, gamma.to(x.dtype).contiguous(), window,
                                                   shift, eps, need_params=need_params)
    return (dx, dg, db) if need_params else (dx, x.new_empty(0, dtype=torch.float32),
                                             x.new_empty(0, dtype=torch.float32))


def _cuda_window_reverse_backward(g_out, g_ln, y, gamma, window, shift, eps, need_shortcut, need_params):
    dt = (y if y is not None else g_out).dtype
    cast = lambda t: None if t is None else t.to(dt)  # noqa: E731
    d_win, d_sc, dg, db = _fk().window_reverse_residual_backward(
        cast(g_out), cast(g_ln), y, None if gamma is None else cast(gamma).contiguous(), window, shift, eps,
        need_shortcut=need_shortcut, need_params=need_params)
    none = d_win.new_empty(0)
    return d_win, (none if d_sc is None else d_sc), (none if dg is None else dg), (none if db is None else db)


def _fake_window_reverse_backward(g_out, g_ln, y, gamma, window, shift, eps, need_shortcut, need_params):
    ref = g_out if g_out is not None else g_ln
    b, h, w, c = ref.shape
    d_win = ref.new_empty(b * (-(-h // window)) * (-(-w // window)), window * window, c, dtype=y.dtype if y is not
                          None else ref.dtype)
    d_sc = d_win.new_empty(ref.shape) if need_shortcut else d_win.new_empty(0)
    params = need_params and g_ln is not None
    f32 = torch.promote_types(d_win.dtype, torch.float32)
    dg = ref.new_empty(c if params else 0, dtype=f32 if params else d_win.dtype)
    return d_win, d_sc, dg, torch.empty_like(dg)


REFERENCES.update({
    "window_attention_backward": ref_window_attention_backward,
    "ln_shift_partition_backward": ref_ln_shift_partition_backward,
    "window_reverse_backward": ref_window_reverse_backward,
})
FAKES.update({
    "window_attention_backward": lambda qkv, add, grad, heads, seq, scale, need_add: (
        torch.empty_like(qkv), torch.empty_like(add) if need_add else add.new_empty(0)),
    "ln_shift_partition_backward": lambda grad, x, gamma, window, shift, eps, need_params: (
        torch.empty_like(x), *[x.new_empty(x.shape[-1] if need_params else 0,
                                           dtype=torch.promote_types(x.dtype, torch.float32)) for _ in range(2)]),
    "window_reverse_backward": _fake_window_reverse_backward,
})
CUDA_PYTHON.update({
    "window_attention_backward": _cuda_window_attention_backward,
    "ln_shift_partition_backward": _cuda_ln_shift_partition_backward,
    "window_reverse_backward": _cuda_window_reverse_backward,
})


def _setup_attention(ctx, inputs, output):
    qkv, heads, seq, scale, kpm = inputs
    ctx.save_for_backward(qkv, kpm)
    ctx.heads, ctx.seq, ctx.scale = heads, seq, scale


def _backward_attention(ctx, g):
    qkv, kpm = ctx.saved_tensors
    seq = ctx.seq
    add = None if kpm is None else kpm.reshape(-1, 1, 1, seq)
    dqkv, _ = _attention_backward(qkv, add, ctx.heads, seq, ctx.scale, g, False)
    return dqkv, None, None, None, None  # a key-padding mask has no gradient


def _linear_grads(g, x, weight, need_bias):
    """(dx, dweight, dbias) of x Wᵀ (+ b) for the output's gradient g."""
    g2, x2 = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
    dx = (g2 @ weight).view(x.shape)
    dw = g2.t() @ x2
    return dx, dw, (g2.sum(0) if need_bias else None)


def _setup_linear_residual(ctx, inputs, output):
    x, weight, bias, residual = inputs
    ctx.save_for_backward(x, weight)


def _backward_linear_residual(ctx, g):
    x, weight = ctx.saved_tensors
    dx, dw, db = _linear_grads(g, x, weight, ctx.needs_input_grad[2])
    return dx, dw, db, g


def _setup_linear_gelu_tanh(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward_linear_gelu_tanh(ctx, g):
    x, weight, bias = ctx.saved_tensors
    h = F.linear(x, weight, bias)
    dh = torch.ops.aten.gelu_backward(g, h, approximate="tanh")
    return _linear_grads(dh, x, weight, ctx.needs_input_grad[2])


def _setup_linear(ctx, inputs, output):
    x, weight_padded, bias, n = inputs
    ctx.save_for_backward(x, weight_padded)
    ctx.has_bias = bias is not None


def _backward_linear(ctx, g):
    x, weight_padded = ctx.saved_tensors
    n8, k8 = weight_padded.shape
    k = x.shape[-1]
    gp = F.pad(g, (0, n8 - g.shape[-1]))
    xp = F.pad(x, (0, k8 - k)) if k != k8 else x
    dxp, dw, db = _linear_grads(gp, xp, weight_padded, ctx.has_bias and ctx.needs_input_grad[2])
    return dxp[..., :k], dw, db, None


def _setup_ln_mlp_residual(ctx, inputs, output):
    x, gamma, beta, eps, w1, b1, w2, b2 = inputs
    ctx.save_for_backward(x, gamma, beta, w1, b1, w2)
    ctx.eps = eps


def _backward_ln_mlp_residual(ctx, g):
    x, gamma, beta, w1, b1, w2 = ctx.saved_tensors
    xn = F.layer_norm(x, (x.shape[-1],), gamma, beta, ctx.eps)
    h = F.linear(xn, w1, b1)
    da, dw2, db2 = _linear_grads(g, F.gelu(h), w2, True)
    dh = torch.ops.aten.gelu_backward(da, h)
    dxn, dw1, db1 = _linear_grads(dh, xn, w1, True)
    dx, dgamma, dbeta = _ln_backward(dxn.contiguous(), x, gamma, beta, ctx.eps)
    return g + dx, dgamma, dbeta, None, dw1, db1, dw2, db2


AUTOGRAD = {
    "ln_shift_partition": (_backward_ln_shift_partition, _setup_ln_shift_partition),
    "window_attention": (_backward_window_attention, _setup_window_attention),
    "attention": (_backward_attention, _setup_attention),
    "window_reverse_residual": (_backward_window_reverse_residual, _setup_window_reverse_residual),
    "linear_residual": (_backward_linear_residual, _setup_linear_residual),
    "linear_gelu_tanh": (_backward_linear_gelu_tanh, _setup_linear_gelu_tanh),
    "linear": (_backward_linear, _setup_linear),
    "window_reverse_add": (_backward_window_reverse_add, _setup_window_reverse_add),
    "ln_mlp_residual": (_backward_ln_mlp_residual, _setup_ln_mlp_residual),
}


# ---- registration ---------------------------------------------------------------------------

def _cache_dir():
    return os.environ.get("FUSEPROF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fuseprof")


def _cuda_include():
    try:
        from torch.utils.cpp_extension import CUDA_HOME
    except Exception:  # noqa: BLE001 - no cpp_extension: take the usual place
        CUDA_HOME = None
    for root in (os.environ.get("CUDA_HOME"), CUDA_HOME, "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "include", "cuda_runtime_api.h")):
            return os.path.join(root, "include")
    return None


def build_cpp_ops():
    """Compiles fuseprof_torch_ops.cpp against the installed torch (cached); returns its path.
    Raises RuntimeError with the reason when it cannot."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuseprof_torch_ops.cpp")
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    include, libdir = os.path.join(torch_dir, "include"), os.path.join(torch_dir, "lib")
    cuda_include = _cuda_include()
    if cuda_include is None:
        raise RuntimeError("no CUDA headers (cuda_runtime_api.h) under CUDA_HOME or /usr/local/cuda")
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    key = hashlib.sha256()
    with open(src, "rb") as f:
        key.update(f.read())
    key.update(f"{torch.__version__}|{torch_dir}|{abi}|{sys.version_info[:2]}".encode())
    cache = _cache_dir()
    so = os.path.join(cache, "torch-ops-%s.so" % key.hexdigest()[:16])
    if os.path.exists(so):
        return so
    os.makedirs(cache, exist_ok=True)
    tmp = f"{so}.{os.getpid()}.tmp"
    cmd = [os.environ.get("CXX", "g++"), "-O2", "-DNDEBUG", "-std=c++17", "-shared", "-fPIC",
           f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-I", include,
           "-I", os.path.join(include, "torch", "csrc", "api", "include"), "-I", cuda_include, src, "-o", tmp,
           "-L", libdir, "-lc10", "-lc10_cuda", "-ltorch_cpu", "-ltorch_cuda", "-ltorch", f"-Wl,-rpath,{libdir}",
           "-ldl"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"g++ failed to run: {e}") from None
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"g++ failed: {last}")
    os.replace(tmp, so)
    return so


def _load_cpp_ops():
    """Loads the C++ operators and points them at the kernels library; the reason on failure."""
    import ctypes

    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        fk = _fk()
        lib_path = fk._find_lib()
        so = build_cpp_ops()
        torch.ops.load_library(so)
        status = ctypes.CDLL(so).fuseprof_ops_init(lib_path.encode())
        if status != 0:
            return f"fuseprof_ops_init({lib_path}) returned {status}"
        fk.init()
        return None
    except Exception as e:  # noqa: BLE001 - the Python definitions take over, and say why
        return f"{type(e).__name__}: {e}"


def _counted(name):
    """A backward operator's CPU reference, counted (the backward passes call the references
    directly where no kernel takes the call: only calls through the operator count)."""
    def call(*args):
        _count(name)
        return REFERENCES[name](*args)
    return call


def register():
    """Defines the fuseprof::* operators once per process (C++ dispatch where it builds)."""
    global DISPATCH, DISPATCH_NOTE
    if DISPATCH is not None:
        return DISPATCH
    why = "disabled by FUSEPROF_PATCH_CPP=0" if os.environ.get("FUSEPROF_PATCH_CPP") == "0" else _load_cpp_ops()
    if why is None:
        DISPATCH = "C++"
    else:
        DISPATCH, DISPATCH_NOTE = "Python (ctypes)", why
        for name, schema in SCHEMAS.items():
            torch.library.define(f"fuseprof::{name}", schema)
            torch.library.impl(f"fuseprof::{name}", "CUDA")(CUDA_PYTHON[name])
    for name in SCHEMAS:
        torch.library.impl(f"fuseprof::{name}", "CPU")(_counted(name) if name in BACKWARD_OPS else REFERENCES[name])
        torch.library.register_fake(f"fuseprof::{name}")(FAKES[name])
        if name not in BACKWARD_OPS:
            backward, setup = AUTOGRAD[name]
            torch.library.register_autograd(f"fuseprof::{name}", backward, setup_context=setup)
    return DISPATCH


def pack_qkv(q, k, v):
    """q, k, v [B, H, N, d] packed as the fMHA reads a QKV projection's output: [B*N, 3*H*d],
    each row q | k | v with the heads inner."""
    b, h, n, d = q.shape
    return torch.cat([t.transpose(1, 2).reshape(b * n, h * d) for t in (q, k, v)], dim=-1)


def window_sdpa(qkv, add, shape, scale):
    """The window fMHA on a packed QKV with SDPA's additive term [M, 1 or H, N, N] (batch entry
    i adds term i % M), returned in SDPA's layout [B, H, N, d] (a view of [B, N, H, d])."""
    b, h, n, d = shape
    term = padded_term(add.to(qkv.dtype).expand(add.shape[0], h, n, n))
    out = torch.ops.fuseprof.window_attention(qkv.reshape(b * n, 3 * h * d), term, h, n, scale)
    return out.view(b, n, h, d).transpose(1, 2)


def key_padding_row(mask, b, n, dtype):
    """The [B, N] additive key-padding row of a [B or 1, 1, 1 or N, N] mask that is the same for
    every query (boolean: True keeps a key)."""
    row = mask[:, 0, 0, :]
    if row.dtype == torch.bool:
        row = torch.zeros(row.shape, dtype=dtype, device=mask.device).masked_fill(~row, torch.finfo(dtype).min)
    return row.to(dtype).expand(b, n).contiguous()


def padded_term(term):
    """An additive term [M, heads, N, N] in attention_add's layout: rows padded to a multiple of 8
    with -inf, so that the padding keys take no weight."""
    n = term.shape[-1]
    return F.pad(term, (0, -(-n // 8) * 8 - n), value=float("-inf"))


def attention_add(heads, seq, bias, window_mask):
    """The window attention's additive tensor [nW or 1, heads, seq, seq rounded up to 8]: the
    relative-position bias [heads, seq, seq] plus the shifted-window mask [nW, seq, seq] (either
    may be None), combined once per layer (a constant of the model, like a padded weight)."""
    t = bias if bias is not None else window_mask
    if t.is_cuda:
        return _fk().attention_add(heads, seq, bias=bias, window_mask=window_mask)
    add = torch.zeros(1, heads, seq, seq, dtype=t.dtype)
    if bias is not None:
        add = add + bias[None]
    if window_mask is not None:
        add = add + window_mask[:, None]
    return padded_term(add)
