import argparse
import time

import torch
import torchvision

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=64)
args = parser.parse_args()

model = torchvision.models.vit_b_16().cuda().eval().to(torch.bfloat16)
x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=torch.bfloat16)

with torch.inference_mode():
    for _ in range(5):
        model(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(25):
        out = model(x)
    torch.cuda.synchronize()
print(f"vit_b_16: {(time.perf_counter() - start) / 25 * 1e3:.2f} ms")
