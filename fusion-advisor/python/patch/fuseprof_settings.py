"""The settings that come before kernels (the `settings` of `fuseprof advise`), switched on in an
unmodified program by `fuseprof bench --apply NAME` on the patched side (FUSEPROF_PATCH=1):

  autocast_bf16    each wrapped model's forward runs under torch.autocast("cuda", bfloat16) where
                   the program does not autocast already; its floating outputs are handed back in
                   the dtype of the model's parameters, so the program's loss runs as it did
  tf32             TF32 for float32 matrix products and convolutions
  fused_optimizer  torch.optim.Adam and AdamW built with fused=True (and without foreach) where
                   every parameter is a floating CUDA tensor and the program did not name `fused`
  cudnn_benchmark  torch.backends.cudnn.benchmark = True
  channels_last    each wrapped model, and the 4-D floating tensors it is called with, in the
                   channels-last memory format
  sdpa_cudnn       each wrapped model's forward with PyTorch's scaled_dot_product_attention
                   trying its cuDNN backend first (then flash, memory-efficient, math): the
                   attention a user on Hopper would pick, as a baseline (`bench --baseline`)
  input_pipeline   each torch.utils.data.DataLoader that loads in worker processes built with
                   as many workers as the process may use cores (at most MAX_WORKERS, never
                   fewer than the program's), a prefetch factor of at least 4 and pinned memory
                   on a CUDA machine (its batches' copies to the GPU then run as direct DMA; the
                   program's own `non_blocking=True` is what lets the host run ahead of them:
                   Tensor.to is not patched, as TorchDynamo cannot trace a patched one). A
                   loader that loads in the program's own process is left alone (its dataset
                   may not pickle or may touch CUDA). With more workers each batch comes from
                   another worker: random augmentations then draw from another worker's random
                   stream (the batches and their order are the same)

`bench --baseline NAMES` (FUSEPROF_SETTINGS) switches settings on both sides, the patch layer
loaded on the baseline side for them alone.

Mixed precision changes results more than a fused kernel does: a model run under autocast_bf16
is checked against its float32 self with PRECISION_TOLERANCE, and the report says so.
"""
import inspect
import os

import torch

# Devices whose models autocast_bf16 applies to (the tests add "cpu").
DEVICES = {"cuda"}
SETTINGS = ("autocast_bf16", "tf32", "fused_optimizer", "cudnn_benchmark", "channels_last", "sdpa_cudnn",
            "input_pipeline")
# input_pipeline's workers at most: past this a loader's workers contend with the main process
# (which launches the GPU's work) for cores and memory bandwidth.
MAX_WORKERS = 8
# input_pipeline's prefetch factor at least: batches each worker keeps loaded ahead.
PREFETCH_FACTOR = 4
# ||bf16 autocast - float32|| / ||float32|| a model's output may reach: bf16 keeps 8 bits of
# mantissa (a relative rounding of 2^-9 per op), which a deep network's output accumulates to
# a few 1e-3 up to 1e-2; twice that, with headroom, while a wrong result lies near 1.
PRECISION_TOLERANCE = 5e-2

_applied = {}  # setting -> what it did, for the report
# True while a forward runs under the autocast this module put around it (not the program's own).
_state = {"autocast": False, "building": False}


def autocast_is_ours():
    return _state["autocast"]


def applied():
    return dict(_applied)


def install(names, note):
    """The process-wide settings among `names`, switched on now; `note(why, name)` records one
    that is left off."""
    if "tf32" in names:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        _applied["tf32"] = "torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True"
    if "cudnn_benchmark" in names:
        torch.backends.cudnn.benchmark = True
        _applied["cudnn_benchmark"] = "torch.backends.cudnn.benchmark = True"
    if "fused_optimizer" in names:
        for cls in (torch.optim.Adam, torch.optim.AdamW):
            _fuse_optimizer(cls, note)
    if "input_pipeline" in names:
        _input_pipeline(note)


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def loader_arguments(arguments, cores, cuda):
    """input_pipeline's changes to a DataLoader's bound arguments (a dict, changed in place):
    what changed, as "name=new (was old)" strings; empty where the loader loads in the program's
    own process."""
    workers = arguments.get("num_workers", 0) or 0
    if workers < 1:
        return []
    changes = []
    more = max(workers, min(cores, MAX_WORKERS))
    if more > workers:
        arguments["num_workers"] = more
        changes.append(f"num_workers={more} (was {workers})")
    prefetch = arguments.get("prefetch_factor")
    if prefetch is None or prefetch < PREFETCH_FACTOR:
        arguments["prefetch_factor"] = PREFETCH_FACTOR
        changes.append(f"prefetch_factor={PREFETCH_FACTOR} (was {2 if prefetch is None else prefetch})")
    if cuda and not arguments.get("pin_memory", False):
        arguments["pin_memory"] = True
        changes.append("pin_memory=True (was False)")
    return changes


def _input_pipeline(note):
    from torch.utils.data import DataLoader

    original = DataLoader.__init__
    if getattr(original, "_fuseprof_loader", False):
        return
    signature = inspect.signature(original)
    cuda = torch.cuda.is_available()

    def __init__(self, *args, **kwargs):
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # the call is wrong: DataLoader says how
            return original(self, *args, **kwargs)
        changes = loader_arguments(bound.arguments, _cores(), cuda)
        if changes:
            _applied["input_pipeline"] = f"DataLoader({', '.join(changes)})" + (
                ": a batch's random augmentations, if the dataset draws any, come from another worker's random stream"
                if changes[0].startswith("num_workers") else "")
        elif (bound.arguments.get("num_workers", 0) or 0) < 1:
            note("input_pipeline: the DataLoader loads in the program's own process; moving its dataset into "
                 "worker processes is a change to the program", "DataLoader")
        return original(*bound.args, **bound.kwargs)

    __init__._fuseprof_loader = True
    DataLoader.__init__ = __init__


def _cuda_floating(params):
    tensors = [t for group in params for t in (group["params"] if isinstance(group, dict) else [group])]
    return bool(tensors) and all(torch.is_tensor(t) and t.is_cuda and t.is_floating_point() for t in tensors)


def _fuse_optimizer(cls, note):
    original = cls.__init__
    if getattr(original, "_fuseprof_fused", False):
        return

    def __init__(self, params, *args, **kwargs):
        if _state.get("building"):  # AdamW's own __init__ calling Adam's: decided already
            return original(self, params, *args, **kwargs)
        params = list(params)  # a generator would be spent by the check below
        if "fused" in kwargs:
            note(f"fused_optimizer: the program names fused={kwargs['fused']!r}; kept", cls.__name__)
        elif _cuda_floating(params):
            kwargs.pop("foreach", None)  # fused and foreach exclude each other
            kwargs["fused"] = True
            _applied["fused_optimizer"] = f"{cls.__name__}(..., fused=True)"
        else:
            note("fused_optimizer: a parameter is not a floating CUDA tensor; the optimizer is kept",
                 cls.__name__)
        _state["building"] = True
        try:
            original(self, params, *args, **kwargs)
        finally:
            _state["building"] = False

    __init__._fuseprof_fused = True
    cls.__init__ = __init__


def prepare(model, names):
    """The per-model settings that change the model once (channels_last)."""
    if "channels_last" in names:
        model.to(memory_format=torch.channels_last)
        _applied["channels_last"] = "model.to(memory_format=torch.channels_last) and its 4-D inputs"


def _sdpa_cudnn_first():
    """A context in which scaled_dot_product_attention tries cuDNN first, or None where this
    torch cannot say so."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                 SDPBackend.MATH]
        return sdpa_kernel(order, set_priority=True)
    except (ImportError, AttributeError, TypeError):
        return None


def call(model, forward, names, args, kwargs):
    """forward(*args, **kwargs) with the per-call settings among `names`."""
    if "sdpa_cudnn" in names:
        ctx = _sdpa_cudnn_first()
        if ctx is not None:
            _applied["sdpa_cudnn"] = "torch.nn.attention.sdpa_kernel([CUDNN_ATTENTION, FLASH_ATTENTION, " \
                                     "EFFICIENT_ATTENTION, MATH], set_priority=True) around the model's forward"
            with ctx:
                return call(model, forward, set(names) - {"sdpa_cudnn"}, args, kwargs)
    if "channels_last" in names:
        def to_nhwc(t):
            if torch.is_tensor(t) and t.dim() == 4 and t.is_floating_point():
                return t.contiguous(memory_format=torch.channels_last)
            return t

        args = tuple(to_nhwc(a) for a in args)
        kwargs = {k: to_nhwc(v) for k, v in kwargs.items()}
    device = _float32_device(model)
    if "autocast_bf16" not in names or device is None or torch.is_autocast_enabled(device):
        return forward(*args, **kwargs)
    _applied["autocast_bf16"] = f'with torch.autocast("{device}", dtype=torch.bfloat16): around the model\'s forward'
    outer = _state["autocast"]
    _state["autocast"] = True
    try:
        with torch.autocast(device, dtype=torch.bfloat16):
            out = forward(*args, **kwargs)
    finally:
        _state["autocast"] = outer
    return torch.utils._pytree.tree_map(
        lambda t: t.float() if torch.is_tensor(t) and t.is_floating_point() else t, out)


def precision_changed(names):
    """Whether a model's results come from a lower precision than it was written in."""
    return bool({"autocast_bf16", "tf32"} & set(names) & set(_applied))


def _float32_device(model):
    """The device type of a float32 model autocast_bf16 applies to, or None."""
    p = next(model.parameters(), None)
    ok = p is not None and p.dtype == torch.float32 and p.device.type in DEVICES
    return p.device.type if ok else None
