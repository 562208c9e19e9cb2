import argparse
import time

import timm
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=64)
args = parser.parse_args()

model = timm.create_model("vit_base_patch16_224").cuda().eval().half()
x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=torch.half)

times = []
with torch.no_grad():
    for _ in range(5):
        model(x)
    for _ in range(30):
        torch.cuda.synchronize()
        t = time.perf_counter()
        model(x)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
print(f"vit_base_patch16_224: {sum(times) / len(times) * 1e3:.2f} ms per batch")
