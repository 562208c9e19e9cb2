"""Compare a device run (check.json, bench.json in a folder) with the run of record.

    python3 kernels/bench/compare_record.py kernels/bench/results/run13-h100 $OUT

Checks: the same checks (name, dtype) must all pass; a check missing from either side is listed.
Benchmarks: for each row of the record (kernel and shape), ours in the record and in the new run,
and whether the new time is within the noise band of the record; the baselines (eager,
torch.compile, SDPA) and the kernel that ran are shown beside it, not judged.

The noise band is the larger of BAND_PCT (default 6%) of the record and BAND_US (default 1 us).
Why: runs 12 and 13 (run 12 in git at commit e2b39b2) ran the same kernels on the same H100
one call apart; on the rows both timed the same way, ours moved by up to 5.4% (LayerNorm +
partition, stage 3: 12.4 vs 13.0 us) and 4.2% (bias + residual [8192, 768]: 19.6 vs 18.8 us),
i.e. by up to 0.8 us; the attention rows of six calls of round 11 spread over 3% (BERT-128
without a mask: 25.4 to 26.2 us). A row outside the band on the slow side is a regression to
look at; outside on the fast side, a change to explain.

Exit status 0 when every check passes and every row is within the band or faster, else 1.
"""
import json
import os
import sys

BAND_PCT = float(os.environ.get("BAND_PCT", "6"))
BAND_US = float(os.environ.get("BAND_US", "1.0"))


def load(folder, name):
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def kernel_of(note):
    """The kernel named in a bench row's note (`ours=NAME; ...`), or ''."""
    for part in note.split(";"):
        part = part.strip()
        if part.startswith("ours="):
            return part[len("ours="):].split(" ")[0]
    return ""


def fmt(v):
    return "-" if v is None else f"{v:.1f}"


def compare_checks(rec, new):
    ok = True
    if new is None:
        print("checks: no check.json in the new run")
        return False
    key = lambda c: (c["name"], c["dtype"])
    r = {key(c): c for c in rec}
    n = {key(c): c for c in new}
    passed = sum(c["ok"] for c in new)
    print(f"checks: {passed}/{len(new)} passed (record: {sum(c['ok'] for c in rec)}/{len(rec)})")
    for k in sorted(set(r) | set(n)):
        if k not in n:
            print(f"  MISSING in the new run: {k[0]} [{k[1]}]")
            ok = False
        elif k not in r:
            print(f"  new check: {k[0]} [{k[1]}] {'pass' if n[k]['ok'] else 'FAIL'}")
        if k in n and not n[k]["ok"]:
            print(f"  FAIL: {k[0]} [{k[1]}] rel_err={n[k]['rel_err']} {n[k].get('note', '')}")
            ok = False
    return ok and passed == len(new)


def compare_bench(rec, new):
    if new is None:
        print("bench: no bench.json in the new run")
        return False
    ok = True
    rows = {(b["kernel"], b["shape"]): b for b in new["rows"]}
    print(f"bench: record {rec['info']['device']} {rec['info']['date']}, new {new['info']['device']} "
          f"{new['info']['date']}; copy {rec['ceilings']['copy_GBps']:.0f} vs {new['ceilings']['copy_GBps']:.0f} GB/s; "
          f"noise band max({BAND_PCT:g}%, {BAND_US:g} us)")
    print(f"| kernel | shape | ours record (us) | ours new (us) | change | verdict | eager rec / new | "
          f"compiled rec / new | SDPA rec / new | x SDPA rec / new | kernel |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rec["rows"]:
        n = rows.get((r["kernel"], r["shape"]))
        if n is None or n.get("ours_us") is None:
            print(f"| {r['kernel']} | {r['shape']} | {fmt(r['ours_us'])} | - | - | MISSING | | | | | |")
            ok = False
            continue
        a, b = r["ours_us"], n["ours_us"]
        band = max(BAND_PCT / 100 * a, BAND_US)
        if abs(b - a) <= band:
            verdict = "within noise"
        elif b < a:
            verdict = "FASTER beyond noise"
        else:
            verdict = "SLOWER beyond noise"
            ok = False
        kr, kn = kernel_of(r["note"]), kernel_of(n["note"])
        kernel = kn if kr == kn else f"{kr} -> {kn}"
        xs = lambda x: fmt(x.get("x_vs_sdpa")) if x.get("x_vs_sdpa") is None else f"{x['x_vs_sdpa']:.2f}"
        print(f"| {r['kernel']} | {r['shape']} | {a:.1f} | {b:.1f} | {100 * (b - a) / a:+.1f}% | {verdict} | "
              f"{fmt(r.get('eager_us'))} / {fmt(n.get('eager_us'))} | {fmt(r.get('compiled_us'))} / "
              f"{fmt(n.get('compiled_us'))} | {fmt(r.get('sdpa_us'))} / {fmt(n.get('sdpa_us'))} | "
              f"{xs(r)} / {xs(n)} | {kernel} |")
        if kr != kn:
            ok = False
    return ok


def main():
    record, run = sys.argv[1], sys.argv[2]
    ok_checks = compare_checks(load(record, "check.json"), load(run, "check.json"))
    print()
    ok_bench = compare_bench(load(record, "bench.json"), load(run, "bench.json"))
    print()
    print("RESULT:", "every check passes and every row is within noise of the record (or faster)"
          if ok_checks and ok_bench else "see the lines above")
    sys.exit(0 if ok_checks and ok_bench else 1)


if __name__ == "__main__":
    main()
