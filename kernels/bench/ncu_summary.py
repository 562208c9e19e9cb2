"""Condense an `ncu --page details --print-details all` text report to the tables that explain
a kernel's time: throughput, launch, occupancy, scheduler, warp stalls, instruction counts.

    python3 kernels/bench/ncu_summary.py ncu_window.txt > window.summary.txt
"""
import re
import sys

KEEP = ("GPU Speed Of Light Throughput", "Launch Statistics", "Occupancy", "Scheduler Statistics",
        "Warp State Statistics", "Instruction Statistics")


def main(path):
    section = None
    for line in open(path, errors="replace"):
        m = re.match(r"\s+Section: (.*)", line)
        if m:
            section = m.group(1).strip()
            if section in KEEP:
                print(f"\n== {section}")
            continue
        if section not in KEEP:
            continue
        s = line.rstrip()
        if not s.strip() or set(s.strip()) <= set("- ") or "Chart" in s:
            continue
        # the metric rows and the tool's own advice lines (OPT / INF), first lines only
        if re.match(r"\s+(OPT|INF|WRN)\s", s) or re.match(r"\s{4}\S.*\s\S+$", s):
            print(s[:160])


if __name__ == "__main__":
    main(sys.argv[1])
