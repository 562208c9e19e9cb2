"""fuseprof's patch layer: runs an unmodified PyTorch program with the bundled kernels swapped in.

Loaded by the sitecustomize beside it (`fuseprof bench -- CMD` puts this folder on PYTHONPATH).
Environment:
  FUSEPROF_PATCH=1            swap the kernels in (the patched side); unset: the baseline side
  FUSEPROF_PATCH_APPLY=...    comma list of advisor patterns to apply (default: all below)
  FUSEPROF_COMPILE=MODE       wrap models from timm.create_model in torch.compile(mode=MODE)
  FUSEPROF_CUDA_GRAPHS=1      capture models from timm.create_model in a CUDA graph per input shape
  FUSEPROF_PATCH_REPORT=PATH  where to write what was patched, left alone, and the numerics

What it replaces, in inference (eval mode, no grad, fp16/bf16 on CUDA); anything else runs the
original code and is reported:
  timm SwinTransformerBlock: LayerNorm + shift + window partition (window_partition), window
    attention with the relative-position bias and shifted-window mask combined once per layer
    (window_attention), window reverse + shift + residual + the next LayerNorm (window_reverse),
    fc2 + bias + residual as one cuBLASLt epilogue (gemm_residual). fc1 + GELU stays as it is:
    cuBLASLt's exact-GELU epilogue is not faster than the separate GELU.
  timm ViT Block: attention through the bundled fMHA on the qkv projection's output, writing
    the projection's input as it lies (full_attention); proj + residual and fc2 + residual as
    cuBLASLt epilogues (gemm_residual).
The kernels are torch.library custom ops (fuseprof::...) with fake implementations, so that
torch.compile traces a patched model and CUDA graphs capture it.

Numerics: the first call of every patched module runs the original code too, on the same
inputs, and records ||patched - original|| / ||original||; the first call of each model from
timm.create_model compares the whole model's output the same way.
"""
import atexit
import json
import os
import sys

import torch
import torch.nn.functional as F

import fuseprof_kernels as fk

PATTERNS = ("window_partition", "window_attention", "window_reverse", "gemm_residual", "full_attention")
# ||patched - original|| / ||original|| a module or model may reach (fp16/bf16 chains).
TOLERANCE = 1e-2

_apply = set(p for p in os.environ.get("FUSEPROF_PATCH_APPLY", ",".join(PATTERNS)).split(",") if p)
_enabled = os.environ.get("FUSEPROF_PATCH", "") == "1"
_report = {"patched": {}, "left_alone": {}, "modules": {}, "models": {}, "ops": "torch.library (Python)"}


# ---- the kernels as custom ops ---------------------------------------------------------------

@torch.library.custom_op("fuseprof::ln_shift_partition", mutates_args=())
def ln_shift_partition(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, window: int, shift: int,
                       eps: float) -> torch.Tensor:
    return fk.ln_shift_partition(x.contiguous(), gamma.contiguous(), beta.contiguous(), window, shift, eps=eps)


@ln_shift_partition.register_fake
def _(x, gamma, beta, window, shift, eps):
    b, h, w, c = x.shape
    nh, nw = -(-h // window), -(-w // window)
    return x.new_empty(b * nh * nw, window * window, c)


@torch.library.custom_op("fuseprof::window_attention", mutates_args=())
def window_attention(qkv: torch.Tensor, add: torch.Tensor, heads: int, seq: int, scale: float) -> torch.Tensor:
    return fk.attention(qkv.contiguous(), heads=heads, seq=seq, add=add, scale=scale)


@window_attention.register_fake
def _(qkv, add, heads, seq, scale):
    tokens = qkv.numel() // qkv.shape[-1]
    return qkv.new_empty(tokens, qkv.shape[-1] // 3)


@torch.library.custom_op("fuseprof::attention", mutates_args=())
def attention(qkv: torch.Tensor, heads: int, seq: int, scale: float) -> torch.Tensor:
    return fk.attention(qkv.contiguous(), heads=heads, seq=seq, scale=scale)


@attention.register_fake
def _(qkv, heads, seq, scale):
    tokens = qkv.numel() // qkv.shape[-1]
    return qkv.new_empty(tokens, qkv.shape[-1] // 3)


@torch.library.custom_op("fuseprof::window_reverse_residual", mutates_args=())
def window_reverse_residual(windows: torch.Tensor, shortcut: torch.Tensor, window: int, shift: int,
                            gamma: torch.Tensor, beta: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return fk.window_reverse_residual(windows.contiguous(), shortcut.contiguous(), window, shift, gamma=gamma,
                                      beta=beta, eps=eps, with_ln=True)


@window_reverse_residual.register_fake
def _(windows, shortcut, window, shift, gamma, beta, eps):
    return torch.empty_like(shortcut), torch.empty_like(shortcut)


@torch.library.custom_op("fuseprof::linear_residual", mutates_args=())
def linear_residual(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return fk.gemm(x.contiguous(), weight, "nk", bias=bias, residual=residual.contiguous(), epilogue="bias_residual")


@linear_residual.register_fake
def _(x, weight, bias, residual):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


# ---- timm's Swin block ------------------------------------------------------------------------

def _rel_err(a, b):
    a, b = a.float(), b.float()
    if not torch.isfinite(a).all():
        return float("nan")
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _fusable(block, x):
    """Why the fused path cannot run this call, or None."""
    if block.training:
        return "training mode: the bundled kernels have no backward pass"
    if torch.is_grad_enabled() and x.requires_grad:
        return "autograd is recording: the bundled kernels have no backward pass"
    if not x.is_cuda or x.dtype not in (torch.float16, torch.bfloat16):
        return f"{x.dtype} on {x.device}: the kernels take fp16/bf16 on CUDA"
    attn = block.attn
    d = attn.qkv.out_features // 3 // attn.num_heads
    if d not in (32, 64):
        return f"head_dim {d}: the window fMHA takes 32 or 64"
    ws = block.window_size
    if ws[0] != ws[1] or ws[0] * ws[1] > 64:
        return f"window {tuple(ws)}: the window kernel takes square windows of up to 64 tokens"
    if block.shift_size[0] != block.shift_size[1]:
        return "unequal shifts"
    if getattr(block, "dynamic_mask", False):
        return "a mask computed per call (dynamic_mask)"
    if not isinstance(block.mlp.act, torch.nn.GELU) or block.mlp.act.approximate != "none":
        return "an MLP activation other than exact GELU"
    if block.attn.proj.bias is None or block.mlp.fc2.bias is None:
        return "a projection without bias"
    return None


def _swin_add(block, dtype):
    """The precombined relative-position bias + shifted-window mask, made once per block (a
    non-persistent buffer, so that torch.compile reads it as the block's own tensor)."""
    add = getattr(block, "_fuseprof_add", None)
    if add is None or add.dtype != dtype:
        attn = block.attn
        bias = attn._get_rel_pos_bias()[0].to(dtype).contiguous()  # [heads, N, N]
        mask = block.attn_mask
        mask = mask.to(dtype).contiguous() if mask is not None else None
        add = fk.attention_add(attn.num_heads, bias.shape[-1], bias=bias, window_mask=mask)
        block.register_buffer("_fuseprof_add", add, persistent=False)
    return add


def _swin_block_fused(block, x):
    b, h, w, c = x.shape
    ws, shift = block.window_size[0], block.shift_size[0]
    attn = block.attn
    n = ws * ws
    eps = block.norm1.eps
    if "window_partition" in _apply:
        windows = torch.ops.fuseprof.ln_shift_partition(x, block.norm1.weight, block.norm1.bias, ws, shift, eps)
    else:
        y = block.norm1(x)
        y = torch.roll(y, shifts=(-shift, -shift), dims=(1, 2)) if shift else y
        ph, pw = (ws - h % ws) % ws, (ws - w % ws) % ws
        y = F.pad(y, (0, 0, 0, pw, 0, ph))
        windows = y.view(b, (h + ph) // ws, ws, (w + pw) // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, n, c)
    if "window_attention" in _apply:
        qkv = F.linear(windows, attn.qkv.weight, attn.qkv.bias).view(-1, attn.qkv.out_features)
        a = torch.ops.fuseprof.window_attention(qkv, _swin_add(block, x.dtype), attn.num_heads, n, float(attn.scale))
        a = F.linear(a, attn.proj.weight, attn.proj.bias).view(-1, n, c)
    else:
        a = attn(windows, mask=block.attn_mask)
    if "window_reverse" in _apply:
        x, x_ln = torch.ops.fuseprof.window_reverse_residual(a, x, ws, shift, block.norm2.weight, block.norm2.bias,
                                                             block.norm2.eps)
    else:
        hp, wp = -(-h // ws) * ws, -(-w // ws) * ws
        y = a.view(b, hp // ws, wp // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)[:, :h, :w, :]
        y = torch.roll(y, shifts=(shift, shift), dims=(1, 2)) if shift else y
        x = x + y
        x_ln = block.norm2(x)
    mlp = block.mlp
    hidden = mlp.norm(mlp.act(mlp.fc1(x_ln.reshape(b, h * w, c))))
    if "gemm_residual" in _apply:
        y = torch.ops.fuseprof.linear_residual(hidden, mlp.fc2.weight, mlp.fc2.bias, x.reshape(b, h * w, c))
    else:
        y = x.reshape(b, h * w, c) + mlp.fc2(hidden)
    return y.reshape(b, h, w, c)


# ---- timm's ViT block ------------------------------------------------------------------------

def _vit_fusable(block, x):
    """Why the fused path cannot run this call of a timm ViT Block, or None."""
    if block.training:
        return "training mode: the bundled kernels have no backward pass"
    if torch.is_grad_enabled() and x.requires_grad:
        return "autograd is recording: the bundled kernels have no backward pass"
    if not x.is_cuda or x.dtype not in (torch.float16, torch.bfloat16) or x.dim() != 3:
        return f"{x.dtype} {tuple(x.shape)} on {x.device}: the kernels take [B, N, C] fp16/bf16 on CUDA"
    attn = block.attn
    if attn.head_dim not in (32, 64) or x.shape[1] > 512:
        return f"head_dim {attn.head_dim}, {x.shape[1]} tokens: the fMHA takes head_dim 32/64 up to 512"
    plain = (torch.nn.Identity,)
    for m in (attn.q_norm, attn.k_norm, getattr(attn, "norm", torch.nn.Identity()), block.ls1, block.ls2):
        if not isinstance(m, plain):
            return f"{type(m).__name__} inside the block"
    if attn.qkv.bias is None or attn.proj.bias is None or block.mlp.fc2.bias is None:
        return "a projection without bias"
    if not all(hasattr(block.mlp, a) for a in ("fc1", "act", "norm", "fc2")):
        return "an MLP other than timm's Mlp"
    return None


def _vit_block_fused(block, x):
    b, n, c = x.shape
    attn = block.attn
    qkv = F.linear(block.norm1(x), attn.qkv.weight, attn.qkv.bias).view(-1, attn.qkv.out_features)
    if "full_attention" in _apply:
        a = torch.ops.fuseprof.attention(qkv, attn.num_heads, n, float(attn.scale))
    else:
        q, k, v = qkv.view(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b * n, -1)
    res = x.reshape(b * n, c)
    if "gemm_residual" in _apply:
        x = torch.ops.fuseprof.linear_residual(a, attn.proj.weight, attn.proj.bias, res)
    else:
        x = res + attn.proj(a)
    mlp = block.mlp
    hidden = mlp.norm(mlp.act(mlp.fc1(block.norm2(x))))
    if "gemm_residual" in _apply:
        x = torch.ops.fuseprof.linear_residual(hidden, mlp.fc2.weight, mlp.fc2.bias, x)
    else:
        x = x + mlp.fc2(hidden)
    return x.view(b, n, c)


def _patch_block_class(cls, fusable, fused, patterns):
    """Replaces `cls.forward` by one that runs `fused` where `fusable` allows, checks each
    instance's first fused call against the original, and runs the original otherwise."""
    if getattr(cls, "_fuseprof_patched", False):
        return
    original = cls.forward

    def forward(self, x, *args, **kwargs):
        if not _enabled or args or any(v is not None for v in kwargs.values()):
            return original(self, x, *args, **kwargs)
        why = fusable(self, x)
        name = getattr(self, "_fuseprof_name", cls.__name__)
        if why is not None:
            names = _report["left_alone"].setdefault(why, [])
            if name not in names:
                names.append(name)
            return original(self, x)
        if name not in _report["modules"] and not torch.compiler.is_compiling() and \
                not torch.cuda.is_current_stream_capturing():
            ref = original(self, x)
            out = fused(self, x)
            err = _rel_err(out, ref)
            _report["modules"][name] = {"class": cls.__name__, "rel_error": err,
                                        "passed": err == err and err <= TOLERANCE}
            return out
        return fused(self, x)

    cls.forward = forward
    cls._fuseprof_patched = True
    for p in patterns:
        if p in _apply:
            _report["patched"].setdefault(p, []).append(f"{cls.__module__}.{cls.__name__}")


# ---- models from timm.create_model: names, whole-model numerics, compile, graphs ---------------

class _Graphed(torch.nn.Module):
    """Replays one CUDA graph per input shape: what torch.compile(mode='reduce-overhead') does,
    for both sides alike."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.graphs = {}

    def forward(self, x):
        key = (tuple(x.shape), x.dtype, x.device)
        g = self.graphs.get(key)
        if g is None:
            static_x = x.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    self.inner(static_x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_y = self.inner(static_x)
            g = self.graphs[key] = (graph, static_x, static_y)
        graph, static_x, static_y = g
        static_x.copy_(x)
        graph.replay()
        return static_y.clone()


def _wrap_model(model, name):
    for path, m in model.named_modules():
        m._fuseprof_name = f"{type(model).__name__}/{path}" if path else type(model).__name__
    compile_mode = os.environ.get("FUSEPROF_COMPILE", "")
    graphs = os.environ.get("FUSEPROF_CUDA_GRAPHS", "") == "1"
    original_forward = model.forward
    state = {"checked": False, "fast": None}

    def forward(*args, **kwargs):
        global _enabled
        if state["fast"] is None:
            fast = original_forward
            if compile_mode:
                fast = torch.compile(original_forward, mode=None if compile_mode == "default" else compile_mode)
            if graphs:
                fast = _Graphed(_Callable(fast))
            state["fast"] = fast
        if _enabled and not state["checked"] and not model.training:
            state["checked"] = True
            _enabled = False
            try:
                ref = original_forward(*args, **kwargs)
            finally:
                _enabled = True
            out = original_forward(*args, **kwargs)
            if torch.is_tensor(out) and torch.is_tensor(ref):
                err = _rel_err(out, ref)
                _report["models"][name] = {"rel_error": err, "passed": err == err and err <= TOLERANCE,
                                           "any_nan": bool(torch.isnan(out).any())}
        return state["fast"](*args, **kwargs)

    model.forward = forward
    return model


class _Callable(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _patch_timm(timm):
    if _enabled:
        for module, cls, fusable, fused, patterns in (
            ("timm.models.swin_transformer", "SwinTransformerBlock", _fusable, _swin_block_fused,
             ("window_partition", "window_attention", "window_reverse", "gemm_residual")),
            ("timm.models.vision_transformer", "Block", _vit_fusable, _vit_block_fused,
             ("full_attention", "gemm_residual")),
        ):
            try:
                import importlib
                _patch_block_class(getattr(importlib.import_module(module), cls), fusable, fused, patterns)
            except Exception as e:  # noqa: BLE001 - an unpatchable timm is reported, not fatal
                _report["left_alone"].setdefault(f"{module}.{cls} not patched: {e}", []).append("timm")
    original = timm.create_model

    def create_model(name, *args, **kwargs):
        return _wrap_model(original(name, *args, **kwargs), name)

    timm.create_model = create_model
    if hasattr(timm, "models"):
        timm.models.create_model = create_model


def install():
    """Patches timm now if it is imported; the sitecustomize beside this file does it on import."""
    if "timm" in sys.modules:
        _patch_timm(sys.modules["timm"])


def _write_report():
    path = os.environ.get("FUSEPROF_PATCH_REPORT")
    if not path:
        return
    _report["enabled"] = _enabled
    _report["apply"] = sorted(_apply)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(_report, f, indent=1)
    os.replace(tmp, path)


atexit.register(_write_report)
