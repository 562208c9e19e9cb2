"""Checks for runs written by `fuseprof collect` on the device.

  python check.py gpu-test EXPECTED.json RUN.sqlite      counts against the program's own
  python check.py compare RUN.sqlite KINETO.json          kernels and GPU time vs the PyTorch profiler
  python check.py summary RUN.sqlite                      row counts
  python check.py pids RUN.sqlite                         per process: name, kernels, devices, ranges
Prints one JSON object; exits 1 when a check fails.
"""
import json, os, sqlite3, sys


def connect(path):
    """The run at `path`, read-only: a missing run is an error here, not an empty file that
    the next `fuseprof collect -o` to the same path would refuse to replace."""
    if not os.path.isfile(path):
        sys.exit(f"{path}: no such run")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def q(db, sql, *args):
    return db.execute(sql, args).fetchall()


def one(db, sql, *args):
    return q(db, sql, *args)[0][0]


def summary(db):
    out = {}
    for t in ("kernels", "memops", "api_calls", "ranges", "processes", "threads", "devices", "strings"):
        out[t] = one(db, f"select count(*) from {t}")
    out["ranges_by_kind"] = dict(q(db, "select kind, count(*) from ranges group by kind"))
    out["pids_with_kernels"] = one(db, "select count(distinct pid) from kernels")
    out["run"] = dict(zip([d[0] for d in db.execute("select * from run").description], q(db, "select * from run")[0]))
    out["devices_rows"] = q(db, "select id, name, compute_major, compute_minor, sm_count, memory_bytes from devices")
    return out


def pids(db):
    rows = q(db, """select p.pid, p.name,
                     (select count(*) from kernels k where k.pid = p.pid),
                     (select group_concat(distinct k.device_id) from kernels k where k.pid = p.pid),
                     (select count(*) from ranges r where r.pid = p.pid and r.kind = 'nvtx_push_pop'),
                     (select count(*) from ranges r where r.pid = p.pid and r.kind = 'nvtx_mark')
                     from processes p order by p.pid""")
    return {"processes": [dict(pid=r[0], name=r[1], kernels=r[2], devices=r[3], push_pop=r[4], marks=r[5])
                          for r in rows]}


def gpu_test(expected_path, run_path):
    exp = json.load(open(expected_path))
    db = connect(run_path)
    got = {
        "kernels": one(db, "select count(*) from kernels k join strings s on s.id=k.name_id where s.value like 'add_one%'"),
        "memcpy_htod": one(db, "select count(*) from memops where kind='memcpy' and copy_kind='HtoD'"),
        "memcpy_dtoh": one(db, "select count(*) from memops where kind='memcpy' and copy_kind='DtoH'"),
        "memsets": one(db, "select count(*) from memops where kind='memset'"),
        "nvtx_push_pop": one(db, "select count(*) from ranges where kind='nvtx_push_pop'"),
        "nvtx_start_end": one(db, "select count(*) from ranges where kind='nvtx_start_end'"),
        "nvtx_marks": one(db, "select count(*) from ranges where kind='nvtx_mark'"),
        "cross_thread_ranges": one(db, "select count(*) from ranges where kind='nvtx_start_end' and end_tid is not null and end_tid != tid"),
        "streams": one(db, "select count(distinct stream_id) from kernels"),
    }
    extra = {
        "domain_ranges": one(db, "select count(*) from ranges r join strings s on s.id=r.domain_id where s.value=?", exp["domain"]),
        "category_worker": one(db, "select count(*) from ranges r join strings s on s.id=r.category_id where s.value='worker'"),
        "colored": one(db, "select count(*) from ranges where color is not null"),
        "thread_names": [r[0] for r in q(db, "select name from threads where name like 'worker-%' order by name")],
        "unclosed": one(db, "select count(*) from ranges where end_ns is null and kind != 'nvtx_mark'"),
        # Clock alignment: each kernel's launch call lies inside a 'launch' range of its thread,
        # and the kernel starts after its launch call did.
        "launches_inside_ranges": one(db, """
            select count(*) from kernels k join api_calls a on a.pid=k.pid and a.correlation_id=k.correlation_id
            where exists (select 1 from ranges r join strings s on s.id=r.name_id
                          where s.value='launch' and r.pid=a.pid and r.tid=a.tid
                          and r.start_ns <= a.start_ns and a.end_ns <= r.end_ns)"""),
        "kernels_after_launch": one(db, """
            select count(*) from kernels k join api_calls a on a.pid=k.pid and a.correlation_id=k.correlation_id
            where a.start_ns <= k.start_ns"""),
        "api_calls": one(db, "select count(*) from api_calls"),
        "driver_calls": one(db, "select count(*) from api_calls where api='driver'"),
    }
    ok = all(got[k] == exp[k] for k in got) and extra["launches_inside_ranges"] == exp["kernels"] \
        and extra["kernels_after_launch"] == exp["kernels"] and extra["unclosed"] == 0 \
        and len(extra["thread_names"]) == exp["worker_threads"] and extra["domain_ranges"] == 26
    return {"ok": ok, "expected": exp, "got": got, "extra": extra}


def compare(run_path, kineto_path):
    db = connect(run_path)
    ours = q(db, "select s.value, k.start_ns, k.end_ns from kernels k join strings s on s.id=k.name_id order by k.start_ns")
    tr = json.load(open(kineto_path))
    ev = [e for e in tr["traceEvents"] if e.get("cat") == "kernel"]
    ev.sort(key=lambda e: float(e["ts"]))
    theirs = [(e["name"], float(e["dur"])) for e in ev]
    names_ours = [r[0] for r in ours]
    names_theirs = [t[0] for t in theirs]
    mismatches = [i for i, (a, b) in enumerate(zip(names_ours, names_theirs)) if a != b]
    gpu_ours_ms = sum(r[2] - r[1] for r in ours) / 1e6
    gpu_theirs_ms = sum(t[1] for t in theirs) / 1e3
    rel = abs(gpu_ours_ms - gpu_theirs_ms) / gpu_theirs_ms if gpu_theirs_ms else None
    memcpy_theirs = sum(1 for e in tr["traceEvents"] if e.get("cat") == "gpu_memcpy")
    memset_theirs = sum(1 for e in tr["traceEvents"] if e.get("cat") == "gpu_memset")
    memcpy_ours = one(db, "select count(*) from memops where kind='memcpy'")
    memset_ours = one(db, "select count(*) from memops where kind='memset'")
    same_order = len(names_ours) == len(names_theirs) and not mismatches
    out = {
        "ok": same_order and rel is not None and rel <= 0.02,
        "kernels_ours": len(names_ours), "kernels_profiler": len(names_theirs),
        "same_names_same_order": same_order, "first_mismatches": [(i, names_ours[i][:80], names_theirs[i][:80]) for i in mismatches[:3]],
        "gpu_ms_ours": round(gpu_ours_ms, 4), "gpu_ms_profiler": round(gpu_theirs_ms, 4),
        "gpu_time_rel_diff": rel, "memcpy_ours": memcpy_ours, "memcpy_profiler": memcpy_theirs,
        "memset_ours": memset_ours, "memset_profiler": memset_theirs,
    }
    return out


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "gpu-test":
        r = gpu_test(sys.argv[2], sys.argv[3])
    elif cmd == "compare":
        r = compare(sys.argv[2], sys.argv[3])
    elif cmd == "pids":
        r = pids(connect(sys.argv[2]))
    else:
        r = summary(connect(sys.argv[2]))
    print(json.dumps(r, default=str))
    sys.exit(0 if r.get("ok", True) else 1)
