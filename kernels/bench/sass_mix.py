"""Instruction mix and stall samples per SASS opcode from an Nsight Compute source export
(`ncu --import R.ncu-rep --page source --print-source sass --csv`, gzipped or not), divided by
the work items the kernel ran (e.g. warp-items = windows x heads x 4 warps for fmha_fwd_window).

    python3 kernels/bench/sass_mix.py ncu_window_sass.csv.gz 49152
"""
import collections
import csv
import gzip
import sys


def main(path, items):
    op = gzip.open if path.endswith(".gz") else open
    rows = list(csv.reader(op(path, "rt")))
    hdr = rows[1]
    i_src, i_ex = hdr.index("Source"), hdr.index("Instructions Executed")
    i_st = hdr.index("Warp Stall Sampling (All Samples)")
    ex, st = collections.Counter(), collections.Counter()
    for r in rows[2:]:
        if len(r) < len(hdr) or not r[i_src].split():
            continue
        words = r[i_src].split()
        name = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        ex[name] += int(r[i_ex] or 0)
        st[name] += int(r[i_st] or 0)
    total, samples = sum(ex.values()), sum(st.values())
    print(f"{total} warp instructions executed, {total / items:.1f} per item; {samples} stall samples")
    print("| opcode | per item | % of instructions | % of stall samples |\n|---|---|---|---|")
    for name, n in ex.most_common(25):
        print(f"| {name} | {n / items:.1f} | {100 * n / total:.1f} | {100 * st[name] / max(samples, 1):.1f} |")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
