import argparse
import os
import time

import timm
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

dist.init_process_group("nccl")
rank = dist.get_rank()
local_rank = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local_rank)
torch.manual_seed(0)
model = timm.create_model("swin_tiny_patch4_window7_224", num_classes=1000).cuda().train()
model = DDP(model, device_ids=[local_rank])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=True)
criterion = torch.nn.CrossEntropyLoss()
torch.manual_seed(rank)
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
if rank == 0:
    world = dist.get_world_size()
    print(f"swin_t ddp x{world}: {elapsed / args.steps * 1e3:.2f} ms/step, "
          f"{args.batch * world * args.steps / elapsed:.0f} images/s, loss {loss.item():.4f}")
dist.destroy_process_group()
