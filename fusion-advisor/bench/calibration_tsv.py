"""Merges the parts `calibrate.py` wrote into the run of record and writes the estimator's table.

    python3 fusion-advisor/bench/calibration_tsv.py RUN_DIR [PART.json ...]

With parts: merges them into RUN_DIR/calibration.json. Then writes fusion-advisor/src/calibration.tsv
from RUN_DIR/calibration.json: the fp16 rows at batch sizes 1, 4, 16, 64 and 256. The other rows
(fp16 at 2, 8 and 128, and every bf16 row) are held out: estimate.rs's tests check the
estimator against all of them.
"""
import json
import os
import sys

CALIBRATING = (1, 4, 16, 32, 64, 256)
HERE = os.path.dirname(os.path.abspath(__file__))


def up8(x):
    return -(-x // 8) * 8


def estimator_params(row):
    """The parameters estimate.rs's Kernel reads, in its order."""
    p = dict(row["kernel_params"])
    if row["family"] == "padded_gemm":
        # As the advisor's rule builds it: N and K padded, the activations' per-call padding.
        b, m, n, k = p["batch"], p["m"], p["n"], p["k"]
        pad = 0
        if up8(k) != k:
            pad += b * m * (k + up8(k))
        if not row["params"]["b_is_weight"] and (up8(k) != k or up8(n) != n):
            pad += b * (k * n + up8(k) * up8(n))
        p.update(n=up8(n), k=up8(k), pad_bytes=2 * pad)
    return " ".join(f"{k}={v}" for k, v in p.items())


def main():
    run_dir = sys.argv[1]
    record = os.path.join(run_dir, "calibration.json")
    if len(sys.argv) > 2:
        parts = [json.load(open(p)) for p in sys.argv[2:]]
        rows = [r for part in parts for r in part["rows"]]
        rows.sort(key=lambda r: (r["family"], r["label"], r["dtype"], r["batch"]))
        head = {k: parts[0][k] for k in ("device", "driver", "torch")}
        head["date"] = min(p["date"] for p in parts)
        head["command"] = ("PYTHONPATH=kernels/python:fusion-advisor/python python3 fusion-advisor/bench/calibrate.py "
                           "PART.json --part I/4, one part per GPU")
        with open(record, "w") as f:
            json.dump(dict(head, rows=rows), f, indent=1)
            f.write("\n")
    run = json.load(open(record))
    rel = os.path.relpath(record, os.path.join(HERE, "..", ".."))
    lines = [
        "# What each bundled kernel took in `fuseprof bench`'s driver (GPU time per call), for the estimator.",
        f"# Source: {rel} ({run['device']}, driver {run['driver']}, torch {run['torch']}, {run['date'][:10]}):",
        "# its fp16 rows at batch sizes " + ", ".join(map(str, CALIBRATING)) + "; a test checks every line against",
        "# that file and every other row of it (fp16 at other batch sizes, bf16) against the estimate.",
        "# family\tparams (name=value, as src/estimate.rs's Kernel reads them)\tours_us\tbench_kernel\tbench_shape",
    ]
    for r in run["rows"]:
        if r["dtype"] != "fp16" or r["batch"] not in CALIBRATING or r["status"] != "passed":
            continue
        lines.append("\t".join((r["family"], estimator_params(r), f"{r['ours_us']:.3f}", r["label"],
                                f"batch {r['batch']} fp16")))
    with open(os.path.join(HERE, "..", "src", "calibration.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
