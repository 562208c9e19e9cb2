"""fuseprof's PyTorch hook, put on PYTHONPATH by `fuseprof collect`.

Makes PyTorch emit NVTX ranges without edits to the user's script, according to
FUSEPROF_PYTORCH:
  ops      one range per operator (torch.autograd.profiler.emit_nvtx)
  shapes   the same, with input shapes in the range names (record_shapes=True)
  modules  shapes, plus one range per nn.Module call named "module:<path>:<Class>", e.g.
           "module:layers.0.blocks.1.attn:WindowAttention" (the root is "module::SwinTransformer")
In `ops` and `shapes` modes each outermost nn.Module call still gets its "module::<Class>"
range: the model calls `fuseprof analyze` takes as steps when the program marks none.

Op ranges come from fuseprof's own RecordFunction observer (fuseprof_ops.cpp), which pushes
them straight into the tracer with emit_nvtx's names and costs less; it is compiled with g++
against the installed torch on first use and cached (FUSEPROF_CACHE, default
~/.cache/fuseprof). Without a compiler, outside `fuseprof collect`, or with
FUSEPROF_OPS_OBSERVER=emit_nvtx, torch.autograd.profiler.emit_nvtx makes them instead.

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
    if not _install_observer(torch, record_shapes):
        _enable_emit_nvtx(torch, record_shapes)
    if mode == "modules":
        _install_module_hooks(torch)
    else:
        _install_outermost_module_ranges(torch)


def _install_outermost_module_ranges(torch):
    """One range per outermost nn.Module call, named "module::<Class>" as `modules` mode names
    a root: what `fuseprof analyze` takes as the step when the program marks none. A call made
    while another module's runs, or while torch.compile traces, adds nothing."""
    try:
        module_class = torch.nn.Module
        original = module_class.__call__
        is_compiling = torch.compiler.is_compiling
    except AttributeError:  # not a torch with nn.Module and torch.compiler
        return
    running = [False]

    def __call__(self, *args, **kwargs):
        if running[0] or is_compiling():
            return original(self, *args, **kwargs)
        running[0] = True
        nvtx = torch.cuda.nvtx
        nvtx.range_push("module::%s" % type(self).__name__)
        try:
            return original(self, *args, **kwargs)
        finally:
            nvtx.range_pop()
            running[0] = False

    module_class.__call__ = __call__


def _install_observer(torch, record_shapes):
    """fuseprof's op observer; False (after saying why, when it is a failure) if not used."""
    tracer = os.environ.get("NVTX_INJECTION64_PATH", "")
    if os.environ.get("FUSEPROF_OPS_OBSERVER", "") == "emit_nvtx" or not tracer:
        return False
    try:
        import ctypes

        lib = ctypes.CDLL(_observer_library(torch))
        lib.fuseprof_ops_install.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.fuseprof_ops_install.restype = ctypes.c_int
        rc = lib.fuseprof_ops_install(tracer.encode(), 1 if record_shapes else 0)
        if rc != 0:
            raise RuntimeError("the tracer %s has no fuseprof_range_push (code %d)" % (tracer, rc))
        torch._fuseprof_ops_observer = lib  # keep it loaded
        return True
    except Exception as e:
        sys.stderr.write("fuseprof: op observer unavailable (%s); using emit_nvtx\n" % (e,))
        return False


def _observer_library(torch):
    """Path of the observer built for this torch: from the cache, or compiled now."""
    import hashlib
    import subprocess
    import time

    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(here, "fuseprof_ops.cpp")
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    include, libdir = os.path.join(torch_dir, "include"), os.path.join(torch_dir, "lib")
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    with open(src, "rb") as f:
        code = f.read()
    key = hashlib.sha256(b"|".join([code, torch.__version__.encode(), torch_dir.encode(), b"%d" % abi]))
    cache = os.environ.get("FUSEPROF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fuseprof"
    )
    so = os.path.join(cache, "ops-observer-%s.so" % key.hexdigest()[:16])
    if os.path.isfile(so):
        return so
    os.makedirs(cache, exist_ok=True)
    tmp = "%s.%d.tmp" % (so, os.getpid())
    started = time.time()
    error = "no compiler run"
    for std in ("c++17", "c++20"):
        # -DNDEBUG as torch's own release build: RecordFunction's layout depends on it.
        cmd = [os.environ.get("CXX", "g++"), "-O2", "-DNDEBUG", "-std=" + std, "-shared", "-fPIC",
               "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi, "-I", include, src, "-o", tmp,
               "-L", libdir, "-lc10", "-ltorch_cpu", "-Wl,-rpath," + libdir]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise RuntimeError("cannot run %s: %s" % (cmd[0], e))
        if r.returncode == 0:
            os.replace(tmp, so)  # atomic: processes building at once each publish a whole file
            sys.stderr.write("fuseprof: built the PyTorch op observer in %.1f s (%s)\n"
                             % (time.time() - started, so))
            return so
        lines = [l for l in r.stderr.splitlines() if "error" in l] or r.stderr.splitlines()
        detail = lines[0][:300] if lines else "exit code %d" % r.returncode
        error = "%s -std=%s failed: %s" % (cmd[0], std, detail)
    try:
        os.unlink(tmp)
    except OSError:
        pass
    raise RuntimeError(error)


def _enable_emit_nvtx(torch, record_shapes):
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
