import argparse
import time

import torch
from transformers import SwinConfig, SwinForImageClassification


parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=64)
args = parser.parse_args()

model = SwinForImageClassification(SwinConfig()).cuda().eval().half()
pixels = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=torch.half)

with torch.no_grad():
    for _ in range(5):
        model(pixel_values=pixels)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        logits = model(pixel_values=pixels).logits
    torch.cuda.synchronize()
print(f"hf swin: {(time.perf_counter() - t0) / 20 * 1e3:.2f} ms")
