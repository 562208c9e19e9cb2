"""The PEP 517 build backend behind `pip install .`: cargo builds fuseprof and the two libraries
it loads at run time, and this packs them into a wheel.

A Rust tool for Python users ships as a wheel holding the binary (maturin's `bindings = "bin"`
does that for one binary). fuseprof also needs libfuseprof_tracer.so (injected into the traced
program by `collect`) and libfuseprof_kernels.so (loaded by `bench`), which it finds next to its
executable or in `../lib/fuseprof` beside it. maturin packs the binary of one crate; this
backend, standard library only, packs the three: the binary as a script (installed in the
environment's `bin/`) and the libraries as data under `lib/fuseprof/`. Building needs the Rust
toolchain, as building from a checkout always does; nothing else.

    pip install .                  # build and install into the active environment
    pip wheel . -w dist            # the wheel alone (CI installs it into a fresh venv)

FUSEPROF_CARGO_PROFILE (default `release`) names the cargo profile to build with.
"""
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBS = ("libfuseprof_tracer.so", "libfuseprof_kernels.so")
SUMMARY = "Profile GPU models, find fusable operator chains, and measure the fix"


def _version():
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        text = f.read()
    package = text.split("[package]", 1)[1].split("\n[", 1)[0]
    m = re.search(r'^version\s*=\s*"([^"]+)"', package, re.M)
    if not m:
        raise RuntimeError("Cargo.toml: no [package] version")
    return m.group(1)


def _tag():
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    if not platform.startswith("linux"):
        raise RuntimeError(f"fuseprof builds on Linux only (this is {platform})")
    return f"py3-none-{platform}"


def _metadata(version):
    readme = ""
    path = os.path.join(ROOT, "README.md")
    if os.path.exists(path):
        with open(path) as f:
            readme = f.read()
    return (f"Metadata-Version: 2.1\nName: fuseprof\nVersion: {version}\nSummary: {SUMMARY}\n"
            f"License: see the repository\nRequires-Python: >=3.8\n"
            f"Description-Content-Type: text/markdown\n\n{readme}")


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _cargo_build(profile):
    cmd = ["cargo", "build", "--locked", "--profile", profile, "-p", "fuseprof", "-p", "fuseprof-tracer",
           "-p", "fuseprof-kernels"]
    try:
        subprocess.run(cmd, cwd=ROOT, check=True)
    except FileNotFoundError:
        raise RuntimeError("cargo not found: building fuseprof needs the Rust toolchain (https://rustup.rs)") from None
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    out = os.path.join(target, "debug" if profile == "dev" else profile)
    missing = [n for n in ("fuseprof",) + LIBS if not os.path.isfile(os.path.join(out, n))]
    if missing:
        raise RuntimeError(f"cargo built no {', '.join(missing)} in {out}")
    return out


def _payload(src):
    """The file's bytes, without debug information where `strip` is installed (the release
    profile keeps it for profiling fuseprof itself; a wheel has no use for it)."""
    strip = shutil.which("strip")
    if strip:
        with tempfile.TemporaryDirectory() as d:
            tmp = os.path.join(d, os.path.basename(src))
            shutil.copyfile(src, tmp)
            if subprocess.run([strip, "--strip-debug", tmp], capture_output=True).returncode == 0:
                with open(tmp, "rb") as f:
                    return f.read()
    with open(src, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    out = _cargo_build(os.environ.get("FUSEPROF_CARGO_PROFILE", "release"))
    tag = _tag()
    dist, data = f"fuseprof-{version}.dist-info", f"fuseprof-{version}.data"
    files = [(f"{data}/scripts/fuseprof", os.path.join(out, "fuseprof"), 0o755)]
    files += [(f"{data}/data/lib/fuseprof/{n}", os.path.join(out, n), 0o644) for n in LIBS]
    name = f"fuseprof-{version}-{tag}.whl"
    path = os.path.join(wheel_directory, name)
    tmp = path + ".tmp"
    records = []
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        def add(arcname, payload, mode=0o644):
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, payload)
            records.append(_record_line(arcname, payload))

        for arcname, src, mode in files:
            add(arcname, _payload(src), mode)
        add(f"{dist}/METADATA", _metadata(version).encode())
        add(f"{dist}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: fuseprof_build\nRoot-Is-Purelib: false\n"
                              f"Tag: {tag}\n").encode())
        records.append(f"{dist}/RECORD,,")
        z.writestr(zipfile.ZipInfo(f"{dist}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(records) + "\n")
    os.replace(tmp, path)  # no half-written wheel under the real name
    return name
