"""Writes the manifest of one committed recording from the run itself and the checks made on it.

  python manifest.py RUN.sqlite --env ENV.json --what TEXT --command TEXT [--check CHECK.json]
                     [--check-key check_against_pytorch_profiler] [--spool-bytes N] --out M.json

ENV.json holds what the device script gathered once (gpu, driver, cuda, cupti, software, date).
Counts, dropped-record totals, CUPTI version and the device row are read from the run.
"""
import argparse, json, os

from check import connect, one, q, summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--env", required=True)
    ap.add_argument("--what", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--check")
    ap.add_argument("--check-key", default="check_against_pytorch_profiler")
    ap.add_argument("--profiler-command")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    db = connect(a.run)
    env = json.load(open(a.env))
    meta = dict(q(db, "select key, value from meta"))
    s = summary(db)
    dev = q(db, "select name, memory_bytes, sm_count, compute_major, compute_minor from devices order by id")
    m = {
        "date": env["date"],
        "gpu": "; ".join(f"{d[0]} ({(d[1] or 0) // 2**20} MiB, {d[2]} SMs, compute {d[3]}.{d[4]})" for d in dev),
        "driver": env["driver"],
        "cuda": env["cuda"],
        "cupti": f"{env['cupti']}, cuptiGetVersion {s['run'].get('cupti_version')}",
        "software": env["software"],
        "tracer": f"fuseprof collect {s['run'].get('tool_version')} (collector/, tracer collector/tracer)",
        "clock": "CUPTI timestamps (ns, CLOCK_REALTIME-based); NVTX host timestamps shifted onto them by the measured offset",
        "recording": os.path.basename(a.out).replace(".manifest.json", ".sqlite.gz"),
        "what": a.what,
        "command": a.command,
        "counts": {k: s[k] for k in ("kernels", "memops", "api_calls", "ranges", "processes", "threads", "strings")}
        | {"ranges_by_kind": s["ranges_by_kind"]},
        "cupti_dropped_records": int(meta.get("cupti_dropped_records", -1)),
        "nvtx_dropped_records": int(meta.get("nvtx_dropped_records", -1)),
        "capture": meta.get("capture"),
    }
    if a.check:
        c = json.load(open(a.check))
        if a.profiler_command:
            c = {"profiler_command": a.profiler_command} | c
        m[a.check_key] = c
    json.dump(m, open(a.out, "w"), indent=1)
    print(a.out, "kernels", m["counts"]["kernels"], "dropped", m["cupti_dropped_records"], m["nvtx_dropped_records"])


if __name__ == "__main__":
    main()
