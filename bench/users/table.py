"""Prints the Markdown table of a matrix run (bench/users/matrix.sh's OUT_DIR): per row, the
steps fuseprof found, what advise proposed and bench applied, and each mode's figures beside
the ones the script printed for its own timed loop in the same runs.

    python3 bench/users/table.py OUT_DIR [ROW ...]

The script's prints come in the order bench runs it: the baseline with op shapes for advise,
then per mode the rounds (baseline, patched, patched, baseline, ...), with the first mode
followed by one run per side with op ranges for the per-op diff.
"""
import json
import os
import re
import sys


def prints(path):
    out = []
    for line in open(path):
        if line.startswith("fuseprof bench --"):
            break
        m = re.search(r"([0-9]+\.[0-9]+) ?ms", line)
        if m:
            out.append(float(m.group(1)))
    return out


def order(rounds):
    """Which side each of a mode's runs was, in the order bench ran them."""
    sides = []
    for r in range(rounds):
        sides += ["baseline", "patched"] if r % 2 == 0 else ["patched", "baseline"]
    return sides


def row(out_dir, name):
    text = open(os.path.join(out_dir, name + ".txt")).read()
    path = os.path.join(out_dir, name + ".json")
    if not os.path.exists(path):
        why = open(os.path.join(out_dir, name + ".log")).read().strip().splitlines()
        return [f"| `{name}` | | | | | | | | {why[-1] if why else 'failed'} |"]
    j = json.load(open(path))
    printed = prints(os.path.join(out_dir, name + ".txt"))
    rounds = len(j["modes"][0]["baseline"]["rounds_ms"])
    at = 1  # the advise run's print
    steps = j["modes"][0]["baseline"]["steps"][0]
    found = f"{steps['count']} {steps['what']}; loop of {steps['loop_steps']} {steps['loop_bounds']}"
    chosen = j["choice"]["apply"]
    replaced = [p for p in chosen if p in j["patch"].get("patched", {})]
    missing = [p for p in chosen if p not in replaced]
    models = j["patch"].get("models", {})
    rewrites = sum(m.get("graph_rewrites", 0) for m in models.values())
    chains = f"{len(j['choice']['advised'])} proposed; replaced: {', '.join(replaced) or 'nothing'}"
    chains += f" ({rewrites} graph sites)" if rewrites else ""
    chains += f"; chosen, found nowhere: {', '.join(missing)}" if missing else ""
    lines = []
    for i, m in enumerate(j["modes"]):
        runs = order(rounds)
        mine = {"baseline": [], "patched": []}
        for side in runs:
            if at < len(printed):
                mine[side].append(printed[at])
            at += 1
        if i == 0:
            at += 2  # the op-range runs of the diff
        speed = "refused" if m.get("refused") else f"{m['speedup']:.2f}x"
        if i == len(j["modes"]) - 1:
            speed += "; numerics " + ("passed" if j["numerics_passed"] else f"FAILED: {j['numerics_problem']}")
        first = i == 0
        lines.append("| {} | {} | {} | {} | {:.3f} | {} | {:.3f} | {} | {} |".format(
            f"`{name}`" if first else "", found if first else "", chains if first else "", m["label"],
            m["baseline"]["median_ms"], ", ".join(f"{x:.2f}" for x in mine["baseline"]),
            m["patched"]["median_ms"], ", ".join(f"{x:.2f}" for x in mine["patched"]), speed))
    return lines


def main():
    out_dir = sys.argv[1]
    names = sys.argv[2:] or sorted(f[:-4] for f in os.listdir(out_dir) if f.endswith(".txt") and f[:-4] not in (
        "env", "done", "not_run"))
    print("| row | steps found | chains | mode | baseline ms | program's clock | patched ms | program's clock "
          "| speed-up |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        for line in row(out_dir, name):
            print(line)


if __name__ == "__main__":
    main()
