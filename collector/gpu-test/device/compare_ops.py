"""Do two runs name the same PyTorch ops with the same input shapes?

  python compare_ops.py A.sqlite B.sqlite

Counts push/pop ranges per (name, input dims) in each run (module ranges left out) and prints
one JSON object: totals, how many (name, dims) pairs agree, and the largest differences.
Used to check fuseprof's op observer against torch.autograd.profiler.emit_nvtx on the same
script. Exits 1 when the op counts differ.
"""
import collections, json, sys

from check import connect


def ops(path):
    db = connect(path)
    rows = db.execute("""select n.value, coalesce(d.value, '') from ranges r
                         join strings n on n.id = r.name_id
                         left join strings d on d.id = r.input_dims_id
                         left join strings dom on dom.id = r.domain_id
                         where r.kind = 'nvtx_push_pop' and coalesce(dom.value, '') != 'pytorch.modules'""")
    return collections.Counter(rows.fetchall())


def main():
    a, b = ops(sys.argv[1]), ops(sys.argv[2])
    keys = set(a) | set(b)
    diff = sorted(((a[k] - b[k], k) for k in keys if a[k] != b[k]), key=lambda x: -abs(x[0]))
    with_dims = lambda c: sum(n for (name, dims), n in c.items() if dims not in ("", "[]"))
    out = {
        "a_ranges": sum(a.values()), "b_ranges": sum(b.values()),
        "a_with_shapes": with_dims(a), "b_with_shapes": with_dims(b),
        "pairs": len(keys), "pairs_equal": len(keys) - len(diff),
        "largest_differences_a_minus_b": [[d, k[0], k[1][:120]] for d, k in diff[:15]],
        "ok": not diff,
    }
    print(json.dumps(out, indent=1))
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
