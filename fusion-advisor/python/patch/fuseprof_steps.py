"""fuseprof's step clock, loaded into the program under `fuseprof bench -- CMD` on both sides
(the sitecustomize beside it installs it when torch is imported and FUSEPROF_STEPS_REPORT is
set). It never changes what the program computes.

A step is what the program repeats, and fuseprof (not this file) decides which from what is
recorded here:
  - every optimizer step (torch.optim's global step hook): the end of one training step;
  - every outermost nn.Module call (a call made while no other module call is running): a
    forward, or one of the models a step calls in turn;
  - every return from torch.cuda.synchronize and from `.item()` of a GPU tensor: the points
    where the program's own clock can read the GPU's progress;
  - the value of every one-element tensor the program calls `.backward()` on (its loss, scaled
    as the program scales it), the first MAX_LOSSES of them: the two sides' loss curves.
With FUSEPROF_NUDGE set (a relative size, bench uses half a bf16 rounding, 2^-9), every
floating-point parameter of each model the program calls is moved up or down by that much
before that model's first call (once per parameter) (each element's direction drawn from a generator of its own, so the
program's random stream is untouched): the one case where the clock changes what the program
computes, asked for by bench to see how far this loop's loss moves under rounding-sized changes.

Each outermost call and each optimizer step records the host clock (time.perf_counter_ns) and a
CUDA event on the current stream, so that the time a step takes on the GPU is known whether or
not the loop synchronizes (the host runs ahead of an unsynchronized loop, and its launch times
say nothing of the model's speed). At exit the GPU is synchronized once and every event is put
on the host clock through one last event, recorded when the GPU is idle.

FUSEPROF_STEPS_REPORT names the JSON file written at exit (version 1): "models" (class names),
"calls" ([model, host_start_ns, host_end_ns, gpu_start_ns, gpu_end_ns]), "optimizer_steps"
([host_ns, gpu_ns]), "syncs" (host ns) and "exit_sync_ns", all on the host clock; a GPU time is
null where no event was recorded (CPU work, CUDA not started, graph capture); "losses" (floats,
"nan", "inf" or "-inf" where not finite, null where it could not be read).
"""
import atexit
import json
import math
import os
import time

import torch

# Past this many anchors no more events are recorded (the times stay).
MAX_EVENTS = 50_000
# Losses kept for the loss curves (the values stay on the GPU until exit: no synchronize).
MAX_LOSSES = 200

_state = {"depth": 0, "events": 0, "quiet": 0}
_models = []
_model_index = {}
_calls = []
_optimizer_steps = []
_syncs = []
_losses = []
_installed = False


def _event():
    """A CUDA event recorded now on the current stream, or None where none can be."""
    if _state["events"] >= MAX_EVENTS or not torch.cuda.is_initialized():
        return None
    try:
        if torch.cuda.is_current_stream_capturing():
            return None
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        _state["events"] += 1
        return e
    except Exception:  # noqa: BLE001 - a clock must never stop the program
        return None


class quiet:
    """The synchronizes inside are fuseprof's own (the patch layer's numerics checks and timings
    on a model's first call), not the program's: they are not recorded, so that they do not move
    the patched side's loop bounds away from the baseline's."""

    def __enter__(self):
        _state["quiet"] += 1

    def __exit__(self, *exc):
        _state["quiet"] -= 1


def _model_of(module):
    key = id(module)
    i = _model_index.get(key)
    if i is None:
        i = _model_index[key] = len(_models)
        # A model the program compiled itself is named by the model inside (OptimizedModule's).
        _models.append(type(getattr(module, "_orig_mod", module)).__name__)
    return i


_nudged_modules = set()
_nudged_params = set()


def nudge(module, size):
    """Every floating-point parameter of module not moved before, moved by `size` relative, up or
    down at random (a generator of its own, seeded 0), in place and outside autograd."""
    gens = {}
    with torch.no_grad():
        for p in module.parameters():
            if not p.is_floating_point() or p.numel() == 0 or id(p) in _nudged_params:
                continue
            _nudged_params.add(id(p))
            gen = gens.get(p.device)
            if gen is None:
                gen = gens[p.device] = torch.Generator(device=p.device).manual_seed(0)
            up = torch.randint(0, 2, p.shape, generator=gen, device=p.device).to(p.dtype)
            p.mul_(1.0 + size * (2.0 * up - 1.0))


def install():
    global _installed
    if _installed:
        return
    _installed = True
    try:
        _state["nudge"] = float(os.environ.get("FUSEPROF_NUDGE") or 0) or None
    except ValueError:
        _state["nudge"] = None
    original_call = torch.nn.Module.__call__

    def __call__(self, *args, **kwargs):
        if _state["depth"] or torch.compiler.is_compiling():
            return original_call(self, *args, **kwargs)
        _state["depth"] = 1
        try:
            if _state.get("nudge") and id(self) not in _nudged_modules:
                _nudged_modules.add(id(self))
                nudge(self, _state["nudge"])
            row = [_model_of(self), time.perf_counter_ns(), None, _event(), None]
            try:
                return original_call(self, *args, **kwargs)
            finally:
                row[4] = _event()
                row[2] = time.perf_counter_ns()
                _calls.append(row)
        finally:
            _state["depth"] = 0

    torch.nn.Module.__call__ = __call__

    def after_step(_optimizer, _args, _kwargs):
        _optimizer_steps.append([time.perf_counter_ns(), _event()])

    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(after_step)
    except Exception:  # noqa: BLE001 - an older torch: steps are the model calls
        pass

    original_sync = torch.cuda.synchronize

    def synchronize(*args, **kwargs):
        out = original_sync(*args, **kwargs)
        if not _state["quiet"]:
            _syncs.append(time.perf_counter_ns())
        return out

    torch.cuda.synchronize = synchronize

    # `.item()` of a GPU tensor waits for the GPU too: a loop that ends with one (a loss
    # printed, a metric read) is bounded there on the program's clock.
    original_item = torch.Tensor.item

    def item(self):
        out = original_item(self)
        if not _state["quiet"] and not torch.compiler.is_compiling() and self.is_cuda:
            _syncs.append(time.perf_counter_ns())
        return out

    torch.Tensor.item = item

    original_backward = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        if (not _state["quiet"] and len(_losses) < MAX_LOSSES and self.numel() == 1
                and not torch.compiler.is_compiling()
                and not (self.is_cuda and torch.cuda.is_current_stream_capturing())):
            _losses.append(self.detach().clone())
        return original_backward(self, *args, **kwargs)

    torch.Tensor.backward = backward
    atexit.register(_write)


def _value(t):
    """The loss as a JSON number, or "nan" / "inf" / "-inf" (JSON has no such numbers); None where
    it cannot be read."""
    try:
        v = float(t.float())
    except Exception:  # noqa: BLE001 - a value that cannot be read is not a loss curve's point
        return None
    return v if math.isfinite(v) else repr(v)


def _write():
    path = os.environ.get("FUSEPROF_STEPS_REPORT")
    if not path:
        return
    exit_sync = None
    to_host = lambda e: None  # noqa: E731
    try:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            last = torch.cuda.Event(enable_timing=True)
            last.record()
            last.synchronize()
            exit_sync = time.perf_counter_ns()

            def to_host(e):
                if e is None:
                    return None
                try:
                    return exit_sync - int(round(e.elapsed_time(last) * 1e6))
                except Exception:  # noqa: BLE001 - an event that never ran
                    return None
    except Exception:  # noqa: BLE001
        pass
    report = {
        "version": 1,
        "models": _models,
        "calls": [[m, hs, he, to_host(gs), to_host(ge)] for m, hs, he, gs, ge in _calls],
        "optimizer_steps": [[h, to_host(g)] for h, g in _optimizer_steps],
        "syncs": _syncs,
        "exit_sync_ns": exit_sync,
        "losses": [_value(t) for t in _losses],
        "pid": os.getpid(),
    }
    # One file per process (a program may start others: DataLoader workers, torchrun ranks).
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, f"{path}.{os.getpid()}")
