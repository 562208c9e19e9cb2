"""Host cost of one kernel launch, with and without an NVTX range around it, in a CPU-bound loop.

  python launch_bench.py [--launches N] [--rounds R] [--profiler none|cuda|cpu_cuda] [--out F.json]

Each round times N launches of a tiny kernel (x.add_(1) on 256 floats: the GPU finishes each in
about 2 us, so the loop is bound by the host) in two loops that alternate:
  plain   x.add_(1)
  nvtx    range_push(<an emit_nvtx-like name with shapes>); x.add_(1); range_pop()
Reported: median host ns per launch of each loop over the rounds. Run it under `fuseprof collect`
with different FUSEPROF_CUPTI_KINDS, or with --profiler, and subtract the untraced run: what is
left is what tracing costs the launching thread per launch (and per NVTX range), free of the
process-to-process noise that per-step timings of a whole model carry.
"""
import argparse, json, statistics, time

import torch

NAME = "aten::add_, seq = 1234, sizes = [[256], []], input_op_ids = [(0, 0), (0, 0)]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--profiler", choices=["none", "cuda", "cpu_cuda"], default="none")
    ap.add_argument("--out")
    a = ap.parse_args()
    x = torch.ones(256, device="cuda")
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    n = a.launches

    def plain():
        for _ in range(n):
            x.add_(1)

    def nvtx():
        for _ in range(n):
            push(NAME)
            x.add_(1)
            pop()

    def timed(f):
        torch.cuda.synchronize()
        t = time.perf_counter_ns()
        f()
        dt = time.perf_counter_ns() - t
        torch.cuda.synchronize()
        return dt / n

    prof = None
    if a.profiler != "none":
        from torch.profiler import profile, ProfilerActivity
        acts = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if a.profiler == "cpu_cuda" else [])
        prof = profile(activities=acts, record_shapes=a.profiler == "cpu_cuda")
        prof.__enter__()
    for _ in range(2):  # warm-up
        timed(plain), timed(nvtx)
    res = {"plain": [], "nvtx": []}
    for _ in range(a.rounds):
        res["plain"].append(timed(plain))
        res["nvtx"].append(timed(nvtx))
    if prof is not None:
        prof.__exit__(None, None, None)
    out = {k + "_ns_per_launch": statistics.median(v) for k, v in res.items()}
    out.update({k + "_rounds": [round(t, 1) for t in v] for k, v in res.items()})
    out["launches_per_round"] = n
    print(json.dumps(out))
    if a.out:
        json.dump(out, open(a.out, "w"))


if __name__ == "__main__":
    main()
