"""Child processes under `fuseprof collect`: DataLoader workers and torchrun ranks.

  python children.py dataloader            main process trains on batches from 2 workers
  torchrun --nproc_per_node=2 children.py rank   two ranks on GPU 0 (gloo), each with kernels

Every worker marks each item it makes (NVTX mark "item"), every rank brackets its work in an NVTX
range "rank<N>", so the run shows which process did what.
"""
import os, sys

import torch


class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        torch.cuda.nvtx.mark("item")
        return torch.randn(256)


def dataloader():
    w = torch.randn(256, 256, device="cuda")
    loader = torch.utils.data.DataLoader(Items(), batch_size=8, num_workers=2)
    for b in loader:
        torch.cuda.nvtx.range_push("batch")
        y = b.cuda() @ w
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print("dataloader done, pid", os.getpid(), "y", float(y.sum()))


def rank():
    import torch.distributed as dist
    dist.init_process_group("gloo")
    r = dist.get_rank()
    torch.cuda.set_device(0)
    torch.cuda.nvtx.range_push(f"rank{r}")
    x = torch.randn(512, 512, device="cuda")
    for _ in range(10 + r):  # rank r launches 10 + r matmuls
        x = torch.tanh(x @ x)
    t = x.sum().cpu()
    dist.all_reduce(t)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print("rank", r, "pid", os.getpid(), "sum", float(t))


if __name__ == "__main__":
    {"dataloader": dataloader, "rank": rank}[sys.argv[1]]()
