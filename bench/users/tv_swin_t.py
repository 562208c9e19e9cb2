import argparse
import time

import torch
import torchvision


parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=64)
args = parser.parse_args()

model = torchvision.models.swin_t().cuda().eval().half()
x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=torch.half)

with torch.inference_mode():
    for _ in range(5):
        model(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        model(x)
    torch.cuda.synchronize()
print(f"torchvision swin_t: {(time.perf_counter() - t0) / 20 * 1e3:.2f} ms")
