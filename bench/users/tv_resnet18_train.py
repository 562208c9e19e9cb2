import time

import torch
import torchvision

model = torchvision.models.resnet18(num_classes=100).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
loss_fn = torch.nn.CrossEntropyLoss()
x = torch.randn(64, 3, 224, 224, device="cuda")
y = torch.randint(0, 100, (64,), device="cuda")

start = time.perf_counter()
for step in range(15):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step == 4:
        torch.cuda.synchronize()
        start = time.perf_counter()
torch.cuda.synchronize()
print(f"resnet18 train: {(time.perf_counter() - start) / 10 * 1e3:.2f} ms/step, loss {loss.item():.3f}")
