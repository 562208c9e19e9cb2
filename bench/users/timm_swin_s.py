import argparse
import time

import timm
import torch


parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=32)
args = parser.parse_args()

model = timm.create_model("swin_small_patch4_window7_224").cuda().eval().to(torch.bfloat16)
x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=torch.bfloat16)

with torch.no_grad():
    for _ in range(10):
        model(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(30):
        y = model(x)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
print(f"swin_s: {(t1 - t0) / 30 * 1e3:.3f} ms per iteration")
