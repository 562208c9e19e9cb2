"""Compare the PTX of every kernel between two dumps of `cargo run --example ptx`.

    python3 kernels/bench/ptx_diff.py BEFORE_DIR AFTER_DIR [--ptxas PTXAS]

Each dump holds one PTX file per (source, dtype, head_dim, target) build. Kernels are matched by
name, dtype, variant and GPU whatever file they sit in, so a kernel moved to another source file
still compares against its old self. Each kernel's body is compared after removing what does not
reach the GPU's code: comments, line info (`.file` / `.loc` lines, `.debug` sections) and the numbering of branch labels
(NVRTC numbers them by the kernel's position in its module). Module-level declarations the body
names (shared arrays, globals) are compared with it. Prints one line per kernel and exits 1 if
any differs or is missing.

With --ptxas, each PTX file is also assembled for its GPU (sm_XY, or sm_90a for a compute_90a
build) and each kernel's machine code (its .text section in the cubin) compared byte for byte:
the check that a kernel moved from a compute_90a build to a compute_90 one runs the same code.
"""
import os
import re
import struct
import subprocess
import sys
import tempfile

ENTRY = re.compile(r"^\.(?:visible|weak)?\s*\.?(entry|func)\s+(\S+?)\(", re.M)
LABEL = re.compile(r"\$L__\w+")


def kernels(path):
    """{kernel name: normalised text} of one PTX file."""
    text = re.sub(r"^\s*\.section\s+\.debug\w*\s*\{.*?^\s*\}", "", open(path).read(), flags=re.M | re.S)
    lines = []
    for line in text.splitlines():
        line = line.split("//", 1)[0].rstrip()
        s = line.strip()
        if not s or s.startswith((".file", ".loc", ".version", ".target", ".address_size")):
            continue
        lines.append(line)
    body = "\n".join(lines)
    starts = [m for m in re.finditer(r"^\.(?:visible \.)?(?:entry|func) (\w+)\(", body, re.M)]
    module = body[: starts[0].start()] if starts else body
    decls = [d.strip() for d in module.splitlines() if d.strip()]
    out = {}
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(body)
        k = body[m.start():end]
        names = {}
        k = LABEL.sub(lambda x: names.setdefault(x.group(0), f"$L{len(names)}"), k)
        used = [d for d in decls if declared(d) and re.search(r"\b" + re.escape(declared(d)) + r"\b", k)]
        out[m.group(1)] = "\n".join(used + [ln for ln in k.splitlines() if ln.strip()])
    return out


def declared(decl):
    """The name a module-level declaration declares (`... NAME[...] = ...;`), or None."""
    m = re.search(r"([\w$]+)\s*(?:\[[^\]]*\])?\s*(?:=[^;]*)?;\s*$", decl)
    return m.group(1) if m else None


def build_key(fname):
    """(dtype, variant, GPU) from `SOURCE-DTYPE-VARIANT-TARGET.ptx`: a build for compute_90a
    and one for compute_90 are both for sm_90 GPUs, so a kernel that moved between them still
    compares (the file names printed show the target)."""
    dtype, variant, target = fname[:-4].split("-")[-3:]
    return dtype, variant, target.replace("compute_", "sm_").rstrip("a")


def load(d):
    found = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".ptx"):
            for name, text in kernels(os.path.join(d, f)).items():
                found[(name,) + build_key(f)] = (f, text)
    return found


def cubin_texts(ptxas, path):
    """{kernel: machine code} of the PTX file at path, assembled by ptxas for its target."""
    target = re.search(r"^\.target\s+(\w+)", open(path).read(), re.M).group(1)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        subprocess.run([ptxas, f"-arch={target}", path, "-o", cubin], check=True)
        d = open(cubin, "rb").read()
    shoff, = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQ", d, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx][4]
    out = {}
    for name, _, _, _, off, size in secs:
        n = d[strtab + name:d.index(b"\0", strtab + name)].decode()
        if n.startswith(".text."):
            out[n[len(".text."):]] = d[off:off + size]
    return out


def main():
    args = sys.argv[1:]
    ptxas = None
    if "--ptxas" in args:
        i = args.index("--ptxas")
        ptxas = args[i + 1]
        del args[i:i + 2]
    before, after = load(args[0]), load(args[1])
    sass = {}

    def code(d, f, name):
        if (d, f) not in sass:
            sass[(d, f)] = cubin_texts(ptxas, os.path.join(d, f))
        return sass[(d, f)].get(name)
    bad = 0
    for key in sorted(set(before) | set(after)):
        name = "{} {} head_dim={} {}".format(*key)
        if key not in after:
            print(f"REMOVED   {name}")
            continue
        if key not in before:
            print(f"NEW       {name}")
            continue
        same = before[key][1] == after[key][1]
        note = ""
        if ptxas:
            same_code = code(args[0], before[key][0], key[0]) == code(args[1], after[key][0], key[0])
            same = same and same_code
            note = ", machine code " + ("identical" if same_code else "DIFFERENT")
        bad += not same
        print(f"{'IDENTICAL' if same else 'DIFFERENT'} {name}  ({before[key][0]} -> {after[key][0]}{note})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
