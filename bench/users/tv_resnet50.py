import time

import torch
import torchvision

model = torchvision.models.resnet50().cuda().eval().half()
x = torch.randn(64, 3, 224, 224, device="cuda", dtype=torch.half)

times = []
with torch.inference_mode():
    for i in range(40):
        t0 = time.perf_counter()
        out = model(x)
        torch.cuda.synchronize()
        if i >= 10:
            times.append(time.perf_counter() - t0)
print(f"resnet50: {sum(times) / len(times) * 1e3:.3f} ms per batch")
