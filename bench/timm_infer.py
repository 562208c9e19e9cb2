"""timm inference as a user would write it: random weights, fp16, batch 64.

    python3 bench/timm_infer.py --model NAME [--batch 64] [--steps 20] [--warmup 5]

(`bench/swin_infer.py` and `bench/vit_infer.py` run it on Swin-T and ViT-B/16.)

Plain PyTorch: nothing here knows fuseprof. Each timed step is an NVTX range named `step`
(what `fuseprof analyze` takes as the step) and ends with a synchronize, so a step's wall time
is the model's latency. `fuseprof bench -- python3 bench/swin_infer.py` runs it as it is and
with the bundled kernels swapped in.
"""
import argparse
import time

import timm
import torch


def main(model="swin_tiny_patch4_window7_224"):
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=model)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    a = p.parse_args()
    dtype = torch.float16 if a.dtype == "fp16" else torch.bfloat16
    torch.manual_seed(0)
    model = timm.create_model(a.model, pretrained=False).cuda().eval().to(dtype)
    x = torch.randn(a.batch, 3, 224, 224, device="cuda", dtype=dtype)
    with torch.inference_mode():
        for _ in range(a.warmup):
            model(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(a.steps):
            t0 = time.perf_counter()
            torch.cuda.nvtx.range_push("step")
            y = model(x)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            times.append(time.perf_counter() - t0)
    times.sort()
    print(f"{a.model} batch {a.batch} {a.dtype}: median {times[len(times) // 2] * 1e3:.3f} ms per step, "
          f"logits checksum {y.float().sum().item():.4f}")


if __name__ == "__main__":
    main()
