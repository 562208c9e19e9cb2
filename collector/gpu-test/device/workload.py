"""Workloads for the collector's device checks: Swin-T / ViT-B/16 / BERT-base inference and one
Swin-T training step, each run as `warmup` untimed steps then `steps` measured ones.

  python workload.py MODEL [--steps N] [--warmup N] [--batch B]
                           [--window profiler|torchprof|torchprof_cuda|torchprof_cpu|none]
                           [--kineto OUT.json] [--timing OUT.json]

--window profiler   brackets the measured steps with torch.cuda.profiler.start()/stop(), for
                    `fuseprof collect --capture cudaProfilerApi`.
--window torchprof  runs the measured steps under torch.profiler (CPU+CUDA, record_shapes) and
                    writes the Chrome trace to --kineto and key_averages() next to it.
--window torchprof_cuda / torchprof_cpu: the profiler with CUDA activity only / CPU ops with
                    shapes only, for overhead comparisons.
--window alternate  switches recording on and off every --period steps with
                    torch.cuda.profiler.start()/stop(), for `fuseprof collect --capture
                    cudaProfilerApi`: traced and untraced steps of one process compare without
                    the process-to-process noise of a shared machine.
--batch B           batch size (64 by default); batch 1 makes the loop CPU-bound, so its time
                    per step is the host cost of one step.
--timing            also lists each step's host-side time (no synchronisation between steps).
"""
import argparse, json, os, sys, time

import torch


def build(name, batch=64):
    torch.manual_seed(0)
    dev = "cuda"
    if name in ("swin", "swin_train"):
        import timm
        m = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False)
        x = torch.randn(batch, 3, 224, 224, device=dev)
    elif name == "vit":
        import timm
        m = timm.create_model("vit_base_patch16_224", pretrained=False)
        x = torch.randn(batch, 3, 224, 224, device=dev)
    elif name == "bert":
        from transformers import BertConfig, BertModel
        m = BertModel(BertConfig())
        x = torch.randint(0, 30522, (batch, 128), device=dev)
    else:
        raise SystemExit("unknown model " + name)
    m = m.to(dev)
    if name == "swin_train":
        m.train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        target = torch.randint(0, 1000, (batch,), device=dev)
        scaler = torch.amp.GradScaler("cuda")

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(m(x), target)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return step
    m = m.half().eval()
    if name != "bert":
        x = x.half()

    def step():
        with torch.inference_mode():
            m(x)
    return step



def host_counters():
    """(steal ms of all CPUs, this process's CPU ms): how much CPU the VM lost to its host
    (steal, /proc/stat) and how much this process used (user + sys, its threads included)."""
    steal = 0.0
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        hz = os.sysconf("SC_CLK_TCK")
        steal = int(fields[8]) * 1000.0 / hz if len(fields) > 8 else 0.0
    except (OSError, ValueError):
        pass
    t = os.times()
    return steal, (t.user + t.system) * 1000.0

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--window", default="none")
    ap.add_argument("--kineto")
    ap.add_argument("--timing")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--period", type=int, default=25)
    a = ap.parse_args()
    step = build(a.model, a.batch)
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    prof = None
    if a.window == "profiler":
        torch.cuda.profiler.start()
    elif a.window.startswith("torchprof"):
        from torch.profiler import profile, ProfilerActivity
        acts = {"torchprof": [ProfilerActivity.CPU, ProfilerActivity.CUDA],
                "torchprof_cuda": [ProfilerActivity.CUDA],
                "torchprof_cpu": [ProfilerActivity.CPU]}[a.window]
        prof = profile(activities=acts, record_shapes=a.window != "torchprof_cuda")
        prof.__enter__()
    ends = []
    c0 = host_counters()
    t0 = time.perf_counter()
    on = []
    for i in range(a.steps):
        if a.window == "alternate" and i % a.period == 0:
            # Switch at a quiet point, so no step pays for the other half's queued work.
            torch.cuda.synchronize()
            if (i // a.period) % 2 == 0:
                torch.cuda.profiler.start()
            else:
                torch.cuda.profiler.stop()
            ends.append(time.perf_counter())
            on.append(None)
        step()
        ends.append(time.perf_counter())
        on.append(a.window != "alternate" or (i // a.period) % 2 == 0)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    c1 = host_counters()
    if a.window == "profiler":
        torch.cuda.profiler.stop()
    elif prof is not None:
        prof.__exit__(None, None, None)
    per_iter_ms = (t1 - t0) * 1000 / a.steps
    if prof is not None and a.kineto:
        prof.export_chrome_trace(a.kineto)
        rows = []
        for e in prof.key_averages(group_by_input_shape=True):
            rows.append({
                "name": e.key,
                "input_shapes": str(e.input_shapes),
                "count": e.count,
                "self_device_time_total_us": getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)),
                "device_time_total_us": getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0)),
                "self_cpu_time_total_us": e.self_cpu_time_total,
                "cpu_time_total_us": e.cpu_time_total,
            })
        with open(a.kineto.replace(".json", ".key_averages.json"), "w") as f:
            json.dump(rows, f)
    if a.timing:
        with open(a.timing, "w") as f:
            iter_ms = [round((b - e) * 1000, 4) for e, b in zip([t0] + ends, ends)]
            keep = [(m, o) for m, o in zip(iter_ms, on) if o is not None]
            json.dump({"model": a.model, "batch": a.batch, "steps": a.steps,
                       "per_iter_ms": per_iter_ms, "iter_ms": [m for m, _ in keep],
                       "recording": [o for _, o in keep],
                       # host noise and cost over the timed loop, per step
                       "steal_ms_per_iter": round((c1[0] - c0[0]) / a.steps, 4),
                       "process_cpu_ms_per_iter": round((c1[1] - c0[1]) / a.steps, 4)}, f)
    print(json.dumps({"model": a.model, "window": a.window, "steps": a.steps, "per_iter_ms": per_iter_ms}), file=sys.stderr)


if __name__ == "__main__":
    main()
