import argparse
import time

import timm
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

torch.manual_seed(0)
model = timm.create_model("swin_tiny_patch4_window7_224", num_classes=1000).cuda().train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=True)
criterion = torch.nn.CrossEntropyLoss()
images = torch.randn(args.batch, 3, 224, 224, device="cuda")
labels = torch.randint(0, 1000, (args.batch,), device="cuda")

for step in range(args.steps + 5):
    if step == 5:
        torch.cuda.synchronize()
        start = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(images), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
elapsed = time.perf_counter() - start
print(f"swin_t train: {elapsed / args.steps * 1e3:.2f} ms/step, loss {loss.item():.4f}")
