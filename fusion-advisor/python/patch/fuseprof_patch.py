"""fuseprof's patch layer: runs an unmodified PyTorch program with the bundled kernels swapped in.

Loaded by the sitecustomize beside it (`fuseprof bench -- CMD` puts this folder on PYTHONPATH).
Environment:
  FUSEPROF_PATCH=1            swap the kernels in (the patched side); unset: the baseline side
  FUSEPROF_PATCH_APPLY=...    comma list of the patterns below to apply; "default" stands for every
                              pattern but gemm_gelu (the default)
  FUSEPROF_COMPILE=MODE       wrap models (below) in torch.compile(mode=MODE)
  FUSEPROF_CUDA_GRAPHS=1      capture models (below) in a CUDA graph per input shape
  FUSEPROF_PATCH_REPORT=PATH  where to write what was patched, left alone, and the numerics

Patterns, and what each replaces (fp16/bf16 on CUDA; the class patches in inference, the graph
matcher in inference and training, see Training below); anything else runs the original code
and is reported with the reason:
  window_partition  LayerNorm + shift + window partition (timm SwinTransformerBlock; elsewhere
                    through the graph matcher).
  window_attention  timm SwinTransformerBlock: window attention with the relative-position bias
                    and shifted-window mask combined once per block; and any call of
                    F.scaled_dot_product_attention on sequences up to 64 tokens with an additive
                    [M, heads, N, N] term (Hugging Face's Swin passes bias and mask so).
  window_reverse    window reverse + shift + residual + next LayerNorm (timm
                    SwinTransformerBlock; elsewhere through the graph matcher).
  full_attention    timm ViT Block and Hugging Face BertSelfAttention (key-padding mask; the
                    query, key and value weights concatenated once into one projection).
  gemm_residual     fc2 + bias + residual (Swin, ViT), BERT's output projections + residual
                    (before their LayerNorm): one cuBLASLt epilogue.
  fused_mlp         timm SwinTransformerBlock's second half: norm2 (LayerNorm), fc1 + bias, exact
                    GELU, fc2 + bias + residual in one kernel, the [tokens, 4C] hidden tensor kept
                    on chip (widths 96, 128, 192: Swin's first two stages; wider blocks keep the
                    GEMMs).
  gemm_gelu         fc1 + bias + GELU: cuBLASLt's GELU epilogue, which computes GELU's tanh form.
                    Exact (erf) GELU is replaced by it as an approximation (|difference| at most
                    about 5e-4 per element), listed under "approximations" in the report and
                    covered by the numerics check like every other replacement.
  gemm_padded       nn.Linear with in or out features not a multiple of 8: the weight zero-padded
                    once (to [N8, K8]), the input's K padded per call when K is odd.
  patch_embed       timm PatchEmbed (Swin, ViT): its convolution, whose kernel equals its stride,
                    as a patchify copy and one GEMM writing the tokens in the order the model
                    wants (no NCHW -> NHWC copy after it).
Settings, applied only when named (autocast_bf16, tf32, fused_optimizer, cudnn_benchmark,
channels_last, sdpa_cudnn, input_pipeline): the program's own settings that come before kernels,
fuseprof_settings.
The kernels are torch.library operators (fuseprof_patch_ops: fuseprof::*, dispatched from C++,
with fake implementations), so torch.compile traces a patched model and CUDA graphs capture it.

The patterns above name what the class patches below replace in eager code; the graph matcher
(fuseprof_graph) finds the same computations in any model's captured graph, whoever wrote it.

Models: those from timm.create_model, every transformers model (outermost only) and any other
module with parameters at its first outermost call are named (module paths in the report),
checked as a whole, run through the graph matcher on the patched side, and compiled or graphed
when asked. A model the program compiles itself (torch.compile(model), model.compile(),
torch.compile(model.forward), with Inductor) gets the graph matcher as its compiler's backend,
Inductor then compiling the rewritten graph with the program's mode and options; its first call
is checked eagerly before the compiled one.

Training: every kernel has a backward pass (fuseprof_patch_ops). A model in training mode runs
through the graph matcher in eager mode (the class patches take inference calls only; active
dropout between a chain's ops keeps that chain as written); each replaced site's first call is
checked on its output and on its inputs' and parameters' gradients. Under CUDA graphs a model in
training mode runs its own forward (a graph of the forward alone replays no autograd).

Numerics: the first call of every patched module runs the original code too, on the same
inputs, and records ||patched - original|| / ||original||; the first call of each model compares
the whole model's output the same way. A NaN anywhere fails.
"""
import atexit
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

import fuseprof_patch_ops as ops
import fuseprof_settings as settings

# torch.compile as torch defines it: the patch layer's own compilations (the program's calls go
# through _patch_torch's).
_torch_compile = torch.compile

PATTERNS = ("window_partition", "window_attention", "window_reverse", "full_attention", "fused_mlp", "gemm_residual",
            "gemm_gelu", "gemm_padded", "patch_embed") + settings.SETTINGS
# ||patched - original|| / ||original|| a module or model may reach (fp16/bf16 chains).
TOLERANCE = 1e-2
# Devices the fused path runs on. The tests add "cpu", where the operators' CPU reference
# implementations run (any floating dtype).
DEVICES = {"cuda"}

# Applied unless FUSEPROF_PATCH_APPLY says otherwise: the exact replacements. gemm_gelu computes
# exact GELU in its tanh form, so it runs only when named ("default,gemm_gelu").
DEFAULT_PATTERNS = tuple(p for p in PATTERNS if p != "gemm_gelu" and p not in settings.SETTINGS)


def _parse_apply(text):
    names = set()
    for p in (p.strip() for p in text.split(",")):
        if p == "default":
            names.update(DEFAULT_PATTERNS)
        elif p:
            names.add(p)
    return names


_apply = _parse_apply(os.environ.get("FUSEPROF_PATCH_APPLY", "default"))
_enabled = os.environ.get("FUSEPROF_PATCH", "") == "1"
# Settings both sides run with (`bench --baseline`, FUSEPROF_SETTINGS): part of the baseline,
# so switched on whether or not the layer patches.
_both = {s.strip() for s in os.environ.get("FUSEPROF_SETTINGS", "").split(",") if s.strip() in settings.SETTINGS}


def _settings_names():
    """The settings this process switches on: the patched side's own and both sides'."""
    return (_apply if _enabled else set()) | _both
# Set for the duration of each wrapped model's forward (wrap_model): what per-forward reuse
# (BERT's converted key-padding mask) is keyed on.
_forward_token = None
_report = {"patched": {}, "left_alone": {}, "modules": {}, "models": {}, "approximations": {}, "eager_choice": {},
           "ops": None}


def configure(enabled=None, apply=None):
    """Sets what the layer does in this process (the environment sets it at start)."""
    global _enabled, _apply
    if enabled is not None:
        _enabled = enabled
    if apply is not None:
        _apply = set(apply)


def report():
    return _report


# ---- numerics ------------------------------------------------------------------------------

def _tensors(out):
    return [t for t in pytree.tree_leaves(out) if torch.is_tensor(t) and t.is_floating_point()]


def _own_synchronizes():
    """A context in which synchronizes are fuseprof's own, not the program's (the step clock's
    `quiet`, where the step clock runs)."""
    import contextlib

    steps = sys.modules.get("fuseprof_steps")
    return steps.quiet() if steps is not None else contextlib.nullcontext()


def rel_err(out, ref):
    """||out - ref|| / ||ref|| over every floating tensor of two outputs of the same structure;
    NaN when out has a non-finite value where ref is finite, or the structures differ."""
    with _own_synchronizes():
        return _rel_err(out, ref)


def _rel_err(out, ref):
    a, b = _tensors(out), _tensors(ref)
    if len(a) != len(b) or not a:
        return float("nan")
    num = den = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("nan")
        x, y = x.float(), y.float()
        if not torch.isfinite(x).all() and torch.isfinite(y).all():
            return float("nan")
        num += (x - y).pow(2).sum().item()
        den += y.pow(2).sum().item()
    return (num ** 0.5) / max(den ** 0.5, 1e-30)


def passed(err):
    return err == err and err <= TOLERANCE


def _model_check(err, out):
    """A model's first-call verdict: against its float32 self where a setting lowered its
    precision (settings.PRECISION_TOLERANCE, and the report says so), else TOLERANCE."""
    tolerance = settings.PRECISION_TOLERANCE if settings.precision_changed(_apply) else TOLERANCE
    entry = {"rel_error": err, "passed": err == err and err <= tolerance,
             "any_nan": any(bool(torch.isnan(t).any()) for t in _tensors(out))}
    if tolerance != TOLERANCE:
        entry["tolerance"] = tolerance
        entry["against"] = "float32, with the settings off"
    return entry


def _reference(original_forward, args, kwargs):
    """The model's own forward with nothing of fuseprof's: no replacement, and outside the
    autocast a setting put around it."""
    global _enabled
    _enabled = False
    try:
        if settings.autocast_is_ours():
            with torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):
                return original_forward(*args, **kwargs)
        return original_forward(*args, **kwargs)
    finally:
        _enabled = True


def _note(section, key, name):
    """Adds name to the report's list section[key], once."""
    names = _report[section].setdefault(key, [])
    if name not in names:
        names.append(name)


def _left_alone(why, name):
    _note("left_alone", why, name)


TANH_GELU = "exact GELU computed in its tanh form (cuBLASLt GELU epilogue)"


def _inference_input(module, x):
    """Why the fused path cannot take this call (mode, autograd, device, dtype), or None."""
    if module.training or (torch.is_grad_enabled() and x.requires_grad):
        return "training mode: the class patches take inference calls; the graph matcher takes this one"
    return _device_dtype_why(x)


def _device_dtype_why(t):
    """Why the kernels cannot take a tensor on this device and of this dtype, or None."""
    if t.device.type not in DEVICES:
        return f"a tensor on {t.device.type}: the kernels run on CUDA"
    if t.device.type == "cuda" and t.dtype not in (torch.float16, torch.bfloat16):
        return f"{t.dtype} on CUDA: the kernels take fp16/bf16"
    if not t.is_floating_point():
        return f"a {t.dtype} tensor"
    return None


def _patch_forward(cls, fusable, fused, patterns):
    """Replaces `cls.forward` by one that runs `fused` where `fusable` allows (for the patterns
    applied), checks each instance's first fused call against the original, and runs the
    original otherwise. fusable(module, *args, **kwargs) -> a reason (reported), "" (not a
    candidate, not reported) or None (fusable)."""
    if getattr(cls, "_fuseprof_patched", False):
        return
    original = cls.forward
    where = f"{cls.__module__}.{cls.__name__}"

    def forward(self, *args, **kwargs):
        applied = [p for p in patterns if p in _apply]
        if not _enabled or not applied:
            return original(self, *args, **kwargs)
        if ops.DISPATCH is None:
            _register_ops()
        name = getattr(self, "_fuseprof_name", cls.__name__)
        why = fusable(self, *args, **kwargs)
        if why == "":  # not a candidate at all (nothing to replace): not reported
            return original(self, *args, **kwargs)
        if why is not None:
            _left_alone(why, name)
            return original(self, *args, **kwargs)
        for p in applied:
            _note("patched", p, where)
        if name not in _report["modules"] and not torch.compiler.is_compiling() and \
                not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
            ref = original(self, *args, **kwargs)
            out = fused(self, *args, **kwargs)
            err = rel_err(out, ref)
            _report["modules"][name] = {"class": cls.__name__, "rel_error": err, "passed": passed(err)}
            return out
        return fused(self, *args, **kwargs)

    forward.__wrapped__ = original
    cls.forward = forward
    cls._fuseprof_patched = True


def _buffer(module, name, make, key):
    """A tensor derived from the module's weights (combined mask, concatenated or padded weight),
    made once and kept as a non-persistent buffer (torch.compile reads it as the module's own);
    remade when key() (the source weights' identity and dtype) changes. While torch.compile
    traces, an existing buffer is taken as it is (the eager first call made it)."""
    if torch.compiler.is_compiling() and getattr(module, name, None) is not None:
        return getattr(module, name)
    k = key()
    if getattr(module, name + "_key", None) != k or getattr(module, name, None) is None:
        with torch.no_grad():
            t = make()
        module.register_buffer(name, t, persistent=False)
        object.__setattr__(module, name + "_key", k)
    return getattr(module, name)


def _wkey(*tensors):
    return tuple((t.data_ptr(), t.dtype, t.device, tuple(t.shape)) for t in tensors if t is not None)


def _gelu_fc1(mlp_fc1, act, x, where):
    """fc1 + GELU, through the GELU epilogue when gemm_gelu applies."""
    if "gemm_gelu" in _apply and isinstance(act, torch.nn.GELU) and mlp_fc1.bias is not None:
        if act.approximate == "none":
            _note("approximations", TANH_GELU, where)
        return torch.ops.fuseprof.linear_gelu_tanh(x, mlp_fc1.weight, mlp_fc1.bias)
    return act(mlp_fc1(x))


# ---- timm's Swin block ------------------------------------------------------------------------

def _swin_fusable(block, x, *args, **kwargs):
    if args or any(v is not None for v in kwargs.values()):
        return "called with more than the input"
    why = _inference_input(block, x)
    if why:
        return why
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
    if block.attn.qkv.bias is None or block.attn.proj.bias is None or block.mlp.fc2.bias is None:
        return "a projection without bias"
    if not isinstance(block.mlp.norm, torch.nn.Identity):
        return f"{type(block.mlp.norm).__name__} inside the MLP"
    return None


def _swin_add(block, dtype):
    """The precombined relative-position bias + shifted-window mask of a block."""
    attn = block.attn

    def make():
        bias = attn._get_rel_pos_bias()[0].to(dtype).contiguous()  # [heads, N, N]
        mask = block.attn_mask
        mask = mask.to(dtype).contiguous() if mask is not None else None
        return ops.attention_add(attn.num_heads, bias.shape[-1], bias, mask)

    return _buffer(block, "_fuseprof_add", make, lambda: (dtype, attn.relative_position_bias_table.data_ptr()))


# Widths mlp.cu is built for, and the hidden chunk its width must be a multiple of.
MLP_WIDTHS = (96, 128, 192)
MLP_HIDDEN_CHUNK = 64


def _mlp_fusable(mlp, c):
    """True when timm's Mlp is fc1 -> exact GELU -> fc2 with biases, at a width the fused MLP
    kernel is built for (its dropouts are identities in inference)."""
    act = getattr(mlp, "act", None)
    fc1, fc2 = getattr(mlp, "fc1", None), getattr(mlp, "fc2", None)
    return (isinstance(act, torch.nn.GELU) and act.approximate == "none"
            and isinstance(fc1, torch.nn.Linear) and isinstance(fc2, torch.nn.Linear)
            and fc1.bias is not None and fc2.bias is not None
            and c in MLP_WIDTHS and fc1.in_features == c and fc2.out_features == c
            and fc1.out_features % MLP_HIDDEN_CHUNK == 0
            and isinstance(getattr(mlp, "norm", torch.nn.Identity()), torch.nn.Identity))


def _affine_layer_norm(norm, c):
    """True when norm is nn.LayerNorm over the last dimension c, with its scale and shift."""
    return (isinstance(norm, torch.nn.LayerNorm) and tuple(norm.normalized_shape) == (c,)
            and norm.weight is not None and norm.bias is not None)


def _swin_block_fused(block, x):
    b, h, w, c = x.shape
    ws, shift = block.window_size[0], block.shift_size[0]
    attn = block.attn
    n = ws * ws
    if "window_partition" in _apply:
        windows = torch.ops.fuseprof.ln_shift_partition(x, block.norm1.weight, block.norm1.bias, ws, shift,
                                                        block.norm1.eps)
    else:
        y = block.norm1(x)
        y = torch.roll(y, shifts=(-shift, -shift), dims=(1, 2)) if shift else y
        windows = ops.partition(y, ws)
    if "window_attention" in _apply:
        qkv = F.linear(windows, attn.qkv.weight, attn.qkv.bias).view(-1, attn.qkv.out_features)
        a = torch.ops.fuseprof.window_attention(qkv, _swin_add(block, x.dtype), attn.num_heads, n, float(attn.scale))
        a = F.linear(a, attn.proj.weight, attn.proj.bias).view(-1, n, c)
    else:
        a = attn(windows, mask=block.attn_mask)
    mlp, norm2 = block.mlp, block.norm2
    fuse_mlp = "fused_mlp" in _apply and _mlp_fusable(mlp, c) and _affine_layer_norm(norm2, c)
    if "window_reverse" in _apply:
        if fuse_mlp:  # the fused MLP normalises its input itself
            x = torch.ops.fuseprof.window_reverse_add(a, x, ws, shift)
        else:
            x, x_ln = torch.ops.fuseprof.window_reverse_residual(a, x, ws, shift, norm2.weight, norm2.bias, norm2.eps)
    else:
        y = ops.reverse(a, ws, b, h, w)
        y = torch.roll(y, shifts=(shift, shift), dims=(1, 2)) if shift else y
        x = x + y
        x_ln = None if fuse_mlp else norm2(x)
    if fuse_mlp:
        y = torch.ops.fuseprof.ln_mlp_residual(x.reshape(b, h * w, c), norm2.weight, norm2.bias, float(norm2.eps),
                                               mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight, mlp.fc2.bias)
        return y.reshape(b, h, w, c)
    hidden = _gelu_fc1(mlp.fc1, mlp.act, x_ln.reshape(b, h * w, c), getattr(block, "_fuseprof_name", "Swin"))
    if "gemm_residual" in _apply:
        y = torch.ops.fuseprof.linear_residual(hidden, mlp.fc2.weight, mlp.fc2.bias, x.reshape(b, h * w, c))
    else:
        y = x.reshape(b, h * w, c) + mlp.fc2(hidden)
    return y.reshape(b, h, w, c)


# ---- timm's ViT block ------------------------------------------------------------------------

def _vit_fusable(block, x, *args, **kwargs):
    if args or any(v is not None for v in kwargs.values()):
        return "called with more than the input (an attention mask)"
    why = _inference_input(block, x)
    if why:
        return why
    if x.dim() != 3:
        return f"input {tuple(x.shape)}: the block takes [B, N, C]"
    attn = block.attn
    if attn.head_dim not in (32, 64) or x.shape[1] > 512:
        return f"head_dim {attn.head_dim}, {x.shape[1]} tokens: the fMHA takes head_dim 32/64 up to 512"
    for m in (attn.q_norm, attn.k_norm, getattr(attn, "norm", torch.nn.Identity()), block.ls1, block.ls2,
              getattr(block.mlp, "norm", torch.nn.Identity())):
        if not isinstance(m, torch.nn.Identity):
            return f"{type(m).__name__} inside the block"
    if attn.qkv.bias is None or attn.proj.bias is None or block.mlp.fc2.bias is None:
        return "a projection without bias"
    if not all(hasattr(block.mlp, a) for a in ("fc1", "act", "fc2")):
        return "an MLP other than timm's Mlp"
    return None


def _vit_block_fused(block, x):
    b, n, c = x.shape
    attn = block.attn
    qkv = F.linear(block.norm1(x), attn.qkv.weight, attn.qkv.bias).view(-1, attn.qkv.out_features)
    if "full_attention" in _apply:
        a = torch.ops.fuseprof.attention(qkv, attn.num_heads, n, float(attn.scale), None)
    else:
        q, k, v = qkv.view(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b * n, -1)
    res = x.reshape(b * n, c)
    if "gemm_residual" in _apply:
        x = torch.ops.fuseprof.linear_residual(a, attn.proj.weight, attn.proj.bias, res)
    else:
        x = res + attn.proj(a)
    mlp = block.mlp
    hidden = _gelu_fc1(mlp.fc1, mlp.act, block.norm2(x), getattr(block, "_fuseprof_name", "ViT"))
    if "gemm_residual" in _apply:
        x = torch.ops.fuseprof.linear_residual(hidden, mlp.fc2.weight, mlp.fc2.bias, x)
    else:
        x = x + mlp.fc2(hidden)
    return x.view(b, n, c)


# ---- Hugging Face BERT -----------------------------------------------------------------------

_BERT_PASSIVE = {"output_attentions": (False, None), "head_mask": (None,), "encoder_hidden_states": (None,),
                 "encoder_attention_mask": (None,), "past_key_value": (None,), "past_key_values": (None,),
                 "cache": (None,), "cache_position": (None,), "position_ids": (None,)}


def _key_padding_why(mask, b, s):
    """Why BERT's attention mask ([B, 1, 1, S] or [B, 1, S, S] as an encoder builds it, additive
    or boolean) is not a key-padding mask the fMHA takes, or None."""
    if mask is not None and (mask.dim() != 4 or mask.shape[0] != b or mask.shape[1] != 1 or mask.shape[-1] != s):
        return f"attention mask {tuple(mask.shape)}: not a key-padding mask"
    return None


def _key_padding(mask, b, s, dtype):
    """The [B, S] additive key-padding mask of BERT's attention mask (None for None).

    Every layer of one forward of a wrapped model gets the same mask tensor, so the conversion
    (five small kernels and their launches, which a host-bound eager model pays per layer) is
    kept on the mask for the rest of that forward and reused by the later layers. Not outside a
    wrapped model's forward (nothing bounds the mask's lifetime there), nor while torch.compile
    traces or a CUDA graph captures: there the conversion belongs in the traced or captured work,
    since the mask's contents may change between calls without a new tensor."""
    if mask is None:
        return None
    # is_compiling() first: torch.compile must not see (and guard on) the per-forward token.
    cache = not torch.compiler.is_compiling() and _forward_token is not None and not (
        mask.is_cuda and torch.cuda.is_current_stream_capturing())
    if cache:
        key = (_forward_token, dtype)
        kept = getattr(mask, "_fuseprof_kpm", None)
        if kept is not None and kept[0] == key:
            return kept[1]
    row = ops.key_padding_row(mask, b, s, dtype)
    if cache:
        mask._fuseprof_kpm = (key, row)
    return row


def _bert_attn_fusable(attn, hidden_states, attention_mask=None, *args, **kwargs):
    if args or any(v is not None and v not in _BERT_PASSIVE.get(k, ()) for k, v in kwargs.items()):
        return "cross attention, a cache, a head mask or attention weights asked for"
    why = _inference_input(attn, hidden_states)
    if why:
        return why
    if getattr(attn, "is_decoder", False) or getattr(attn, "is_causal", False):
        return "a decoder (causal) attention"
    if getattr(attn, "position_embedding_type", "absolute") != "absolute":
        return "relative position embeddings"
    d, s = attn.attention_head_size, hidden_states.shape[1]
    if hidden_states.dim() != 3 or d not in (32, 64) or s > 512:
        return f"head size {d}, {s} tokens: the fMHA takes head_dim 32/64 up to 512"
    return _key_padding_why(attention_mask, hidden_states.shape[0], s)


def _bert_attn_fused(attn, hidden_states, attention_mask=None, *args, **kwargs):
    b, s, _ = hidden_states.shape
    q, k, v = attn.query, attn.key, attn.value
    w = _buffer(attn, "_fuseprof_qkv_w", lambda: torch.cat([q.weight, k.weight, v.weight]).contiguous(),
                lambda: _wkey(q.weight, k.weight, v.weight))
    bias = _buffer(attn, "_fuseprof_qkv_b", lambda: torch.cat([q.bias, k.bias, v.bias]).contiguous(),
                   lambda: _wkey(q.bias, k.bias, v.bias))
    qkv = F.linear(hidden_states, w, bias).view(b * s, -1)
    kpm = _key_padding(attention_mask, b, s, hidden_states.dtype)
    scale = float(getattr(attn, "scaling", attn.attention_head_size ** -0.5))
    out = torch.ops.fuseprof.attention(qkv, attn.num_attention_heads, s, scale, kpm).view(b, s, -1)
    # The original returns (context,) or (context, weights): keep its arity.
    return (out,) + (None,) * (getattr(attn, "_fuseprof_nret", 2) - 1)


def _bert_out_fusable(mod, hidden_states, input_tensor, *args, **kwargs):
    if args or kwargs:
        return "called with more than (hidden_states, input_tensor)"
    why = _inference_input(mod, hidden_states)
    if why:
        return why
    if mod.dense.bias is None:
        return "a projection without bias"
    return None


def _bert_out_fused(mod, hidden_states, input_tensor):
    y = torch.ops.fuseprof.linear_residual(hidden_states, mod.dense.weight, mod.dense.bias, input_tensor)
    return mod.LayerNorm(y)


def _bert_intermediate_fusable(mod, hidden_states, *args, **kwargs):
    if args or kwargs:
        return "called with more than hidden_states"
    why = _inference_input(mod, hidden_states)
    if why:
        return why
    act = mod.intermediate_act_fn
    if type(act).__name__ not in ("GELUActivation", "GELU") or mod.dense.bias is None:
        return f"activation {type(act).__name__}: the epilogue takes GELU"
    return None


def _bert_intermediate_fused(mod, hidden_states):
    _note("approximations", TANH_GELU, getattr(mod, "_fuseprof_name", "BertIntermediate"))
    return torch.ops.fuseprof.linear_gelu_tanh(hidden_states, mod.dense.weight, mod.dense.bias)


def _patch_bert(module):
    for attn_cls in ("BertSelfAttention", "BertSdpaSelfAttention"):
        cls = getattr(module, attn_cls, None)
        if cls is not None and "forward" in cls.__dict__:
            _record_arity(cls)
            _patch_forward(cls, _bert_attn_fusable, _bert_attn_fused, ("full_attention",))
    for out_cls in ("BertSelfOutput", "BertOutput"):
        _patch_forward(getattr(module, out_cls), _bert_out_fusable, _bert_out_fused, ("gemm_residual",))
    _patch_forward(module.BertIntermediate, _bert_intermediate_fusable, _bert_intermediate_fused, ("gemm_gelu",))


def _record_arity(cls):
    """Wraps the original forward so that the fused one returns a tuple of the same length."""
    original = cls.forward

    def forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if isinstance(out, tuple):
            object.__setattr__(self, "_fuseprof_nret", len(out))
        return out

    cls.forward = forward


# ---- nn.Linear on odd sizes ------------------------------------------------------------------

def _linear_fusable(lin, x, *args, **kwargs):
    if lin.in_features % 8 == 0 and lin.out_features % 8 == 0:
        return ""  # nothing to pad: not a candidate, not reported
    return _inference_input(lin, x)


def _linear(lin, x):
    n, k = lin.out_features, lin.in_features
    n8, k8 = -(-n // 8) * 8, -(-k // 8) * 8
    w = _buffer(lin, "_fuseprof_wpad", lambda: F.pad(lin.weight, (0, k8 - k, 0, n8 - n)).contiguous(),
                lambda: _wkey(lin.weight))
    b = None
    if lin.bias is not None:
        b = _buffer(lin, "_fuseprof_bpad", lambda: F.pad(lin.bias, (0, n8 - n)).contiguous(), lambda: _wkey(lin.bias))
    return torch.ops.fuseprof.linear(x, w, b, n)


def _patch_linear():
    _patch_forward(torch.nn.Linear, _linear_fusable, _linear, ("gemm_padded",))


# ---- SDPA on short sequences with an additive term: the window fMHA, whoever calls it ---------

# The persistent window kernel's longest sequence.
SDPA_WINDOW_MAX_SEQ = 64


def _sdpa_window_why(q, k, v, attn_mask, dropout_p, is_causal, extra):
    """Why this SDPA call is not the window fMHA's computation (a reason, reported), "" (not a
    candidate: long sequences, no additive term), or None."""
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        return ""
    b, h, n, d = q.shape
    if n > SDPA_WINDOW_MAX_SEQ or attn_mask is None or attn_mask.dtype == torch.bool:
        return ""
    if extra or dropout_p or is_causal:
        return "SDPA with dropout, a causal mask or other arguments"
    m = attn_mask.shape[0] if attn_mask.dim() == 4 else 0
    if attn_mask.dim() != 4 or attn_mask.shape[1] not in (1, h) or tuple(attn_mask.shape[2:]) != (n, n) \
            or b % m:
        return f"SDPA with an additive term of shape {list(attn_mask.shape)}: the window fMHA takes [M, heads, N, N]"
    if d not in (32, 64):
        return f"SDPA with head_dim {d}: the window fMHA is built for 32 and 64"
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return "training mode: the class patches take inference calls; the graph matcher takes this one"
    return _device_dtype_why(q)


def _sdpa_window(q, k, v, attn_mask, scale):
    """The window fMHA on q, k, v [B, H, N, d] with the additive term [M, 1 or H, N, N], in
    SDPA's layout."""
    d = q.shape[-1]
    return ops.window_sdpa(ops.pack_qkv(q, k, v), attn_mask, q.shape, d ** -0.5 if scale is None else scale)


def _patch_sdpa():
    """Replaces F.scaled_dot_product_attention by one that runs the window fMHA where the call
    is its computation (short sequences, an additive [M, heads, N, N] term: a relative-position
    bias, or bias and shifted-window mask combined, as Hugging Face's Swin passes them), checks
    the first call of each shape against the original, and runs the original otherwise."""
    original = F.scaled_dot_product_attention
    if getattr(original, "_fuseprof", False):
        return

    checked = set()  # the call signatures already checked against the original

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **extra):
        if not _enabled or "window_attention" not in _apply:
            return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **extra)
        if ops.DISPATCH is None:
            _register_ops()
        why = _sdpa_window_why(query, key, value, attn_mask, dropout_p, is_causal, extra)
        if why is not None:
            if why:
                _left_alone(why, "scaled_dot_product_attention %s" % "x".join(map(str, query.shape)))
            return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **extra)
        signature = (query.shape, attn_mask.shape, query.dtype)
        if signature not in checked and not torch.compiler.is_compiling() and \
                not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
            checked.add(signature)
            b, h, n, d = query.shape
            name = f"scaled_dot_product_attention {b}x{h}x{n}x{d} + [{attn_mask.shape[0]}, " \
                   f"{attn_mask.shape[1]}, {n}, {n}]"
            _note("patched", "window_attention", "torch.nn.functional.scaled_dot_product_attention")
            ref = original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale)
            out = _sdpa_window(query, key, value, attn_mask, scale)
            err = rel_err(out, ref)
            _report["modules"][name] = {"class": "scaled_dot_product_attention", "rel_error": err,
                                        "passed": passed(err)}
            return out
        return _sdpa_window(query, key, value, attn_mask, scale)

    sdpa._fuseprof = True
    sdpa.__wrapped__ = original
    F.scaled_dot_product_attention = sdpa


# ---- timm's PatchEmbed: a convolution whose kernel equals its stride is a GEMM ---------------

def _patch_embed_fusable(pe, x, *args, **kwargs):
    if args or kwargs:
        return "called with more than the image"
    why = _inference_input(pe, x)
    if why:
        return why
    conv = pe.proj
    if not isinstance(conv, torch.nn.Conv2d) or conv.kernel_size != conv.stride or conv.padding != (0, 0) or \
            conv.dilation != (1, 1) or conv.groups != 1 or conv.padding_mode != "zeros":
        return "a projection other than a convolution with kernel = stride"
    p = conv.kernel_size
    if x.dim() != 4 or x.shape[2] % p[0] or x.shape[3] % p[1]:
        return f"image {tuple(x.shape)} not a multiple of the patch size {p}"
    fmt = getattr(pe, "output_fmt", None)
    if not pe.flatten and str(getattr(fmt, "value", fmt)) not in ("NHWC",):
        return f"output format {fmt}"
    return None


def _patch_embed_fused(pe, x):
    """Patchify (one copy of the image) and one GEMM that writes tokens in NHWC / NLC order,
    instead of the convolution and the NCHW -> NHWC copy after it."""
    conv = pe.proj
    b, c, h, w = x.shape
    ph, pw = conv.kernel_size
    gh, gw = h // ph, w // pw
    patches = x.reshape(b, c, gh, ph, gw, pw).permute(0, 2, 4, 1, 3, 5).reshape(b * gh * gw, c * ph * pw)
    k = c * ph * pw
    k8 = -(-k // 8) * 8
    wt = _buffer(pe, "_fuseprof_wgemm",
                 lambda: F.pad(conv.weight.reshape(conv.out_channels, k), (0, k8 - k)).contiguous(),
                 lambda: _wkey(conv.weight))
    y = torch.ops.fuseprof.linear(patches, wt, conv.bias, conv.out_channels)
    y = y.view(b, gh * gw, -1) if pe.flatten else y.view(b, gh, gw, -1)
    return pe.norm(y)


# ---- models: names, whole-model numerics, compile, graphs ------------------------------------

class _Graphed:
    """Replays one CUDA graph per input signature (shapes, dtypes, devices of every tensor
    argument): what torch.compile(mode='reduce-overhead') does, for both sides alike."""

    def __init__(self, fn):
        self.fn = fn
        self.graphs = {}

    def __call__(self, *args, **kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        key = (str(spec),) + tuple((tuple(t.shape), t.dtype, str(t.device)) if torch.is_tensor(t) else repr(t)
                                   for t in flat)
        g = self.graphs.get(key)
        if g is None:
            static = [t.clone() if torch.is_tensor(t) else t for t in flat]
            a, kw = pytree.tree_unflatten(static, spec)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    self.fn(*a, **kw)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self.fn(*a, **kw)
            g = self.graphs[key] = (graph, static, out)
        graph, static, out = g
        for s, t in zip(static, flat):
            if torch.is_tensor(t):
                s.copy_(t)
        graph.replay()
        return pytree.tree_map(lambda t: t.clone() if torch.is_tensor(t) else t, out)


# The patterns the graph matcher (fuseprof_graph) finds in any model's captured forward.
GRAPH_PATTERNS = {"fused_mlp", "gemm_residual", "gemm_padded", "patch_embed", "full_attention", "window_attention"}


def _fast_forward(model, name, original_forward, compile_mode, graphs, capture):
    """The forward the timed steps run: on the patched side, captured by TorchDynamo and
    rewritten by the graph matcher when `capture` (then run as it is or compiled by Inductor);
    else compiled as asked. In a CUDA graph per input signature when `graphs`. Returns
    (forward, the graph matcher's backend or None)."""
    import fuseprof_graph

    backend = None
    fast = original_forward
    if capture:
        backend = fuseprof_graph.Backend(name, compile_mode)
        fast = _torch_compile(original_forward, backend=backend, dynamic=None if compile_mode else False)
    elif compile_mode:
        fast = _torch_compile(original_forward, mode=None if compile_mode == "default" else compile_mode)
    if graphs:
        fast = _Graphed(fast)
    return fast, backend


def _time_alternately(own, captured, rounds, warmup=False):
    """(own ms, captured ms): the median of `rounds` synchronized calls of each, alternating,
    after one untimed call of each where `warmup`."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()

    def once(fn):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t

    own_s, captured_s = [], []
    with _own_synchronizes():
        if warmup:
            once(own)
            once(captured)
        for _ in range(rounds):
            own_s.append(once(own))
            captured_s.append(once(captured))
    return sorted(own_s)[rounds // 2] * 1e3, sorted(captured_s)[rounds // 2] * 1e3


class _kept_buffers:
    """Within: the model's buffers (BatchNorm's running statistics) are put back on exit, so that
    calls made to check or time the model leave it as the program's own calls find it."""

    def __init__(self, model):
        self.buffers = [(b, b.detach().clone()) for b in model.buffers()] if isinstance(model, torch.nn.Module) \
            else []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        with torch.no_grad():
            for b, saved in self.buffers:
                b.copy_(saved)


def _captured_is_faster(model, name, own, captured, args, kwargs, rounds=3):
    """Whether, in eager mode, the graph the matcher rewrote runs faster than the model's own
    forward (both with the class patches): a captured graph runs each op from Python without
    the modules around it, but TorchDynamo may split it at graph breaks and drops the eager fast
    paths it cannot trace, so it can cost the host more than it saves the GPU. Timed alternately
    on the program's inputs, the median of `rounds` calls each, synchronized. The slower one is
    not kept, and the report says which ran and why."""
    own_ms, captured_ms = _time_alternately(lambda: own(*args, **kwargs), lambda: captured(*args, **kwargs), rounds)
    faster = captured_ms <= own_ms * 1.02
    _report["eager_choice"][name] = {"own_ms": own_ms, "captured_ms": captured_ms, "captured": faster}
    if not faster:
        _left_alone(f"eager mode: the rewritten graph ran slower than the model's own forward on the first calls "
                    f"({captured_ms:.2f} vs {own_ms:.2f} ms): the model runs its own forward, with the class patches",
                    name)
    return faster


def _captured_trains_faster(model, name, own, captured, args, kwargs, rounds=3):
    """_captured_is_faster for a training call: each timed call (after one untimed call of each:
    a first backward allocates, picks its GEMM and convolution algorithms and grows the caching
    allocator) is the forward and the backward of the output's sum to the parameters
    (torch.autograd.grad: nothing accumulates into .grad), outside the program's random stream,
    the model's buffers put back afterwards. A training step's host time can outweigh the GPU
    time the replacements save: the slower path is not kept, and the report says which ran and
    why."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params or not torch.is_grad_enabled():
        return True
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []

    def step(fn):
        out = [x for x in pytree.tree_leaves(fn(*args, **kwargs)) if torch.is_tensor(x) and x.requires_grad]
        if out:
            torch.autograd.grad(sum(x.float().sum() for x in out), params, allow_unused=True)

    with _kept_buffers(model), torch.random.fork_rng(devices=devices):
        own_ms, captured_ms = _time_alternately(lambda: step(own), lambda: step(captured), rounds, warmup=True)
    faster = captured_ms <= own_ms * 1.02
    _report["eager_choice"][name] = {"own_ms": own_ms, "captured_ms": captured_ms, "captured": faster,
                                     "training": True}
    if not faster:
        _left_alone(f"eager training: the rewritten graph's forward and backward ran slower than the model's own "
                    f"on the first calls ({captured_ms:.2f} vs {own_ms:.2f} ms): the model trains through its own "
                    f"forward", name)
    return faster


def _check_training_call(name, original_forward, fast, backend, args, kwargs):
    """The first training call, checked: the model's own forward (no patches, no autograd) and the
    rewritten graph run by `fast` (autograd recording, so that each replaced site checks its
    gradients too) on the same inputs and the same random numbers (dropout), both outside the
    program's random stream, which the real call then uses as it would have; the model's buffers
    (BatchNorm's running statistics) are put back after both."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    # The real call then updates running statistics once, as it would have.
    with _kept_buffers(getattr(original_forward, "__self__", None)):
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(0)
            with torch.no_grad():
                ref = _reference(original_forward, args, kwargs)
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(0)
            out = fast(*args, **kwargs)
    _report["models"][name] = dict(_model_check(rel_err(out, ref), out), training=True,
                                   graph_rewrites=backend.rewrites, graph_kept=True)


def wrap_model(model, name):
    """Names the model's modules, checks its first patched call against the unpatched model,
    and compiles or graphs it as the environment asks. Idempotent.

    On the patched side the model's forward goes through the graph matcher (fuseprof_graph) as
    well as the class patches. In eager mode its captured graph is kept only where the matcher
    replaced something in it; otherwise the model runs its own forward, as on the baseline side."""
    if getattr(model, "_fuseprof_wrapped", False):
        return model
    model._fuseprof_wrapped = True
    for path, m in model.named_modules():
        object.__setattr__(m, "_fuseprof_name", f"{type(model).__name__}/{path}" if path else type(model).__name__)
    compile_mode = os.environ.get("FUSEPROF_COMPILE", "")
    graphs = os.environ.get("FUSEPROF_CUDA_GRAPHS", "") == "1"
    if _settings_names():
        settings.prepare(model, _settings_names())
    original_forward = model.forward
    state = {"checked": False, "train_checked": False, "fast": None, "backend": None}

    def forward(*args, **kwargs):
        global _forward_token
        if torch.compiler.is_compiling():
            # The program compiles the model itself: its compiler traces the model's own forward
            # (the class patches inside it; the graph matcher is the compiler's backend, see
            # _patch_torch). Nothing is checked here: the checks ran eagerly before the compiled
            # call (check_program_compiled), and no token.
            names = _settings_names()
            if names:
                return settings.call(model, original_forward, names, args, kwargs)
            return original_forward(*args, **kwargs)
        outer = _forward_token
        _forward_token = object()
        try:
            names = _settings_names()
            if names:
                return settings.call(model, checked_forward, names, args, kwargs)
            return checked_forward(*args, **kwargs)
        finally:
            _forward_token = outer

    def checked_forward(*args, **kwargs):
        if state["fast"] is None:
            capture = _enabled and bool(_apply & GRAPH_PATTERNS)
            state["fast"], state["backend"] = _fast_forward(model, name, original_forward, compile_mode, graphs,
                                                            capture)
        if model.training and not compile_mode:
            # A CUDA graph of the forward alone replays no autograd, so its outputs could not be
            # trained through: under CUDA graphs training runs the model's own forward; in eager
            # mode, the rewritten graph (every replacement has a backward pass).
            if graphs:
                _left_alone("training mode: a CUDA graph of the forward alone cannot train; the model runs its "
                            "own forward", name)
                return original_forward(*args, **kwargs)
            if state["backend"] is None or state.get("train_own"):
                return original_forward(*args, **kwargs)
            if _enabled and not state["train_checked"]:
                state["train_checked"] = True
                _check_training_call(name, original_forward, state["fast"], state["backend"], args, kwargs)
                if not _captured_trains_faster(model, name, original_forward, state["fast"], args, kwargs):
                    state["train_own"] = True
                    _report["models"][name]["graph_kept"] = False
                    return original_forward(*args, **kwargs)
            return state["fast"](*args, **kwargs)
        if model.training and _enabled and not state["train_checked"] and state["backend"] is not None:
            # Compiled training: the sites are traced, not called, and the compiler draws its random
            # numbers its own way (dropout, drop-path masks unlike the reference's). So the first
            # call checks the rewritten graph run as eager mode runs it (each site's output and
            # gradients, the model's output, on the reference's random numbers); the compiler then
            # compiles the same rewritten graph, and the loss curves check the rest.
            state["train_checked"] = True
            check_fast, check_backend = _fast_forward(model, name, original_forward, "", False, True)
            _check_training_call(name, original_forward, check_fast, check_backend, args, kwargs)
            out = state["fast"](*args, **kwargs)
            _report["models"][name]["graph_rewrites"] = state["backend"].rewrites
            return out
        if _enabled and not state["checked"] and not model.training:
            state["checked"] = True
            ref = _reference(original_forward, args, kwargs)
            # The class patches' first calls (their own checks, their derived weights), eagerly.
            out = original_forward(*args, **kwargs)
            backend = state["backend"]
            rewrites = 0
            if backend is not None or compile_mode or graphs:
                # Capture, rewrite and compile now, in this first call, as the baseline's first
                # call compiles: left to the second call, it would fall inside the timed loop.
                try:
                    out = state["fast"](*args, **kwargs)
                except Exception as e:  # noqa: BLE001 - the model runs as the baseline does, and says why
                    if backend is None:
                        raise
                    _left_alone(f"the graph matcher could not capture the model: {type(e).__name__}: "
                                f"{str(e).splitlines()[0] if str(e) else ''}", name)
                    state["fast"], state["backend"] = _fast_forward(model, name, original_forward, compile_mode,
                                                                    graphs, False)
                    out = state["fast"](*args, **kwargs)
                else:
                    rewrites = backend.rewrites if backend is not None else 0
                    keep = rewrites > 0
                    if keep and not compile_mode and not graphs:
                        keep = _captured_is_faster(model, name, original_forward, state["fast"], args, kwargs)
                    if backend is not None and not keep and not compile_mode:
                        state["fast"], state["backend"] = _fast_forward(model, name, original_forward, "", graphs,
                                                                        False)
                        if graphs:
                            out = state["fast"](*args, **kwargs)
            _report["models"][name] = dict(_model_check(rel_err(out, ref), out), graph_rewrites=rewrites,
                                           graph_kept=state["backend"] is not None)
            return out
        return state["fast"](*args, **kwargs)

    def check_program_compiled(args, kwargs):
        """The first call of a model the program compiles itself, checked eagerly before its
        compiled call: the model's own forward against the class patches and, where the graph
        matcher is the compiler's backend, the rewritten graph run as eager mode runs it (in
        training on the reference's random numbers, each site's gradients checked)."""
        if state["program_checked"] or not _enabled:
            return
        state["program_checked"] = True
        backend = model.__dict__.get("_fuseprof_program_backend")
        if model.training:
            if backend is None:
                return  # the class patches take inference calls only: nothing is replaced
            fast, check_backend = _fast_forward(model, name, original_forward, "", False, True)
            _check_training_call(name, original_forward, fast, check_backend, args, kwargs)
            _report["models"][name]["compiled_by_program"] = True
            return
        ref = _reference(original_forward, args, kwargs)
        out = original_forward(*args, **kwargs)  # the class patches' first calls, checked
        rewrites = 0
        if backend is not None:
            fast, check_backend = _fast_forward(model, name, original_forward, "", False, True)
            out = fast(*args, **kwargs)
            rewrites = check_backend.rewrites
        _report["models"][name] = dict(_model_check(rel_err(out, ref), out), graph_rewrites=rewrites,
                                       graph_kept=True, compiled_by_program=True)

    state["program_checked"] = False
    model.__dict__["_fuseprof_check_program_compiled"] = check_program_compiled
    model.__dict__["_fuseprof_model_name"] = name
    model.forward = forward
    return model


def unwrap_model(model):
    """Undoes wrap_model (the model turned out to be part of a larger one)."""
    if getattr(model, "_fuseprof_wrapped", False):
        del model.forward
        model._fuseprof_wrapped = False


def _patch_timm(timm):
    import importlib

    _register_ops()
    for module, cls, fusable, fused, patterns in (
        ("timm.models.swin_transformer", "SwinTransformerBlock", _swin_fusable, _swin_block_fused,
         ("window_partition", "window_attention", "window_reverse", "fused_mlp", "gemm_residual", "gemm_gelu")),
        ("timm.models.vision_transformer", "Block", _vit_fusable, _vit_block_fused,
         ("full_attention", "gemm_residual", "gemm_gelu")),
    ):
        try:
            _patch_forward(getattr(importlib.import_module(module), cls), fusable, fused, patterns)
        except Exception as e:  # noqa: BLE001 - an unpatchable timm is reported, not fatal
            _left_alone(f"{module}.{cls} not patched: {e}", "timm")
    try:
        _patch_forward(importlib.import_module("timm.layers.patch_embed").PatchEmbed, _patch_embed_fusable,
                       _patch_embed_fused, ("patch_embed",))
    except Exception as e:  # noqa: BLE001
        _left_alone(f"timm.layers.PatchEmbed not patched: {e}", "timm")
    _patch_linear()
    _patch_sdpa()
    original = timm.create_model
    if getattr(original, "_fuseprof", False):
        return

    def create_model(name, *args, **kwargs):
        return wrap_model(original(name, *args, **kwargs), name)

    create_model._fuseprof = True
    timm.create_model = create_model
    if hasattr(timm, "models"):
        timm.models.create_model = create_model


def _patch_transformers(_module):
    """Patches transformers (its package module, which may still be initialising: every name
    is taken from its submodules)."""
    import importlib

    _register_ops()
    try:
        _patch_bert(importlib.import_module("transformers.models.bert.modeling_bert"))
    except Exception as e:  # noqa: BLE001 - an unpatchable transformers is reported, not fatal
        _left_alone(f"transformers BERT not patched: {e}", "transformers")
    _patch_linear()
    _patch_sdpa()

    # Every transformers model ends its __init__ with post_init(); a model built inside another
    # (BertModel inside BertForMaskedLM) is unwrapped when the outer one is wrapped.
    pretrained = importlib.import_module("transformers.modeling_utils").PreTrainedModel
    original_post_init = pretrained.post_init
    if not getattr(original_post_init, "_fuseprof", False):
        def post_init(self, *args, **kwargs):
            original_post_init(self, *args, **kwargs)
            for m in self.modules():
                if m is not self and getattr(m, "_fuseprof_wrapped", False):
                    unwrap_model(m)
            name = getattr(getattr(self, "config", None), "_name_or_path", "") or type(self).__name__
            wrap_model(self, name)

        post_init._fuseprof = True
        pretrained.post_init = post_init


def _register_ops():
    ops.register()
    _report["ops"] = ops.DISPATCH
    if ops.DISPATCH_NOTE:
        _report["ops_note"] = ops.DISPATCH_NOTE


def _patch_torch(_torch):
    """Wraps any model (wrap_model) at its first outermost call: a module with parameters called
    while no other module call runs, whoever built it (torchvision, a hand-written nn.Module).
    Models from timm.create_model and transformers are wrapped when they are made; a module
    called only inside another is never wrapped."""
    original_call = torch.nn.Module.__call__
    if getattr(original_call, "_fuseprof_models", False):
        return
    depth = [0]

    def __call__(self, *args, **kwargs):
        if torch.compiler.is_compiling():
            return original_call(self, *args, **kwargs)
        check = _program_compiled(self)
        if check is not None:
            check(args, kwargs)
        if depth[0]:
            return original_call(self, *args, **kwargs)
        # Not a model: a module of a named model, or one the autograd engine calls (activation
        # checkpointing recomputes blocks there, outside the model's forward; wrapped, they would
        # recompute through the graph matcher what the forward ran as written).
        if not self.__dict__.get("_fuseprof_wrapped") and not self.__dict__.get("_fuseprof_seen") and \
                "_fuseprof_name" not in self.__dict__ and torch._C._current_graph_task_id() == -1:
            self.__dict__["_fuseprof_seen"] = True
            if next(self.parameters(), None) is not None:
                _register_ops()
                wrap_model(self, type(self).__name__)
        depth[0] += 1
        try:
            return original_call(self, *args, **kwargs)
        finally:
            depth[0] -= 1

    __call__._fuseprof_models = True
    torch.nn.Module.__call__ = __call__
    if not getattr(torch.compile, "_fuseprof", False):
        torch.compile = _compile
    if _settings_names():
        settings.install(_settings_names(), _left_alone)
    _patch_linear()
    _patch_sdpa()


# The graph matcher's backends in the program's own torch.compile calls (_compile).
_program_backends = []


def _compiled_module(target):
    """The module a program's torch.compile call compiles: the module itself, or the one whose
    method it is (`torch.compile(model.forward)`, nn.Module.compile's `_call_impl`); else None."""
    if isinstance(target, torch.nn.Module):
        return target
    owner = getattr(target, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) else None


def _compile(model=None, **kwargs):
    """torch.compile for the program: a model compiled with Inductor (the default backend) gets
    the graph matcher as its backend, which rewrites the captured graph and hands it to Inductor
    with the program's mode and options; its first call is checked eagerly (_program_compiled).
    A submodule of a model the patch layer knows, another backend, or a function (its first call
    cannot be checked without running the program's own step twice) compile as asked."""
    if model is None:  # @torch.compile(mode=...) as a decorator factory
        return lambda target: _compile(target, **kwargs)
    module = _compiled_module(model)
    if (module is None or not _enabled or not (_apply & GRAPH_PATTERNS) or kwargs.get("disable")
            or kwargs.get("backend", "inductor") != "inductor"):
        return _torch_compile(model, **kwargs)
    if not module.__dict__.get("_fuseprof_wrapped"):
        if module.__dict__.get("_fuseprof_name"):  # a submodule of a named model
            return _torch_compile(model, **kwargs)
        if next(module.parameters(), None) is None:
            return _torch_compile(model, **kwargs)
        module.__dict__["_fuseprof_seen"] = True
        _register_ops()
        wrap_model(module, type(module).__name__)
    import fuseprof_graph

    name = module.__dict__["_fuseprof_model_name"]
    mode = kwargs.pop("mode", None)
    backend = fuseprof_graph.Backend(name, mode or "default", options=kwargs.pop("options", None),
                                     dynamic=kwargs.get("dynamic"))
    module.__dict__["_fuseprof_program_backend"] = backend
    _program_backends.append(backend)
    _left_alone(f"the program compiles the model itself (mode {mode or 'default'}): the graph matcher is its "
                f"compiler's backend, and its first call is checked eagerly", name)
    return _torch_compile(model, backend=backend, **kwargs)


def _program_compiled(module):
    """The eager first-call check of the model a program compiled itself, called as
    (args, kwargs) before the compiled call; None for any other module."""
    if not _program_backends:  # every module call passes here: the common case costs one test
        return None
    orig = module.__dict__.get("_modules", {}).get("_orig_mod")  # torch.compile(model): an OptimizedModule
    target = orig if isinstance(orig, torch.nn.Module) else module
    if "_fuseprof_program_backend" not in target.__dict__:
        return None
    return target.__dict__.get("_fuseprof_check_program_compiled")


def install():
    """Patches torch, timm and transformers now where they are imported (the sitecustomize
    beside this file does it when they are)."""
    _patch_torch(torch)
    if "timm" in sys.modules:
        _patch_timm(sys.modules["timm"])
    if "transformers" in sys.modules:
        _patch_transformers(sys.modules["transformers"])


def _write_report():
    path = os.environ.get("FUSEPROF_PATCH_REPORT")
    if not path:
        return
    # Every process of the program writes here (torchrun's launcher, DataLoader workers, the
    # ranks): one that never ran a model does not replace what one that did wrote.
    if not _report["models"] and not _report["modules"] and os.path.exists(path):
        return
    _report["enabled"] = _enabled
    _report["apply"] = sorted(_apply)
    # Both sides' settings are part of the baseline, not something the patched side changed.
    _report["settings"] = {k: v for k, v in settings.applied().items() if k not in _both}
    _report["baseline_settings"] = {k: v for k, v in settings.applied().items() if k in _both}
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(_report, f, indent=1)
    os.replace(tmp, path)


atexit.register(_write_report)
