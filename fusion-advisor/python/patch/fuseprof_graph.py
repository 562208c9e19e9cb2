"""The patch layer's graph matcher: replacements found by what a model computes, whoever wrote it.

On the patched side, a model the patch layer wraps (fuseprof_patch.wrap_model) runs through
TorchDynamo with `Backend` below. Dynamo captures each forward as a torch.fx graph of
torch-level calls (module calls inlined, parameters as graph inputs, every value's shape, dtype
and device known); `rewrite` replaces the computations below wherever their tensors flow that
way, whatever module, library or function wrote them; the graph then runs as it is (eager, CUDA
graphs) or goes on to Inductor with the mode's options (compiled modes, where the replacements
are opaque operators to Inductor, as in the class patches).

Computations replaced (pattern names as in fuseprof_patch):
  fused_mlp       r + linear(gelu(linear(layer_norm(r), W1, b1)), W2, b2), exact GELU, eval
                  dropouts anywhere between: the fused MLP kernel, at the widths it is built for.
  gemm_residual   r + linear(h, W, b) (eval dropouts between): one GEMM with a bias + residual
                  epilogue.
  gemm_padded     linear(x, W, b) with W's rows or columns not a multiple of 8: W padded once.
  patch_embed     conv2d with kernel = stride and no padding, laid out as tokens right after
                  (flatten(2).transpose(1, 2), permute(0, 2, 3, 1), or reshape to [B, C, L] and
                  permute(0, 2, 1)): a patchify copy and one GEMM writing the tokens in order.
  full_attention  scaled_dot_product_attention without a mask or with a key-padding mask, and
                  the self-attention of nn.MultiheadAttention (multi_head_attention_forward),
                  up to 512 tokens, head_dim 32/64: the fMHA.
  window_attention scaled_dot_product_attention on up to 64 tokens with an additive
                  [M, heads, N, N] term (a relative-position bias, with or without a window
                  mask): the window fMHA.
  window_partition layer_norm over the channels of a [B, H, W, C] map (or of its [B, H*W, C]
                  tokens), then roll(-s, -s) over H and W and zero padding to the window in
                  either order where nothing is padded (roll first where something is), then the
                  map cut into windows (view to [B, H/w, w, W/w, w, C], permute(0, 1, 3, 2, 4,
                  5) or transpose(2, 3), any views after): LayerNorm + shift + partition in one
                  pass.
  window_reverse  the windows put back (view to [B, H/w, W/w, w, w, C], the same swap, view to
                  the map), roll(s, s) and the padding cropped (either order where
                  nothing is padded), then added to the block's input: reverse + shift +
                  residual in one pass, with the next LayerNorm where one normalises the sum and
                  the fused MLP does not take it.

Every replaced site is checked on its first call outside capture and tracing against the
computation it replaced (the report's "modules", named by the module path the call came from);
the model's output is checked as a whole by wrap_model.
"""
import operator

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import is_fake

import fuseprof_patch as fp
import fuseprof_patch_ops as ops

LINEAR = (torch._C._nn.linear, F.linear)
GELU = (torch._C._nn.gelu, F.gelu)
LAYER_NORM = (F.layer_norm, torch.layer_norm)
ADD = (operator.add, torch.add)
DROPOUT = (F.dropout, torch.dropout)
CONV2D = (torch.conv2d, F.conv2d)
SDPA = (torch._C._nn.scaled_dot_product_attention,)
MHA = (F.multi_head_attention_forward,)
PERMUTE = (torch.permute,)
FLATTEN = (torch.flatten,)
TRANSPOSE = (torch.transpose,)
RESHAPE = (torch.reshape,)
MATMUL = (operator.matmul, torch.matmul, torch.bmm)
SOFTMAX = (F.softmax, torch.softmax)
MUL = (operator.mul, torch.mul)
DIV = (operator.truediv, torch.div)
ROLL = (torch.roll,)
PAD = (torch._C._nn.pad, F.pad)

# The fMHA's longest sequence and its head sizes; the window kernel's longest sequence.
FMHA_MAX_SEQ = 512
FMHA_HEAD_DIMS = (32, 64)


# ---- reading the graph -------------------------------------------------------------------------

def _fn(node, targets):
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in targets


def _method(node, *names):
    return isinstance(node, torch.fx.Node) and node.op == "call_method" and node.target in names


def _arg(node, i, name, default=None):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _val(x):
    """The value a node stands for while Dynamo traced (a fake tensor), or the constant."""
    return x.meta.get("example_value") if isinstance(x, torch.fx.Node) else x


def _static(v):
    return torch.is_tensor(v) and all(isinstance(s, int) for s in v.shape)


def _tensor_why(v):
    """Why a value cannot go to the kernels (device, dtype, dynamic shape), or None."""
    if not _static(v):
        return "a dynamic shape"
    return fp._device_dtype_why(v)


def _is_identity(node):
    """A dropout that does nothing (eval, or p = 0)."""
    if _fn(node, DROPOUT):
        return _arg(node, 2, "training", True) is False or _arg(node, 1, "p", 0.5) == 0
    return False


def _up(x):
    """x, past the identities that produce it when each feeds only the next: (source, chain)."""
    chain = []
    while _is_identity(x) and len(x.users) == 1:
        chain.append(x)
        x = x.args[0]
    return x, chain


def _only_user(node, user):
    return len(node.users) == 1 and user in node.users


def _linear_parts(node):
    """(input, weight, bias) of a linear call, or None."""
    if not _fn(node, LINEAR):
        return None
    return node.args[0], _arg(node, 1, "weight"), _arg(node, 2, "bias")


def _is_view(node):
    """A call that keeps the values and their row-major order: contiguous, view, reshape."""
    return _method(node, "contiguous", "view", "reshape") or _fn(node, RESHAPE)


def _swaps_window_dims(node):
    """True for permute(0, 1, 3, 2, 4, 5) or transpose(2, 3) of a 6-D tensor: the swap that
    partitions a map into windows and puts windows back."""
    v = _val(node)
    if not _static(v) or v.dim() != 6:
        return False
    if _method(node, "permute") or _fn(node, PERMUTE):
        dims = tuple(node.args[1]) if len(node.args) == 2 and isinstance(node.args[1], (list, tuple)) else tuple(
            node.args[1:])
        return tuple(d % 6 if isinstance(d, int) else d for d in dims) == (0, 1, 3, 2, 4, 5)
    if _method(node, "transpose") or _fn(node, TRANSPOSE):
        dims = node.args[1:3]
        return len(dims) == 2 and all(isinstance(d, int) for d in dims) and sorted(d % 6 for d in dims) == [2, 3]
    return False


def _roll(node):
    """(source, (shift over H, shift over W)) of torch.roll over dims 1 and 2 of a 4-D tensor, or
    None."""
    if not _fn(node, ROLL):
        return None
    shifts, dims = _arg(node, 1, "shifts"), _arg(node, 2, "dims")
    shifts = tuple(shifts) if isinstance(shifts, (list, tuple)) else (shifts,)
    dims = tuple(dims) if isinstance(dims, (list, tuple)) else (dims,)
    v = _val(node)
    if not _static(v) or v.dim() != 4 or len(shifts) != 2 or tuple(d % 4 for d in dims) != (1, 2) or not all(
            isinstance(x, int) for x in shifts):
        return None
    return node.args[0], shifts


def _map_pad(node):
    """(source, (pad over H, pad over W)) of a constant zero padding of a 4-D [B, H, W, C] map at
    its bottom and right, or None."""
    if not _fn(node, PAD):
        return None
    pad, mode = _arg(node, 1, "pad"), _arg(node, 2, "mode", "constant")
    value = _arg(node, 3, "value", None)
    v = _val(node)
    if not _static(v) or v.dim() != 4 or mode != "constant" or value not in (None, 0, 0.0) or not isinstance(
            pad, (list, tuple)) or not all(isinstance(x, int) for x in pad):
        return None
    pad = tuple(pad) + (0,) * (6 - len(pad))
    if len(pad) != 6 or pad[0] or pad[1] or pad[2] or pad[4] or pad[3] < 0 or pad[5] < 0:
        return None
    return node.args[0], (pad[5], pad[3])


def _map_crop(node):
    """(source, (H, W)) of x[:, :H, :W] (with or without a trailing `:`) on a 4-D map, or None."""
    if not _fn(node, (operator.getitem,)) or not isinstance(node.args[1], tuple):
        return None
    idx = node.args[1]
    full = slice(None, None, None)
    if len(idx) not in (3, 4) or idx[0] != full or (len(idx) == 4 and idx[3] != full):
        return None
    if any(not isinstance(i, slice) or i.start not in (None, 0) or i.step not in (None, 1) for i in idx[1:3]):
        return None
    v = _val(node)
    if not _static(v) or v.dim() != 4:
        return None
    return node.args[0], (v.shape[1], v.shape[2])


def _attention_inputs(q, k, v):
    """((B, H, N, d), why the fMHA cannot take them or None) when q, k and v are [B, H, N, d] of
    one shape; else (None, None)."""
    qv, kv, vv = _val(q), _val(k), _val(v)
    if not all(_static(t) for t in (qv, kv, vv)) or qv.dim() != 4 or kv.shape != qv.shape or vv.shape != qv.shape:
        return None, None
    d = qv.shape[-1]
    why = f"head_dim {d}, the fMHA is built for 32 and 64" if d not in FMHA_HEAD_DIMS else _tensor_why(qv)
    return tuple(qv.shape), why


def _linear_operands(add):
    """For each side of an add that is, past eval dropouts, a linear used only there: (the
    linear, the dropouts between, the add's other side, the linear's (input, weight, bias))."""
    for side in (0, 1):
        lin, chain = _up(add.args[side])
        parts = _linear_parts(lin)
        if parts is not None and _only_user(lin, chain[-1] if chain else add):
            yield lin, chain, add.args[1 - side], parts


def _site(node, model):
    """Where a node's call came from: the model and the innermost module path Dynamo recorded."""
    stack = node.meta.get("nn_module_stack") or {}
    path, cls = "", None
    if stack:
        path, cls = list(stack.values())[-1]
        path = str(path)
        for prefix in ("L['self'].", "L['self']", "self."):
            if path.startswith(prefix):
                path = path[len(prefix):]
                break
        path = path.replace("_modules['", "").replace("']", "")
    name = getattr(cls, "__qualname__", None) or getattr(cls, "__name__", None) or str(cls or "")
    where = f"{getattr(cls, '__module__', '')}.{name}" if cls is not None else f"{model} (its own forward)"
    return (f"{model}/{path}" if path else model), where


# Calls whose value the mask analysis may compute ahead from constants alone.
_PURE = {operator.add, operator.sub, operator.mul, operator.ge, operator.gt, operator.le, operator.lt, operator.eq,
         operator.ne, operator.and_, operator.or_, operator.invert, operator.getitem, torch.arange, torch.ones,
         torch.zeros, torch.full, torch.where}
_PURE_METHODS = {"to", "expand", "view", "reshape", "unsqueeze", "squeeze", "new_ones", "new_zeros", "new_full",
                 "__and__", "__or__", "__invert__", "__eq__", "__ge__", "logical_and", "logical_or", "bool",
                 "float", "half", "masked_fill", "contiguous", "expand_as", "eq", "ge", "gt", "le", "lt", "ne"}
# Methods that read only their tensor's dtype and device.
_TEMPLATE_METHODS = {"new_ones", "new_zeros", "new_full"}


def _evaluate(node, memo, depth=0):
    """The value of a node that depends on no input of the graph (aranges, comparisons, masks
    built from shapes), computed on the CPU; None where it depends on an input or on a call
    outside _PURE."""
    if node in memo:
        return memo[node]
    memo[node] = None
    if depth > 64 or node.op not in ("call_function", "call_method"):
        return None
    if node.op == "call_function" and node.target not in _PURE:
        return None
    if node.op == "call_method" and node.target not in _PURE_METHODS:
        return None

    failed = []

    def value(a, template=False):
        if isinstance(a, torch.fx.Node):
            if template:
                v = _val(a)
                return torch.empty(0, dtype=v.dtype) if torch.is_tensor(v) else failed.append(a)
            out = _evaluate(a, memo, depth + 1)
            if out is None:
                failed.append(a)
            return out
        if isinstance(a, torch.device) or (isinstance(a, str) and a.startswith("cuda")):
            return "cpu"
        if isinstance(a, (list, tuple)):
            return type(a)(value(x) for x in a)
        return a

    args = [value(a, template=(i == 0 and node.target in _TEMPLATE_METHODS)) for i, a in enumerate(node.args)]
    kwargs = {k: ("cpu" if k == "device" else value(a)) for k, a in node.kwargs.items()}
    if failed:
        return None
    try:
        out = node.target(*args, **kwargs) if node.op == "call_function" else getattr(args[0], node.target)(
            *args[1:], **kwargs)
    except Exception:  # noqa: BLE001 - not computable ahead: treated as depending on an input
        return None
    if not torch.is_tensor(out) or out.numel() > 1 << 22:
        return None
    memo[node] = out
    return out


def _query_free(node, memo, depth=0):
    """True when a 4-D mask's value is the same for every query (its dim 2): it is a key-padding
    mask broadcast over the queries, whatever the code that built it."""
    v = _val(node) if isinstance(node, torch.fx.Node) else node
    if not isinstance(node, torch.fx.Node):
        return True  # a number
    if not _static(v) or depth > 64:
        return False
    if v.dim() < 2 or v.shape[-2] == 1 or v.stride(-2) == 0:
        return True
    c = _evaluate(node, memo)
    if c is not None:
        return bool((c == c[..., :1, :]).all())
    elementwise = node.op == "call_function" and node.target in (
        operator.and_, operator.or_, operator.add, operator.sub, operator.mul, operator.invert, torch.where) or \
        node.op == "call_method" and node.target in ("to", "expand", "__and__", "__or__", "__invert__", "logical_and",
                                                     "logical_or", "bool", "float", "half", "contiguous", "expand_as",
                                                     "masked_fill")
    if not elementwise:
        return False
    inputs = [a for a in node.args if isinstance(a, torch.fx.Node)] + [
        a for a in node.kwargs.values() if isinstance(a, torch.fx.Node)]
    if node.op == "call_method" and node.target in ("expand", "expand_as"):
        inputs = inputs[:1]
    return all(_query_free(a, memo, depth + 1) for a in inputs)


def _all_true(node, memo):
    """True when a mask is a constant that masks nothing (boolean all True, additive all zero)."""
    c = _evaluate(node, memo) if isinstance(node, torch.fx.Node) else None
    if c is None:
        return False
    return bool(c.all()) if c.dtype == torch.bool else bool((c == 0).all())


# ---- what replaces each computation (called from the rewritten graph) --------------------------

def _concrete(*tensors):
    """True when every tensor is real (not a fake or functional tensor of a trace)."""
    return all(not (torch.is_tensor(t) and is_fake(t)) for t in tensors) and not torch.compiler.is_compiling()


def _checked(site, pattern, fused, reference, *args):
    """fused(*args); its first concrete call at a site is compared with reference(*args): the
    output, and where autograd records, the gradient of every input that requires one for the
    same random output gradient."""
    if site in fp.report()["modules"] or not _concrete(*args) or (
            torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
        return fused(*args)
    ref = reference(*args)
    out = fused(*args)
    err = fp.rel_err(out, ref)
    entry = {"class": pattern, "rel_error": err, "passed": fp.passed(err)}
    wrt = [a for a in args if torch.is_tensor(a) and a.requires_grad]
    if torch.is_grad_enabled() and wrt:
        outs, refs = fp._tensors(out), fp._tensors(ref)
        # Random output gradients from a generator of their own: the program's random stream
        # (its dropout) stays as it would have been.
        cotangents = []
        for t in outs:
            gen = torch.Generator(device=t.device).manual_seed(len(cotangents))
            cotangents.append(torch.randn(t.shape, generator=gen, device=t.device, dtype=t.dtype))
        got = torch.autograd.grad(outs, wrt, cotangents, retain_graph=True, allow_unused=True)
        # retain_graph: the inputs are the model's intermediate values, whose own nodes the
        # engine would release too.
        want = torch.autograd.grad(refs, wrt, cotangents, retain_graph=True, allow_unused=True)
        pairs = [(g, w) for g, w in zip(got, want) if w is not None]
        grad_err = fp.rel_err(tuple(g if g is not None else torch.zeros_like(w) for g, w in pairs),
                              tuple(w for _, w in pairs)) if pairs else 0.0
        entry.update(grad_rel_error=grad_err, passed=entry["passed"] and fp.passed(grad_err))
    fp.report()["modules"][site] = entry
    return out


def _cached(owner, name, make, *sources):
    """A tensor derived from weights (a padded weight), kept on the first source tensor and remade
    when any source changes; made afresh inside traces, where there is nothing to keep, and on
    each call where autograd records, so that the weights' gradients flow through it."""
    if not _concrete(*sources) or (torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in sources)):
        return make()  # in a trace, or trained through: made in the graph, each call
    key = tuple((t.data_ptr(), t._version, t.dtype, tuple(t.shape)) for t in sources if t is not None)
    kept = getattr(owner, name, None)
    if kept is not None and kept[0] == key:
        return kept[1]
    with torch.no_grad():
        t = make()
    setattr(owner, name, (key, t))
    return t


def _as(t, x):
    """t (a weight, a bias, None) in x's dtype: under autocast a model's parameters stay float32
    while its activations are 16-bit, and the kernels read both in one dtype (the cast is
    differentiable, so the parameters' gradients flow back through it)."""
    return None if t is None else t.to(x.dtype)


def linear_residual(site, h, w, b, r):
    return _checked(site, "gemm_residual",
                    lambda h, w, b, r: torch.ops.fuseprof.linear_residual(h, _as(w, h), _as(b, h), r),
                    lambda h, w, b, r: r + F.linear(h, w, b), h, w, b, r)


def ln_mlp_residual(site, r, g, beta, eps, w1, b1, w2, b2):
    def fused(r, g, beta, w1, b1, w2, b2):
        c = r.shape[-1]
        y = torch.ops.fuseprof.ln_mlp_residual(r.reshape(r.shape[0], -1, c), *(_as(t, r) for t in (g, beta)), eps,
                                               *(_as(t, r) for t in (w1, b1, w2, b2)))
        return y.view(r.shape)

    def reference(r, g, beta, w1, b1, w2, b2):
        return r + F.linear(F.gelu(F.linear(F.layer_norm(r, (r.shape[-1],), g, beta, eps), w1, b1)), w2, b2)

    return _checked(site, "fused_mlp", fused, reference, r, g, beta, w1, b1, w2, b2)


def padded_linear(site, x, w, b):
    n, k = w.shape
    n8, k8 = -(-n // 8) * 8, -(-k // 8) * 8

    def fused(x, w, b):
        # Kept per dtype: the same weights may serve calls in and out of autocast.
        wp = _cached(w, f"_fuseprof_wpad_{x.dtype}", lambda: F.pad(_as(w, x), (0, k8 - k, 0, n8 - n)).contiguous(),
                     w)
        bp = None if b is None else _cached(b, f"_fuseprof_bpad_{x.dtype}",
                                            lambda: F.pad(_as(b, x), (0, n8 - n)).contiguous(), b)
        return torch.ops.fuseprof.linear(x, wp, bp, n)

    return _checked(site, "gemm_padded", fused, F.linear, x, w, b)


def patch_embed(site, layout, x, w, b):
    o, c, ph, pw = w.shape
    k = c * ph * pw
    k8 = -(-k // 8) * 8

    def fused(x, w, b):
        n, _, h, wd = x.shape
        gh, gw = h // ph, wd // pw
        patches = x.reshape(n, c, gh, ph, gw, pw).permute(0, 2, 4, 1, 3, 5).reshape(n * gh * gw, k)
        wt = _cached(w, f"_fuseprof_wgemm_{x.dtype}",
                     lambda: F.pad(_as(w, x).reshape(o, k), (0, k8 - k)).contiguous(), w)
        y = torch.ops.fuseprof.linear(patches, wt, _as(b, x), o)
        return y.view(n, gh * gw, o) if layout == "nlc" else y.view(n, gh, gw, o)

    def reference(x, w, b):
        y = F.conv2d(x, w, b, stride=(ph, pw))
        return y.flatten(2).transpose(1, 2) if layout == "nlc" else y.permute(0, 2, 3, 1)

    return _checked(site, "patch_embed", fused, reference, x, w, b)


def window_partition(site, window, shift, eps, bhwc, out_shape, x, g, beta):
    """LayerNorm over the channels of x (the map [B, H, W, C], or its tokens), roll(-shift), zero
    padding to the window and the map cut into windows, returned in the shape the model viewed
    them in."""
    def fused(x, g, beta):
        y = torch.ops.fuseprof.ln_shift_partition(x.reshape(bhwc), _as(g, x), _as(beta, x), window, shift, eps)
        return y.view(out_shape)

    def reference(x, g, beta):
        return ops.ref_ln_shift_partition(x.reshape(bhwc), g, beta, window, shift, eps).view(out_shape)

    return _checked(site, "window_partition", fused, reference, x, g, beta)


def window_reverse(site, window, shift, bhwc, windows, shortcut, ln=None):
    """shortcut + the windows put back into the [B, H, W, C] map and rolled by +shift, in the
    shortcut's shape; with ln = (gamma, beta, eps, shape), also the LayerNorm of the sum in that
    shape."""
    b, h, w, c = bhwc

    def fused(windows, shortcut, *affine):
        flat, short = windows.reshape(-1, window * window, c), shortcut.reshape(bhwc)
        if ln is None:
            return torch.ops.fuseprof.window_reverse_add(flat, short, window, shift).view(shortcut.shape)
        out, normed = torch.ops.fuseprof.window_reverse_residual(flat, short, window, shift,
                                                                  *(_as(a, flat) for a in affine), ln[2])
        return out.view(shortcut.shape), normed.view(ln[3])

    def reference(windows, shortcut, *affine):
        y = ops.reverse(windows.reshape(-1, window * window, c), window, b, h, w)
        y = torch.roll(y, shifts=(shift, shift), dims=(1, 2)) if shift else y
        out = shortcut + y.reshape(shortcut.shape)
        if ln is None:
            return out
        return out, F.layer_norm(out, (c,), *affine, ln[2]).view(ln[3])

    affine = () if ln is None else (ln[0], ln[1])
    return _checked(site, "window_reverse", fused, reference, windows, shortcut, *affine)


# The key-padding row and the packed QKV, made once per forward and shared by the layers (graph
# nodes of their own).
key_padding_row = ops.key_padding_row
pack_qkv = ops.pack_qkv


def qkv_linear(x, wq, bq, wk, bk, wv, bv):
    """Three projections of one input as one GEMM over their weights concatenated once: the
    packed QKV."""
    w = _cached(wq, "_fuseprof_qkv_w", lambda: torch.cat([wq, wk, wv]).contiguous(), wq, wk, wv)
    b = None if bq is None else _cached(bq, "_fuseprof_qkv_b", lambda: torch.cat([bq, bk, bv]).contiguous(),
                                        bq, bk, bv)
    return F.linear(x, w, b)


def _unpack(qkv, b, h, n, d):
    return qkv.reshape(b, n, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)


def sdpa_full(site, scale, shape, qkv, mask, kpm):
    """SDPA without a mask or with a key-padding mask (kpm: its [B, N] additive row)."""
    b, h, n, d = shape
    s = d ** -0.5 if scale is None else scale

    def fused(qkv, mask, kpm):
        out = torch.ops.fuseprof.attention(qkv.reshape(b * n, 3 * h * d), h, n, s, kpm)
        return out.view(b, n, h, d).transpose(1, 2)

    def reference(qkv, mask, kpm):
        q, k, v = _unpack(qkv, b, h, n, d)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)

    return _checked(site, "full_attention", fused, reference, qkv, mask, kpm)


def sdpa_window(site, scale, shape, qkv, add):
    """SDPA on a short sequence with an additive [M, heads, N, N] term."""
    b, h, n, d = shape
    s = d ** -0.5 if scale is None else scale

    def fused(qkv, add):
        return ops.window_sdpa(qkv, add, shape, s)

    def reference(qkv, add):
        q, k, v = _unpack(qkv, b, h, n, d)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=add, scale=scale)

    return _checked(site, "window_attention", fused, reference, qkv, add)


def _window_term(plan, heads, n, dtype, addends):
    """The additive term [M, heads, N, npad] of a written-out attention: each addend, added where
    the scores had shape P (batch dims, heads, N, N), taken over the 4-D batch index modulo its
    period (plan: (period, the shape to view it in before flattening), one per addend), tiled to
    M (a multiple of every period) and summed."""
    m = plan[0]
    term = None
    for (period, view), a in zip(plan[1], addends):
        c = a.to(dtype).expand(view).reshape(period, view[-3], n, n)
        c = c.repeat(m // period, 1, 1, 1)
        term = c if term is None else term + c
    return ops.padded_term(term.expand(m, heads, n, n))


def attention_chain(site, scale, plan, shape, qkv, *addends):
    """softmax(q kᵀ · scale + addends) v, written out: the window fMHA (plan: how the addends
    fold into one [M, heads, N, N] term; None: no addend, the fMHA)."""
    b, h, n, d = shape

    def fused(qkv, *addends):
        flat = qkv.reshape(b * n, 3 * h * d)
        if plan is None:
            out = torch.ops.fuseprof.attention(flat, h, n, scale, None)
        else:
            out = torch.ops.fuseprof.window_attention(flat, _window_term(plan, h, n, qkv.dtype, addends), h, n,
                                                      scale)
        return out.view(b, n, h, d).transpose(1, 2)

    def reference(qkv, *addends):
        q, k, v = _unpack(qkv, b, h, n, d)
        s = (q @ k.transpose(-2, -1)) * scale
        if plan is not None:
            for (period, view), a in zip(plan[1], addends):
                s = (s.view(-1, period, h, n, n) + a.expand(view).reshape(1, period, view[-3], n, n)).view(b, h, n, n)
        return s.softmax(-1) @ v

    return _checked(site, "window_attention" if plan is not None else "full_attention", fused, reference, qkv,
                    *addends)


def mha_self(site, heads, x, w_in, b_in, w_out, b_out, kpm):
    """nn.MultiheadAttention's self-attention on x [L, B, E] (its layout inside), as
    multi_head_attention_forward returns it: (output [L, B, E], None)."""
    seq, b, e = x.shape
    d = e // heads

    def fused(x, w_in, b_in, w_out, b_out, kpm):
        qkv = F.linear(x.transpose(0, 1), w_in, b_in).reshape(b * seq, 3 * e)
        add = None
        if kpm is not None:
            add = (torch.zeros(b, seq, dtype=x.dtype, device=x.device).masked_fill(kpm, torch.finfo(x.dtype).min)
                   if kpm.dtype == torch.bool else kpm.to(x.dtype).contiguous())
        out = torch.ops.fuseprof.attention(qkv, heads, seq, d ** -0.5, add)
        return F.linear(out.view(b, seq, e), w_out, b_out).transpose(0, 1)

    def reference(x, w_in, b_in, w_out, b_out, kpm):
        return F.multi_head_attention_forward(x, x, x, e, heads, w_in, b_in, None, None, False, 0.0, w_out, b_out,
                                              training=False, key_padding_mask=kpm, need_weights=False)[0]

    return _checked(site, "full_attention", fused, reference, x, w_in, b_in, w_out, b_out, kpm), None


def mha_native(heads, x, w_in, b_in, w_out, b_out, kpm):
    """nn.MultiheadAttention's own inference fast path (one native op), which its eager forward
    takes and TorchDynamo's capture does not: put back where the fMHA does not replace it, so
    that the captured graph runs what eager runs. x: [L, B, E]; returns (output [L, B, E], None)."""
    xb = x.transpose(0, 1)
    out = torch._native_multi_head_attention(xb, xb, xb, x.shape[-1], heads, w_in, b_in, w_out, b_out, kpm, False,
                                             True, 1 if kpm is not None else None)[0]
    return out.transpose(0, 1), None


def _structure(node, depth=0):
    """A key for what a node computes: the same for two nodes that make the same call on the
    same inputs (a mask sliced the same way in every layer)."""
    if not isinstance(node, torch.fx.Node):
        return repr(node)
    if node.op in ("placeholder", "get_attr") or depth > 8:
        return node
    return (node.op, node.target, tuple(_structure(a, depth + 1) for a in node.args),
            tuple(sorted((k, _structure(a, depth + 1)) for k, a in node.kwargs.items())))


# ---- the matches ---------------------------------------------------------------------------------

class _Rewriter:
    def __init__(self, gm, model, apply, eager):
        self.gm, self.graph, self.model, self.apply = gm, gm.graph, model, apply
        # The graph runs as it is (no compiler after it): what eager runs and the capture does
        # not is put back (mha_native).
        self.eager = eager
        self.count = 0
        self.restored = False
        self.rows = {}  # key-padding rows made, by mask

    def replace(self, last, pattern, fn, args, dead):
        """Replaces the value of `last` by fn(site, *args), inserted before it; erases `last` and
        the nodes of `dead` (the matched computation) that nothing else uses."""
        site, where = _site(last, self.model)
        site = f"{site} [{pattern}]"
        with self.graph.inserting_before(last):
            new = self.graph.call_function(fn, (site,) + tuple(args))
        new.meta = dict(last.meta)
        last.replace_all_uses_with(new)
        for node in [last] + list(dead):
            if not node.users:
                self.graph.erase_node(node)
        fp._note("patched", pattern, f"{where} (graph)")
        self.count += 1
        return new

    def left_alone(self, node, why):
        site, _ = _site(node, self.model)
        fp._left_alone(why, site)

    def _insert(self, before, fn, args):
        with self.graph.inserting_before(before):
            return self.graph.call_function(fn, tuple(args))

    @staticmethod
    def _packed_source(q, k, v, shape):
        """(the node that holds q, k, v packed as the fMHA reads them, the view nodes between), when
        q, k, v are the three slices of one [B, N, 3, H, d] reshape of it permuted (2, 0, 3, 1, 4):
        a QKV projection as timm, torchvision and most hand-written code split it."""
        b, h, n, d = shape
        slices = []
        for t in (q, k, v):
            if not _fn(t, (operator.getitem,)) or not isinstance(t.args[1], int):
                return None
            src, dead = t.args[0], [t]
            if _method(src, "unbind") or _fn(src, (torch.unbind,)):
                if _arg(src, 1, "dim", 0) != 0:
                    return None
                dead.append(src)
                src = src.args[0]
            slices.append((src, t.args[1], dead))
        if len({id(s[0]) for s in slices}) != 1 or [s[1] for s in slices] != [0, 1, 2]:
            return None
        p = slices[0][0]
        dims = tuple(p.args[1]) if len(p.args) == 2 and isinstance(p.args[1], (list, tuple)) else tuple(p.args[1:])
        if not (_method(p, "permute") or _fn(p, PERMUTE)) or dims != (2, 0, 3, 1, 4):
            return None
        r = p.args[0]
        if not (_method(r, "reshape", "view") or _fn(r, RESHAPE)) or tuple(_val(r).shape) != (b, n, 3, h, d):
            return None
        src = r.args[0]
        sv = _val(src)
        if not _static(sv) or not sv.is_contiguous() or sv.shape[-1] != 3 * h * d or sv.numel() != b * n * 3 * h * d:
            return None
        dead = []
        for _, _, d_ in slices:
            dead += [x for x in d_ if x not in dead]
        return src, dead + [p, r]

    @staticmethod
    def _three_projections(q, k, v, shape):
        """(x, [Wq, bq, Wk, bk, Wv, bv], the nodes between), when q, k, v are three projections of
        one input x, each viewed [B, N, H, d] and transposed to [B, H, N, d] (Hugging Face's BERT)."""
        b, h, n, d = shape
        parts, dead = [], []
        for t in (q, k, v):
            if not (_method(t, "transpose") or _fn(t, TRANSPOSE)) or tuple(sorted(t.args[1:])) != (1, 2):
                return None
            view = t.args[0]
            if not (_method(view, "view", "reshape") or _fn(view, RESHAPE)) or tuple(_val(view).shape) != (b, n, h, d):
                return None
            lin = view.args[0]
            p = _linear_parts(lin)
            if p is None or len(t.users) != 1 or len(view.users) != 1 or len(lin.users) != 1:
                return None
            parts.append(p)
            dead += [t, view, lin]
        x = parts[0][0]
        if any(p[0] is not x for p in parts) or len({p[2] is None for p in parts}) != 1:
            return None
        return x, [a for p in parts for a in p[1:]], dead

    def _qkv(self, before, q, k, v, shape):
        """A node holding q, k, v packed ([B, N, 3*H*d] or [B*N, 3*H*d]), inserted before `before`
        where it must be made, and the nodes it leaves unused."""
        found = self._packed_source(q, k, v, shape)
        if found is not None:
            return found
        three = self._three_projections(q, k, v, shape)
        if three is not None:
            x, weights, dead = three
            return self._insert(before, qkv_linear, [x] + weights), dead
        return self._insert(before, pack_qkv, (q, k, v)), []

    def _padding_row(self, mask, shape, dtype):
        """The [B, N] additive row of a key-padding mask, made once for every SDPA call that
        takes the same mask (the same node, or the same computation of the same inputs)."""
        key = (_structure(mask), dtype)
        row = self.rows.get(key)
        if row is None:
            with self.graph.inserting_after(mask):
                row = self.graph.call_function(key_padding_row, (mask, shape[0], shape[2], dtype))
            self.rows[key] = row
        return row

    # r + linear(gelu(linear(layer_norm(r)))) -> the fused MLP
    def fused_mlp(self, add):
        for fc2, chain2, r, p2 in _linear_operands(add):
            act, chain1 = _up(p2[0])
            if not _fn(act, GELU) or act.kwargs.get("approximate", _arg(act, 1, "approximate", "none")) != "none" \
                    or len(act.users) != 1:
                continue
            p1 = _linear_parts(act.args[0])
            fc1 = act.args[0]
            if p1 is None or len(fc1.users) != 1:
                continue
            ln = p1[0]
            if not _fn(ln, LAYER_NORM) or ln.args[0] is not r or len(ln.users) != 1:
                continue
            rv = _val(r)
            c = rv.shape[-1] if _static(rv) else None
            shape, g, beta = _arg(ln, 1, "normalized_shape"), _arg(ln, 2, "weight"), _arg(ln, 3, "bias")
            eps = _arg(ln, 4, "eps", 1e-5)
            w1, b1, w2, b2 = p1[1], p1[2], p2[1], p2[2]
            if tuple(shape) != (c,) or g is None or beta is None or b1 is None or b2 is None:
                continue
            hidden = _val(w1).shape[0]
            if c not in fp.MLP_WIDTHS or hidden % fp.MLP_HIDDEN_CHUNK or rv.dim() < 2 or _tensor_why(rv):
                continue
            self.replace(add, "fused_mlp", ln_mlp_residual, (r, g, beta, float(eps), w1, b1, w2, b2),
                         chain2 + [fc2] + chain1 + [act, fc1, ln])
            return True
        return False

    # r + linear(h) -> GEMM with a bias + residual epilogue
    def gemm_residual(self, add):
        for lin, chain, r, (h, w, b) in _linear_operands(add):
            if not isinstance(r, torch.fx.Node):
                continue
            rv, ov, wv = _val(r), _val(lin), _val(w)
            if b is None or not _static(rv) or not _static(ov) or tuple(rv.shape) != tuple(ov.shape) \
                    or rv.dtype != ov.dtype or wv.dim() != 2 or wv.shape[0] % 8 or wv.shape[1] % 8 \
                    or _tensor_why(rv) or _tensor_why(_val(h)):
                continue
            self.replace(add, "gemm_residual", linear_residual, (h, w, b, r), chain + [lin])
            return True
        return False

    def gemm_padded(self, lin):
        x, w, b = _linear_parts(lin)
        wv = _val(w)
        if not _static(wv) or wv.dim() != 2 or (wv.shape[0] % 8 == 0 and wv.shape[1] % 8 == 0):
            return False
        if w.op != "placeholder" and w.op != "get_attr":
            return False  # a product of two activations: only weights are padded, once
        why = _tensor_why(_val(x))
        if why:
            self.left_alone(lin, f"linear {tuple(wv.shape)} not padded: {why}")
            return False
        self.replace(lin, "gemm_padded", padded_linear, (x, w, b), [])
        return True

    def patch_embed(self, conv):
        x, w, b = conv.args[0], _arg(conv, 1, "weight"), _arg(conv, 2, "bias")
        stride, padding = _arg(conv, 3, "stride", 1), _arg(conv, 4, "padding", 0)
        dilation, groups = _arg(conv, 5, "dilation", 1), _arg(conv, 6, "groups", 1)
        xv, wv = _val(x), _val(w)
        if not _static(xv) or not _static(wv) or wv.dim() != 4:
            return False
        pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)  # noqa: E731
        kernel = tuple(wv.shape[2:])
        if pair(stride) != kernel or padding not in (0, (0, 0), [0, 0], "valid") or pair(dilation) != (1, 1) \
                or groups != 1 or xv.shape[2] % kernel[0] or xv.shape[3] % kernel[1] or len(conv.users) != 1:
            return False
        layout, last, dead = self._token_layout(conv)
        if layout is None:
            return False
        why = _tensor_why(xv)
        if why:
            self.left_alone(conv, f"patch embedding not replaced: {why}")
            return False
        self.replace(last, "patch_embed", patch_embed, (layout, x, w, b), dead + [conv])
        return True

    @staticmethod
    def _token_layout(conv):
        """How the convolution's output is laid out as tokens right after it: ("nlc" or "nhwc",
        the node that ends the layout change, the nodes between), or (None, None, None)."""
        u = next(iter(conv.users))
        dims = lambda n: tuple(a for a in n.args[1:]) if not (len(n.args) == 2 and isinstance(  # noqa: E731
            n.args[1], (list, tuple))) else tuple(n.args[1])
        if (_method(u, "permute") or _fn(u, PERMUTE)) and dims(u) == (0, 2, 3, 1):
            return "nhwc", u, []
        if (_method(u, "flatten") or _fn(u, FLATTEN)) and tuple(u.args[1:2]) == (2,) and len(u.users) == 1:
            t = next(iter(u.users))
            if (_method(t, "transpose") or _fn(t, TRANSPOSE)) and tuple(t.args[1:]) in ((1, 2), (2, 1)):
                return "nlc", t, [u]
        if (_method(u, "reshape", "view") or _fn(u, RESHAPE)) and len(u.users) == 1:
            cv, uv = _val(conv), _val(u)
            if _static(uv) and uv.dim() == 3 and tuple(uv.shape) == (cv.shape[0], cv.shape[1],
                                                                        cv.shape[2] * cv.shape[3]):
                t = next(iter(u.users))
                if (_method(t, "permute") or _fn(t, PERMUTE)) and dims(t) == (0, 2, 1):
                    return "nlc", t, [u]
        return None, None, None

    def attention(self, s):
        q, k, v = s.args[0], _arg(s, 1, "key"), _arg(s, 2, "value")
        mask = _arg(s, 3, "attn_mask")
        dropout, causal = _arg(s, 4, "dropout_p", 0.0), _arg(s, 5, "is_causal", False)
        scale, gqa = s.kwargs.get("scale"), s.kwargs.get("enable_gqa", False)
        shape, why = _attention_inputs(q, k, v)
        if shape is None:
            return False
        b, h, n, d = shape
        qv = _val(q)
        label = f"scaled_dot_product_attention {b}x{h}x{n}x{d}"
        why = "dropout, a causal mask or grouped heads" if dropout or causal or gqa else why
        if why:
            self.left_alone(s, f"{label}: {why}")
            return False
        mv = _val(mask)
        if mask is not None and (not _static(mv) or mv.dim() != 4):
            self.left_alone(s, f"{label}: a mask of {mv.dim() if _static(mv) else '?'} dimensions")
            return False
        memo = {}
        if mask is not None and _all_true(mask, memo):
            mask = None  # a mask that masks nothing (built from the shapes alone)
        padding = mask is None or (mv.shape[0] in (1, b) and mv.shape[1] == 1 and mv.shape[3] == n and (
            _query_free(mask, memo)))
        if padding and n <= FMHA_MAX_SEQ:
            if "full_attention" not in self.apply:
                return False
            if torch.is_grad_enabled() and qv.requires_grad:
                # PyTorch's fused attention (flash or memory-efficient) has a backward of its own
                # that keeps its row statistics; ours would recompute the forward to get them.
                self.left_alone(s, f"{label}: while training, PyTorch's fused attention and its own backward "
                                   f"are kept")
                return False
            row = None if mask is None else self._padding_row(mask, (b, h, n, d), qv.dtype)
            qkv, dead = self._qkv(s, q, k, v, (b, h, n, d))
            self.replace(s, "full_attention", sdpa_full, (scale, (b, h, n, d), qkv, mask, row), dead)
            return True
        additive = mask is not None and mv.dtype != torch.bool and mv.shape[1] in (1, h) and \
            tuple(mv.shape[2:]) == (n, n) and b % mv.shape[0] == 0
        if additive and n <= fp.SDPA_WINDOW_MAX_SEQ:
            if "window_attention" not in self.apply:
                return False
            qkv, dead = self._qkv(s, q, k, v, (b, h, n, d))
            self.replace(s, "window_attention", sdpa_window, (scale, (b, h, n, d), qkv, mask), dead)
            return True
        if n <= FMHA_MAX_SEQ:
            self.left_alone(s, f"{label}: a mask of shape {list(mv.shape)} is neither key padding nor an "
                               f"additive [M, heads, N, N] term on up to {fp.SDPA_WINDOW_MAX_SEQ} tokens")
        return False

    def attention_written_out(self, o):
        """softmax(q kᵀ · scale + addends) v as a model writes it out: o = matmul(P, v), P the
        softmax over the last dim (eval dropouts between) of scores that are q·kᵀ (q scaled by a
        number before, or the product after) plus addends, with views between."""
        if len(o.args) != 2:
            return False
        p, chain = _up(o.args[0])
        v = o.args[1]
        if not (_fn(p, SOFTMAX) or _method(p, "softmax")) or not _only_user(p, chain[-1] if chain else o):
            return False
        pv = _val(p)
        dim = _arg(p, 1, "dim")
        if not _static(pv) or dim not in (-1, pv.dim() - 1) or p.kwargs.get("dtype") is not None or any(
                isinstance(a, torch.dtype) for a in p.args):
            return False
        dead = chain + [p]
        cur, adds, scale, seen_scale = p.args[0], [], 1.0, False
        while True:
            if not isinstance(cur, torch.fx.Node) or len(cur.users) != 1:
                return False
            if _fn(cur, ADD) and len(cur.args) == 2 and not cur.kwargs and not seen_scale:
                side = next((i for i in (0, 1) if isinstance(cur.args[i], torch.fx.Node) and _static(
                    _val(cur.args[i])) and tuple(_val(cur.args[i]).shape) == tuple(_val(cur).shape)), None)
                if side is None:
                    return False
                adds.append((cur.args[1 - side], tuple(_val(cur).shape)))
                dead.append(cur)
                cur = cur.args[side]
            elif _method(cur, "view", "reshape") or _fn(cur, RESHAPE):
                dead.append(cur)
                cur = cur.args[0]
            elif (_fn(cur, MUL) or _fn(cur, DIV)) and len(cur.args) == 2:
                num = cur.args[1] if isinstance(cur.args[1], (int, float)) else (
                    cur.args[0] if _fn(cur, MUL) and isinstance(cur.args[0], (int, float)) else None)
                if num is None or not num:
                    return False
                scale *= num if _fn(cur, MUL) else 1.0 / num
                seen_scale = True
                dead.append(cur)
                cur = cur.args[0] if cur.args[1] is num else cur.args[1]
            elif (_fn(cur, MATMUL) or _method(cur, "matmul")) and len(cur.args) == 2:
                break
            else:
                return False
        scores = cur
        qs, kt = scores.args
        dead.append(scores)
        if not ((_method(kt, "transpose") or _fn(kt, TRANSPOSE)) and len(kt.users) == 1 and
                tuple(kt.args[1:]) in ((-2, -1), (-1, -2), (2, 3), (3, 2))):
            return False
        k = kt.args[0]
        dead.append(kt)
        q = qs
        if (_fn(qs, MUL) or _fn(qs, DIV)) and len(qs.args) == 2 and len(qs.users) == 1 and \
                isinstance(qs.args[1], (int, float)) and qs.args[1]:
            scale *= qs.args[1] if _fn(qs, MUL) else 1.0 / qs.args[1]
            q = qs.args[0]
            dead.append(qs)
        shape, why = _attention_inputs(q, k, v)
        if shape is None:
            return False
        b, h, n, d = shape
        label = f"attention written out {b}x{h}x{n}x{d}"
        if why:
            self.left_alone(o, f"{label}: {why}")
            return False
        plan = None
        if adds:
            plan = self._fold_plan(adds, b, h, n)
            if isinstance(plan, str):
                self.left_alone(o, f"{label}: {plan}")
                return False
            if n > fp.SDPA_WINDOW_MAX_SEQ:
                self.left_alone(o, f"{label}: an additive term on {n} tokens (the window fMHA takes up to "
                                   f"{fp.SDPA_WINDOW_MAX_SEQ})")
                return False
            pattern = "window_attention"
        else:
            if n > FMHA_MAX_SEQ:
                return False
            pattern = "full_attention"
        if pattern not in self.apply:
            return False
        qkv, unused = self._qkv(o, q, k, v, (b, h, n, d))
        self.replace(o, pattern, attention_chain, (float(scale), plan, (b, h, n, d), qkv) + tuple(a for a, _ in adds),
                     dead + unused)
        return True

    @staticmethod
    def _fold_plan(adds, b, h, n):
        """How the addends fold into one term over the 4-D batch index modulo M: (M, [(period,
        view shape)]), or why they do not."""
        import math

        periods = []
        for a, shape in adds:
            av = _val(a)
            if not _static(av) or av.is_complex() or av.dtype == torch.bool:
                return "an addend that is not a real tensor"
            if len(shape) < 4 or tuple(shape[-3:]) != (h, n, n) or math.prod(shape[:-3]) != b:
                return f"scores viewed as {list(shape)}"
            full = (1,) * (len(shape) - av.dim()) + tuple(av.shape)
            if len(full) != len(shape) or full[-2:] != (n, n) or full[-3] not in (1, h):
                return f"an addend of shape {list(av.shape)}: not a full [N, N] term per head or for all heads"
            batch, pbatch = full[:-3], tuple(shape[:-3])
            j = next((i for i, s in enumerate(batch) if s != 1), len(batch))
            if any(batch[i] not in (1, pbatch[i]) for i in range(j, len(batch))):
                return f"an addend of shape {list(av.shape)}"
            period = math.prod(pbatch[j:])
            view = (1,) * j + pbatch[j:] + (full[-3], n, n)
            periods.append((period, view))
        m = 1
        for period, _ in periods:
            m = m * period // math.gcd(m, period)
        if b % m:
            return "addends that do not repeat over the batch"
        return m, periods

    @staticmethod
    def _mha_args(m):
        """multi_head_attention_forward's arguments by name: (query, key, value, E, heads, in_w,
        in_b, bias_k, bias_v, add_zero_attn, dropout_p, out_w, out_b, training, key_padding_mask,
        need_weights, attn_mask, use_separate_proj_weight, ...)."""
        names = ("query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight", "in_proj_bias",
                 "bias_k", "bias_v", "add_zero_attn", "dropout_p", "out_proj_weight", "out_proj_bias", "training",
                 "key_padding_mask", "need_weights", "attn_mask", "use_separate_proj_weight")
        defaults = {"training": True, "key_padding_mask": None, "need_weights": True, "attn_mask": None,
                    "use_separate_proj_weight": False}
        a = {n: _arg(m, i, n, defaults.get(n)) for i, n in enumerate(names)}
        a["is_causal"] = m.kwargs.get("is_causal", False)
        return a

    @staticmethod
    def _mha_self_why(a):
        """Why a multi_head_attention_forward call is not plain self-attention in inference, or
        None."""
        x = a["query"]
        if not (a["key"] is x and a["value"] is x):
            return "not self-attention"
        if a["training"] is not False and a["dropout_p"] or a["need_weights"] is not False or \
                a["attn_mask"] is not None or a["bias_k"] is not None or a["bias_v"] is not None or \
                a["add_zero_attn"] or a["use_separate_proj_weight"] or a["is_causal"] or \
                a["in_proj_bias"] is None or a["out_proj_bias"] is None:
            return "attention weights, an attention mask, extra keys or separate projections"
        xv, kv = _val(x), _val(a["key_padding_mask"])
        if not _static(xv) or xv.dim() != 3:
            return "an input that is not [L, B, E]"
        if a["key_padding_mask"] is not None and (not _static(kv) or tuple(kv.shape) != (xv.shape[1], xv.shape[0])):
            return "a key-padding mask that is not [B, L]"
        return None

    def mha(self, m):
        """nn.MultiheadAttention's self-attention -> the fMHA (mha_self)."""
        a = self._mha_args(m)
        xv = _val(a["query"])
        why = self._mha_self_why(a)
        seq, b, e = tuple(xv.shape) if _static(xv) and xv.dim() == 3 else (0, 0, 0)
        heads = a["num_heads"]
        label = f"multi_head_attention_forward {seq}x{b}x{e}, {heads} heads"
        if why is None and (not isinstance(heads, int) or e % heads or e // heads not in FMHA_HEAD_DIMS or
                            seq > FMHA_MAX_SEQ):
            why = f"the fMHA takes head_dim 32/64 up to {FMHA_MAX_SEQ} tokens"
        why = why or _tensor_why(xv)
        if why:
            self.left_alone(m, f"{label}: {why}")
            return False
        self.replace(m, "full_attention", mha_self,
                     (heads, a["query"], a["in_proj_weight"], a["in_proj_bias"], a["out_proj_weight"],
                      a["out_proj_bias"], a["key_padding_mask"]), [])
        return True

    def window_partition(self, p):
        """LayerNorm + shift + window partition ending in the permute `p` (window_partition in the
        module doc)."""
        if not _swaps_window_dims(p):
            return False
        grid = p.args[0]
        gv = _val(grid)
        if not _is_view(grid) or len(grid.users) != 1 or not _static(gv) or gv.shape[2] != gv.shape[4]:
            return False
        b, nh, ws, nw, _, c = gv.shape
        end = p
        while len(end.users) == 1 and _is_view(next(iter(end.users))):
            end = next(iter(end.users))
        ev = _val(end)
        if not _static(ev) or ev.shape[-1] != c:
            return False
        dead = [end]
        node = end
        while node is not p:
            node = node.args[0]
            dead.append(node)
        dead.append(grid)
        cur, order, shift, pad = grid.args[0], [], 0, (0, 0)
        while True:
            if not isinstance(cur, torch.fx.Node) or len(cur.users) != 1:
                return False
            rolled, padded = _roll(cur), _map_pad(cur)
            if rolled is not None and "roll" not in order:
                if rolled[1][0] != rolled[1][1] or not 0 <= -rolled[1][0] < ws:
                    return False
                shift = -rolled[1][0]
                order.append("roll")
                dead.append(cur)
                cur = rolled[0]
            elif padded is not None and "pad" not in order:
                pad = padded[1]
                order.append("pad")
                dead.append(cur)
                cur = padded[0]
            elif _is_view(cur) and "view" not in order:
                order.append("view")
                dead.append(cur)
                cur = cur.args[0]
            else:
                break
        if not _fn(cur, LAYER_NORM):
            return False
        ln = cur
        x, shape, g, beta = ln.args[0], _arg(ln, 1, "normalized_shape"), _arg(ln, 2, "weight"), _arg(ln, 3, "bias")
        eps = _arg(ln, 4, "eps", 1e-5)
        xv = _val(x)
        h, w = nh * ws - pad[0], nw * ws - pad[1]
        label = f"window partition {b}x{h}x{w}x{c}, window {ws}"
        if tuple(shape) != (c,) or g is None or beta is None or not _static(xv) or xv.numel() != b * h * w * c \
                or xv.shape[-1] != c or xv.shape[0] != b:
            return False
        if "view" in order and order.index("view") != len(order) - 1:
            return False  # a view of the map between the shift and the padding
        if shift and any(pad) and order.index("roll") < order.index("pad"):
            self.left_alone(end, f"{label}: padded before the shift (the kernel shifts, then pads)")
            return False
        why = _tensor_why(xv)
        if why:
            self.left_alone(end, f"{label}: {why}")
            return False
        self.replace(end, "window_partition", window_partition,
                     (ws, shift, float(eps), (b, h, w, c), tuple(ev.shape), x, g, beta), dead[1:] + [ln])
        return True

    def window_reverse(self, add):
        """Window reverse + shift + residual ending in the residual `add` (window_reverse in the
        module doc), with the next LayerNorm where one normalises the sum."""
        for side in (0, 1):
            if self._window_reverse(add, side):
                return True
        return False

    def _window_reverse(self, add, side):
        cur, dead = _up(add.args[side])
        dead = list(dead)
        r = add.args[1 - side]
        av, rv = _val(add), _val(r)
        if not isinstance(r, torch.fx.Node) or not _static(av) or not _static(rv) or tuple(av.shape) != tuple(
                rv.shape):
            return False
        order, shift, crop = [], 0, None
        while not _swaps_window_dims(cur):
            if not isinstance(cur, torch.fx.Node) or len(cur.users) != 1:
                return False
            rolled, cropped = _roll(cur), _map_crop(cur)
            if rolled is not None and "roll" not in order:
                if rolled[1][0] != rolled[1][1] or rolled[1][0] < 0:
                    return False
                shift = rolled[1][0]
                order.append("roll")
                dead.append(cur)
                cur = rolled[0]
            elif cropped is not None and "crop" not in order:
                crop = cropped[1]
                order.append("crop")
                dead.append(cur)
                cur = cropped[0]
            elif _is_view(cur):
                dead.append(cur)
                cur = cur.args[0]
            else:
                return False
        p = cur
        if len(p.users) != 1:
            return False
        grid = p.args[0]
        gv = _val(grid)
        if not _is_view(grid) or len(grid.users) != 1 or not _static(gv) or gv.shape[3] != gv.shape[4]:
            return False
        b, nh, nw, ws, _, c = gv.shape
        hp, wp = nh * ws, nw * ws
        h, w = crop if crop is not None else (hp, wp)
        windows = grid.args[0]
        wv = _val(windows)
        label = f"window reverse {b}x{h}x{w}x{c}, window {ws}"
        if not _static(wv) or wv.numel() != b * hp * wp * c or wv.shape[-1] != c or rv.numel() != b * h * w * c or \
                rv.shape[-1] != c or shift >= ws or h > hp or w > wp or hp - h >= ws or wp - w >= ws:
            return False
        if shift and (h, w) != (hp, wp) and order.index("crop") < order.index("roll"):
            self.left_alone(add, f"{label}: shifted before the padding is cropped (the kernel crops, then shifts)")
            return False
        why = _tensor_why(rv) or _tensor_why(wv)
        if why:
            self.left_alone(add, f"{label}: {why}")
            return False
        dead += [p, grid]
        ln = self._normalised_after(add, c)
        args = (ws, shift, (b, h, w, c), windows, r)
        if ln is None:
            self.replace(add, "window_reverse", window_reverse, args, dead)
            return True
        norm, g, beta, eps = ln
        new = self.replace(add, "window_reverse", window_reverse,
                           args + ((g, beta, float(eps), tuple(_val(norm).shape)),), dead)
        with self.graph.inserting_after(new):
            out = self.graph.call_function(operator.getitem, (new, 0))
            normed = self.graph.call_function(operator.getitem, (new, 1))
        out.meta, normed.meta = dict(new.meta), dict(norm.meta)
        new.replace_all_uses_with(out, delete_user_cb=lambda u: u not in (out, normed))
        norm.replace_all_uses_with(normed)
        self.graph.erase_node(norm)
        return True

    def _normalised_after(self, add, c):
        """(the layer_norm node, weight, bias, eps) where one LayerNorm over the channels reads the
        sum (directly or through one view); else None. The MLPs are matched before: a LayerNorm
        the fused MLP took is gone."""
        found = []
        for u in add.users:
            for n in [u] + (list(u.users) if _is_view(u) else []):
                if _fn(n, LAYER_NORM) and tuple(_arg(n, 1, "normalized_shape")) == (c,) and \
                        _arg(n, 2, "weight") is not None and _arg(n, 3, "bias") is not None:
                    found.append(n)
        if len(found) != 1:
            return None
        norm = found[0]
        return norm, _arg(norm, 2, "weight"), _arg(norm, 3, "bias"), _arg(norm, 4, "eps", 1e-5)

    def mha_eager(self, m):
        """A multi_head_attention_forward call the fMHA did not take, back on nn.MultiheadAttention's
        eager fast path where that path would take it (self-attention, even heads)."""
        a = self._mha_args(m)
        if self._mha_self_why(a) is not None or not isinstance(a["num_heads"], int) or a["num_heads"] % 2:
            return
        with self.graph.inserting_before(m):
            new = self.graph.call_function(mha_native, (a["num_heads"], a["query"], a["in_proj_weight"],
                                                        a["in_proj_bias"], a["out_proj_weight"], a["out_proj_bias"],
                                                        a["key_padding_mask"]))
        new.meta = dict(m.meta)
        m.replace_all_uses_with(new)
        self.graph.erase_node(m)
        self.restored = True

    def run(self):
        apply = self.apply
        nodes = list(self.graph.nodes)
        for node in nodes:
            if getattr(node, "_erased", False):
                continue  # taken by an earlier match
            if _fn(node, MHA):
                if not ("full_attention" in apply and self.mha(node)) and self.eager:
                    self.mha_eager(node)
            elif _fn(node, SDPA) and ("full_attention" in apply or "window_attention" in apply):
                self.attention(node)
            elif _fn(node, CONV2D) and "patch_embed" in apply:
                self.patch_embed(node)
            elif _swaps_window_dims(node) and "window_partition" in apply:
                self.window_partition(node)
            elif (_fn(node, MATMUL) or _method(node, "matmul")) and (
                    "full_attention" in apply or "window_attention" in apply):
                self.attention_written_out(node)
        for node in list(self.graph.nodes):
            if _fn(node, ADD) and len(node.args) == 2 and not node.kwargs:
                if "fused_mlp" in apply and self.fused_mlp(node):
                    continue
                if "gemm_residual" in apply:
                    self.gemm_residual(node)
        # After the MLPs: a LayerNorm the fused MLP takes is not fused into the window reverse.
        if "window_reverse" in apply:
            for node in list(self.graph.nodes):
                if not getattr(node, "_erased", False) and _fn(node, ADD) and len(node.args) == 2 and \
                        not node.kwargs:
                    self.window_reverse(node)
        if "gemm_padded" in apply:
            for node in list(self.graph.nodes):
                if _fn(node, LINEAR):
                    self.gemm_padded(node)
        if self.count or self.restored:
            self.graph.lint()
            self.gm.recompile()
        return self.count


def rewrite(gm, model, apply, eager=False):
    """Replaces the computations of `apply` in a graph Dynamo captured; returns how many. `eager`:
    the graph will run as it is (no compiler after it)."""
    # Every replacement has a backward pass, but the fused MLP's recomputes fc1 and its GELU (the
    # kernel keeps the hidden activations on chip): where autograd records, the MLP keeps its
    # GEMMs.
    if torch.is_grad_enabled() and "fused_mlp" in apply and any(
            torch.is_tensor(_val(n)) and _val(n).requires_grad for n in gm.graph.nodes if n.op == "placeholder"):
        apply = set(apply) - {"fused_mlp"}
        fp._left_alone("fused_mlp while training: its backward would recompute fc1 and GELU; the MLP keeps its "
                       "GEMMs", model)
    return _Rewriter(gm, model, apply, eager).run()


class Backend:
    """A TorchDynamo backend: the graph rewritten, then run as it is (mode "") or compiled by
    Inductor as torch.compile(mode=mode) would."""

    def __init__(self, model, mode, options=None, dynamic=None):
        self.model, self.mode = model, mode
        self.rewrites = 0
        self.inductor = None
        if mode:
            self.inductor = torch._TorchCompileInductorWrapper(None if mode == "default" else mode, options, dynamic)

    def __call__(self, gm, example_inputs):
        self.rewrites += rewrite(gm, self.model, set(fp._apply), eager=self.inductor is None)
        if self.inductor is None:
            return gm.forward
        return self.inductor(gm, example_inputs)
