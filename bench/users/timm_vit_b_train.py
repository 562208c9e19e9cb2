import argparse
import time

import timm
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=64)
args = parser.parse_args()

torch.manual_seed(0)
model = timm.create_model("vit_base_patch16_224", num_classes=100).cuda()
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, fused=True)
x = torch.randn(args.batch, 3, 224, 224, device="cuda")
y = torch.randint(0, 100, (args.batch,), device="cuda")

times = []
for i in range(25):
    torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch.cuda.synchronize()
    if i >= 5:
        times.append(time.perf_counter() - t)
print(f"vit_b fine-tune: {sum(times) / len(times) * 1e3:.2f} ms per step, last loss {loss.item():.3f}")
