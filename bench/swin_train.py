"""One Swin-T training step as a user would write it: timm swin_tiny_patch4_window7_224, random
weights and labels, fp16 autocast with a gradient scaler, SGD, batch 64.

    python3 bench/swin_train.py [--batch 64] [--steps 10] [--warmup 3]

Each timed step (forward, backward, optimizer step) is an NVTX range named `step` ending with a
synchronize. `fuseprof bench --apply default -- python3 bench/swin_train.py` runs it as it is and
patched: in training mode the patch layer's graph matcher replaces what it finds (every bundled
kernel has a backward pass) and checks each site's gradients on its first call.
"""
import argparse
import time

import timm
import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()
    torch.manual_seed(0)
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False).cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(a.batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (a.batch,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        torch.cuda.nvtx.range_push("step")
        loss = step()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"swin_tiny_patch4_window7_224 training batch {a.batch} fp16 autocast: median "
          f"{times[len(times) // 2] * 1e3:.3f} ms per step, loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
