"""fuseprof's patch hook, put on PYTHONPATH by `fuseprof bench -- CMD` (behind `collect`'s own
hook, which runs this one in turn). When timm or transformers is imported, fuseprof_patch
patches it: the kernels swapped in (FUSEPROF_PATCH=1), and models named, checked and compiled or
graphed as asked (fuseprof_patch's docstring). Nothing is imported before timm or transformers
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


PATCHERS = {"timm": "_patch_timm", "transformers": "_patch_transformers"}


def _arm():
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        done = set()

        def find_spec(self, fullname, path, target=None):
            if fullname not in PATCHERS or fullname in self.done:
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
                try:
                    import fuseprof_patch

                    getattr(fuseprof_patch, PATCHERS[fullname])(module)
                except Exception as e:  # noqa: BLE001 - the program runs unpatched, and says so
                    sys.stderr.write("fuseprof: the patch layer failed to load: %r\n" % (e,))

            spec.loader.exec_module = run
            return spec

    sys.meta_path.insert(0, Finder())


_chain_previous_sitecustomize()
if any(os.environ.get(v) for v in ("FUSEPROF_PATCH", "FUSEPROF_COMPILE", "FUSEPROF_CUDA_GRAPHS")):
    _arm()
