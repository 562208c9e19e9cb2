"""Summarises overhead.sh's rounds: per configuration, the median (and min..max) wall time per
iteration over the interleaved rounds, and its overhead against the untraced median.

    python3 overhead_table.py $OUT/diag.jsonl   (overhead_diag.sh; or overhead.sh's overhead.jsonl)
"""
import json, statistics, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["config"], []).append(r["result"]["per_iter_ms"])
base = statistics.median(by["base"])
print(f"rounds: {max(r['round'] for r in rows)}; untraced median {base:.3f} ms/iter")
print("| configuration | median ms/iter | overhead (median) | range over rounds |")
print("|---|---|---|---|")
for name, v in by.items():
    m = statistics.median(v)
    print(f"| {name} | {m:.3f} | {100 * (m / base - 1):+.1f} % | "
          f"{100 * (min(v) / base - 1):+.1f} % .. {100 * (max(v) / base - 1):+.1f} % |")

# Rounds are interleaved, so each configuration also compares with its own round's untraced
# loop: on a noisy host these paired ratios move less than the medians above.
rounds = sorted({r["round"] for r in rows})
cell = {(r["round"], r["config"]): r["result"]["per_iter_ms"] for r in rows}
print()
print("| configuration | " + " | ".join(f"round {k} vs its base" for k in rounds) + " |")
print("|---|" + "---|" * len(rounds))
for name in by:
    out = []
    for k in rounds:
        b, v = cell.get((k, "base")), cell.get((k, name))
        out.append(f"{100 * (v / b - 1):+.1f} %" if b and v else "–")
    print(f"| {name} | " + " | ".join(out) + " |")

# Host noise and cost, where the rows have them (workload.py since 2026-11-23): CPU time the VM
# lost to its host (steal, all CPUs) and CPU time the traced process used, per step.
if any("steal_ms_per_iter" in r["result"] for r in rows):
    print()
    print("| configuration | round | ms/iter | steal ms/iter | process CPU ms/iter |")
    print("|---|---|---|---|---|")
    for r in rows:
        x = r["result"]
        print(f"| {r['config']} | {r['round']} | {x['per_iter_ms']:.3f} | {x.get('steal_ms_per_iter', float('nan')):.3f} | "
              f"{x.get('process_cpu_ms_per_iter', float('nan')):.3f} |")

# Each step's own time (iter_ms, host time from one step's end to the next): its median is what
# a step costs outside the slow episodes (stretches of 12-17 ms steps that hit traced and untraced
# processes alike on this host), and the count of steps over 1.2x the untraced median says how
# much of a round such episodes took.
if all("iter_ms" in r["result"] for r in rows):
    steps = {(r["round"], r["config"]): r["result"]["iter_ms"][20:] for r in rows}
    base_step = statistics.median(statistics.median(steps[(k, "base")]) for k in rounds if (k, "base") in steps)
    print()
    print(f"per-step medians (steps 21 on); untraced {base_step:.3f} ms")
    print("| configuration | median step ms (median over rounds) | overhead | " +
          " | ".join(f"round {k}: median step, slow steps" for k in rounds) + " |")
    print("|---|---|---|" + "---|" * len(rounds))
    for name in by:
        meds = [statistics.median(steps[(k, name)]) for k in rounds if (k, name) in steps]
        m = statistics.median(meds)
        cells = []
        for k in rounds:
            s = steps.get((k, name))
            cells.append(f"{statistics.median(s):.2f}, {sum(x > 1.2 * base_step for x in s)}" if s else "–")
        print(f"| {name} | {m:.3f} | {100 * (m / base_step - 1):+.1f} % | " + " | ".join(cells) + " |")
