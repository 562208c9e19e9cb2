"""fuseprof's patch hook, put on PYTHONPATH by `fuseprof bench -- CMD` (behind `collect`'s own
hook, which runs this one in turn). When torch, timm or transformers is imported, fuseprof_patch
patches it: the kernels swapped in (FUSEPROF_PATCH=1), and models named, checked and compiled or
graphed as asked (fuseprof_patch's docstring). When torch is imported and FUSEPROF_STEPS_REPORT
is set, fuseprof_steps starts the step clock. Nothing is imported before the module it patches
is; any sitecustomize that was on the path before this one still runs.
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
        if os.path.isfile(candidate) and "fuseprof" not in open(candidate).read(200):
            spec = importlib.util.spec_from_file_location("_fuseprof_patch_prev_sitecustomize", candidate)
            if spec and spec.loader:
                module = importlib.util.module_from_spec(spec)
                try:
                    spec.loader.exec_module(module)
                except Exception as e:  # the user's hook failing must not stop their program
                    sys.stderr.write("fuseprof: the previous sitecustomize failed: %r\n" % (e,))
            return


PATCHERS = {"torch": "_patch_torch", "timm": "_patch_timm", "transformers": "_patch_transformers"}


def _install_steps(_torch):
    import fuseprof_steps

    fuseprof_steps.install()


def _arm(patchers):
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        done = set()

        def find_spec(self, fullname, path, target=None):
            if fullname not in patchers or fullname in self.done:
                return None
            self.done.add(fullname)
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(fullname)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def run(module):
                exec_module(module)
                patchers[fullname](module)

            spec.loader.exec_module = run
            return spec

    sys.meta_path.insert(0, Finder())


def _patcher(name):
    def patch(module):
        import fuseprof_patch

        getattr(fuseprof_patch, name)(module)

    return patch


_chain_previous_sitecustomize()
_on_import = {}  # module name -> what runs when it has been imported
if any(os.environ.get(v) for v in ("FUSEPROF_PATCH", "FUSEPROF_COMPILE", "FUSEPROF_CUDA_GRAPHS",
                                   "FUSEPROF_SETTINGS")):
    _on_import.update({name: [_patcher(fn)] for name, fn in PATCHERS.items()})
if os.environ.get("FUSEPROF_STEPS_REPORT"):
    _on_import.setdefault("torch", []).insert(0, _install_steps)


def _all(fns):
    def run(module):
        for fn in fns:
            try:
                fn(module)
            except Exception as e:  # noqa: BLE001 - the program runs unpatched, and says so
                sys.stderr.write("fuseprof: the patch layer failed to load: %r\n" % (e,))

    return run


# A module a hook before this one imported is patched now; the others when they are imported.
for _name in [n for n in _on_import if n in sys.modules]:
    _all(_on_import.pop(_name))(sys.modules[_name])
if _on_import:
    _arm({name: _all(fns) for name, fns in _on_import.items()})
