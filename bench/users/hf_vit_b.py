import argparse
import time

import torch
from transformers import ViTConfig, ViTForImageClassification

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=64)
args = parser.parse_args()

model = ViTForImageClassification(ViTConfig(num_labels=1000)).cuda().eval().half()
pixels = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=torch.half)

with torch.no_grad():
    for _ in range(5):
        model(pixel_values=pixels)
    total = 0.0
    for _ in range(25):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(pixel_values=pixels).logits
        torch.cuda.synchronize()
        total += time.perf_counter() - t0
print(f"hf vit-base: {total / 25 * 1e3:.2f} ms/batch")
