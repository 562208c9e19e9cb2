"""fuseprof's PyTorch hook, put on PYTHONPATH by `fuseprof collect`.

Makes PyTorch emit NVTX ranges without edits to the user's script, according to
FUSEPROF_PYTORCH:
  ops      one range per operator (torch.autograd.profiler.emit_nvtx)
  shapes   the same, with input shapes in the range names (record_shapes=True)
  modules  shapes, plus one range per nn.Module call named "module:<path>:<Class>", e.g.
           "module:layers.0.blocks.1.attn:WindowAttention" (the root is "module::SwinTransformer")

Nothing happens until the program imports torch; torch is never imported on its behalf.
Any sitecustomize that was on the path before this one still runs.
"""

import os
import sys


def _chain_previous_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.util

    for entry in sys.path:
        try:
            if not entry or os.path.abspath(entry) == here:
                continue
        except Exception:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_fuseprof_prev_sitecustomize", candidate)
            if spec and spec.loader:
                module = importlib.util.module_from_spec(spec)
                try:
                    spec.loader.exec_module(module)
                except Exception as e:  # the user's hook failing must not stop their program
                    sys.stderr.write("fuseprof: the previous sitecustomize failed: %r\n" % (e,))
            return


def _enable(torch, mode):
    record_shapes = mode in ("shapes", "modules")
    ctx = torch.autograd.profiler.emit_nvtx(record_shapes=record_shapes)
    # emit_nvtx.__enter__ synchronises the GPU first, which would initialise CUDA in every
    # process that imports torch (DataLoader workers fork after this): skip that step.
    sync = torch.cuda.synchronize
    torch.cuda.synchronize = lambda *a, **k: None
    try:
        ctx.__enter__()
    finally:
        torch.cuda.synchronize = sync
    # Keep it alive for the process's life; emit_nvtx has no global off switch to call later.
    torch._fuseprof_emit_nvtx = ctx

    def _stop():
        try:
            torch.autograd._disable_profiler()
        except Exception:
            pass

    import atexit

    atexit.register(_stop)
    if mode == "modules":
        _install_module_hooks(torch)


def _install_module_hooks(torch):
    import weakref

    names = weakref.WeakKeyDictionary()  # module -> path
    stack = []  # modules whose forward is running, per thread is enough for eager models
    push = torch.cuda.nvtx.range_push
    pop = torch.cuda.nvtx.range_pop

    def path_of(module):
        path = names.get(module)
        if path is not None:
            return path
        parent = stack[-1] if stack else None
        path = None
        if parent is not None:
            parent_path = names.get(parent, "")
            for child_name, child in parent.named_children():
                if child is module:
                    path = child_name if not parent_path else parent_path + "." + child_name
                    break
        if path is None:
            path = ""  # a root (or a module called from outside its parent)
            # Name every descendant of a root at once; later calls find them here.
            try:
                for sub_name, sub in module.named_modules():
                    if sub_name and sub not in names:
                        names[sub] = sub_name
            except Exception:
                pass
        names[module] = path
        return path

    def pre_hook(module, args):
        path = path_of(module)
        push("module:%s:%s" % (path, type(module).__name__))
        stack.append(module)

    def post_hook(module, args, output):
        if stack and stack[-1] is module:
            stack.pop()
            pop()

    from torch.nn.modules import module as _m

    _m.register_module_forward_pre_hook(pre_hook)
    _m.register_module_forward_hook(post_hook)


def _watch_for_torch(mode):
    import importlib.abc

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != "torch":
                return None
            sys.meta_path.remove(self)
            import importlib.util

            spec = importlib.util.find_spec("torch")
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            original = loader.exec_module

            def exec_module(module):
                original(module)
                try:
                    _enable(module, mode)
                except Exception as e:
                    sys.stderr.write("fuseprof: could not annotate PyTorch: %r\n" % (e,))

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Finder())


_chain_previous_sitecustomize()
_mode = os.environ.get("FUSEPROF_PYTORCH", "")
if _mode in ("ops", "shapes", "modules"):
    if "torch" in sys.modules:
        _enable(sys.modules["torch"], _mode)
    else:
        _watch_for_torch(_mode)
