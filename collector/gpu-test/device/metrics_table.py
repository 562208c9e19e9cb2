"""Tables for metrics_check.sh, read straight from a run file (sqlite3, standard library only).

  metrics_table.py kernels RUN.sqlite         per-kernel counters of a GEMM, softmax, copy, fMHA
  metrics_table.py overhead OVERHEAD.jsonl    time per step with and without --metrics memory
  metrics_table.py ncu RUN.sqlite NCU.csv     Nsight Compute's DRAM bytes beside fuseprof's
"""
import csv, json, re, sqlite3, statistics, sys

# Kernel families checked, by name (first match wins).
FAMILIES = [
    ("fmha", re.compile(r"fmha|flash|attention", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|sm90_xmma|nvjet", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("copy", re.compile(r"copy|CatArray", re.I)),
]


def family(name):
    for fam, rx in FAMILIES:
        if rx.search(name):
            return fam
    return None


def per_kernel(db):
    """{kernel_id: (name, duration_ns, {quantity: (value, shared, estimated, coverage)})}"""
    c = sqlite3.connect(db)
    q = {mid: qty for mid, qty in c.execute("SELECT id, quantity FROM counter_metrics")}
    out = {}
    for kid, name, dur in c.execute(
            "SELECT k.id, s.value, k.end_ns - k.start_ns FROM kernels k "
            "JOIN strings s ON s.id = k.name_id"):
        out[kid] = (name, dur, {})
    for kid, mid, v, sh, est, cov in c.execute(
            "SELECT kernel_id, metric_id, value, shared, estimated, coverage FROM kernel_counters"):
        if kid in out:
            out[kid][2][q[mid]] = (v, sh, est, cov)
    return c, out


def kernels(db):
    c, ks = per_kernel(db)
    quantities = sorted({qq for _, _, m in ks.values() for qq in m})
    with_any = sum(1 for _, _, m in ks.values() if m)
    print(f"{len(ks)} kernels, {with_any} with counters; quantities: {', '.join(quantities)}")
    # Alignment: how much of each sum counter's sampled total was attributed to kernels.
    for mid, qty, kind in c.execute("SELECT id, quantity, kind FROM counter_metrics"):
        if kind != "sum":
            continue
        total = c.execute("SELECT COALESCE(SUM(value),0) FROM counter_samples WHERE metric_id=?",
                          (mid,)).fetchone()[0]
        got = c.execute("SELECT COALESCE(SUM(value),0) FROM kernel_counters WHERE metric_id=?",
                        (mid,)).fetchone()[0]
        print(f"{qty} (metric {mid}): {total/1e9:.3f} GB sampled, {got/1e9:.3f} GB attributed "
              f"to kernels ({100*got/max(total,1):.1f}%; the rest ran in copies or idle time)")
    print()
    print(f"{'family':8} {'n':>6} {'median us':>10} " + " ".join(f"{q:>18}" for q in quantities)
          + f" {'GB/s':>8} {'shared':>7} {'estim.':>7}  kernel")
    groups = {}
    for name, dur, m in ks.values():
        fam = family(name)
        if fam and m:
            groups.setdefault((fam, name), []).append((dur, m))
    # The most frequent kernel names of each family.
    shown = {}
    for (fam, name), rows in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        if shown.get(fam, 0) >= 3:
            continue
        shown[fam] = shown.get(fam, 0) + 1
        med = lambda xs: statistics.median(xs) if xs else float("nan")
        dur = med([d for d, _ in rows])
        vals = [med([m[q][0] for _, m in rows if q in m]) for q in quantities]
        byts = med([m.get("dram_read_bytes", (0,))[0] + m.get("dram_write_bytes", (0,))[0]
                    for _, m in rows])
        sh = sum(1 for _, m in rows if any(v[1] for v in m.values())) / len(rows)
        es = sum(1 for _, m in rows if any(v[2] for v in m.values())) / len(rows)
        print(f"{fam:8} {len(rows):>6} {dur/1e3:>10.1f} " + " ".join(f"{v:>18.4g}" for v in vals)
              + f" {byts/max(dur,1):>8.1f} {sh:>7.0%} {es:>7.0%}  {name[:90]}")


def overhead(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    by = {}
    for r in rows:
        by.setdefault(r["config"], []).append(r["result"]["per_iter_ms"])
    base = statistics.median(by.get("none", [float("nan")]))
    print(f"{'config':10} {'rounds':>6} {'median ms/step':>15} {'vs none':>8}  per round")
    for cfg, xs in by.items():
        m = statistics.median(xs)
        print(f"{cfg:10} {len(xs):>6} {m:>15.3f} {100*(m/base-1):>+7.1f}%  "
              + ", ".join(f"{x:.3f}" for x in xs))


def ncu(db, csv_path):
    text = open(csv_path).read().splitlines()
    start = next((i for i, l in enumerate(text) if l.startswith('"ID"')), None)
    if start is None:
        print("no ncu table in", csv_path)
        return
    reader = list(csv.DictReader(text[start:]))
    rows = [r for r in reader if r.get("ID", "").isdigit()]
    _, ks = per_kernel(db)
    by_name = {}
    for name, dur, m in ks.values():
        if "dram_read_bytes" in m:
            by_name.setdefault(name, []).append((dur, m))
    print(f"{'kernel':60} {'ncu read MB':>12} {'fp read MB':>11} {'ratio':>6} "
          f"{'ncu write MB':>13} {'fp write MB':>12} {'ratio':>6} {'n':>5}")
    for r in rows:
        kname = r.get("Kernel Name", "")
        unit_r = r.get("dram__bytes_read.sum", "0").replace(",", "")
        unit_w = r.get("dram__bytes_write.sum", "0").replace(",", "")
        try:
            nr, nw = float(unit_r), float(unit_w)
        except ValueError:
            continue
        # ncu prints short names (no arguments); match fuseprof's full names by prefix.
        short = kname.split("(")[0].strip()
        cands = [v for n, v in by_name.items() if short and short in n]
        if not cands:
            print(f"{kname[:60]:60} {nr/1e6:>12.3f} {'-':>11}")
            continue
        # The most frequent fuseprof name that matches.
        vals = max(cands, key=len)
        fr = statistics.median(m["dram_read_bytes"][0] for _, m in vals)
        fw = statistics.median(m.get("dram_write_bytes", (0,))[0] for _, m in vals)
        print(f"{kname[:60]:60} {nr/1e6:>12.3f} {fr/1e6:>11.3f} {fr/max(nr,1):>6.2f} "
              f"{nw/1e6:>13.3f} {fw/1e6:>12.3f} {fw/max(nw,1):>6.2f} {len(vals):>5}")
    print("ncu units are as its CSV gives them (bytes expected: check the unit row)")
    if start + 1 < len(text):
        print("unit row:", text[start + 1][:200])


if __name__ == "__main__":
    cmd = sys.argv[1]
    {"kernels": kernels, "overhead": overhead, "ncu": ncu}[cmd](*sys.argv[2:])
