import time

import torch
from transformers import SwinConfig, SwinForImageClassification

model = SwinForImageClassification(SwinConfig()).cuda().eval().half()
pixels = torch.randn(64, 3, 224, 224, device="cuda", dtype=torch.half)

with torch.no_grad():
    for _ in range(5):
        model(pixel_values=pixels)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        logits = model(pixel_values=pixels).logits
    torch.cuda.synchronize()
print(f"hf swin: {(time.perf_counter() - t0) / 20 * 1e3:.2f} ms")
