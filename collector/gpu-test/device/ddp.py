"""A small data-parallel training job for `collect` under torchrun (two GPUs, NCCL):

    fuseprof collect -o job.sqlite -- torchrun --nproc_per_node 2 ddp.py [--steps 12]

Each rank trains an MLP with DistributedDataParallel (its gradients all-reduced by NCCL,
overlapping the backward pass); each step is an NVTX range named `step`. Rank 1 does extra
work before every third step, so that the others wait for it in the all-reduce (a straggler
for `analyze` to find). The GPU is cuda:LOCAL_RANK, so a launcher that gives each process its
own GPU as device 0 (CUDA_VISIBLE_DEVICES) sets LOCAL_RANK=0.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--width", type=int, default=4096)
    a = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank()
    torch.manual_seed(0)
    w = a.width
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.GELU()) for _ in range(6)])
    model = DDP(model.cuda(), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, w, device="cuda")
    for step in range(a.steps):
        torch.cuda.nvtx.range_push("step")
        if rank == 1 and step % 3 == 0:
            torch.cuda._sleep(20_000_000)  # about 10 ms of GPU time before its work
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    dist.barrier()
    if rank == 0:
        print(f"{dist.get_world_size()} ranks, {a.steps} steps, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
