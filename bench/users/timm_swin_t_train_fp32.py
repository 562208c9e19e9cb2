import argparse
import time

import timm
import torch
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 224, 224, generator=g), int(torch.randint(0, 1000, (1,), generator=g))


parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--steps", type=int, default=25)
args = parser.parse_args()

torch.manual_seed(0)
model = timm.create_model("swin_tiny_patch4_window7_224").cuda().train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
criterion = torch.nn.CrossEntropyLoss()
loader = DataLoader(Synthetic(args.batch * args.steps), batch_size=args.batch, num_workers=2)

start = None
for step, (images, labels) in enumerate(loader):
    if step == 5:
        start = time.perf_counter()
    images, labels = images.cuda(), labels.cuda()
    loss = criterion(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running = loss.item()
print(f"swin_t fp32 train: {(time.perf_counter() - start) / (args.steps - 5) * 1e3:.2f} ms/step, loss {running:.4f}")
