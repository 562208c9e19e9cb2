"""Run each attention kernel of the benchmark shapes a few times, for Nsight Compute:

    ncu --kernel-name regex:fmha_fwd --launch-skip 2 --launch-count 1 --set full \
        python3 kernels/bench/profile_attention.py [window|vit|bert|bertnm|all|vit_sdpa|bertnm_sdpa]

(window: Swin-T stage 1 on the precombined bias+mask; vit: 64x12x197x64; bert: 64x12x128x64
with a key-padding mask; bertnm: the same without a mask; vit_sdpa: the ViT shape on SDPA's
cuDNN backend, on the same strided views of the qkv tensor the benchmark gives it, for
comparison; bertnm_sdpa: the no-mask BERT shape on SDPA's default backend, the one the
benchmark's verdict compares against). Needs FUSEPROF_KERNELS_LIB (see fuseprof_kernels.py).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fuseprof_kernels as fk  # noqa: E402
from gpu_check import key_padding_mask  # noqa: E402  (this folder is on sys.path as the script's)

DEV = "cuda"
h = torch.float16
which = sys.argv[1] if len(sys.argv) > 1 else "all"
reps = 3
if which in ("window", "all"):
    nw, H, C, N = 4096, 3, 96, 49
    qkv = torch.randn(nw * N, 3 * C, device=DEV, dtype=h)
    bias = (torch.randn(H, N, N, device=DEV) * 0.5).to(h)
    mask = torch.zeros(64, N, N, device=DEV).masked_fill(torch.rand(64, N, N, device=DEV) > 0.7, -100.).to(h)
    add = fk.attention_add(H, N, bias=bias, window_mask=mask)
    for _ in range(reps):
        fk.attention(qkv, H, N, add=add)
if which in ("vit", "all"):
    B, N, H, d = 64, 197, 12, 64
    qkv = torch.randn(B * N, 3 * H * d, device=DEV, dtype=h)
    for _ in range(reps):
        fk.attention(qkv, H, N)
if which in ("bert", "bertnm", "all"):
    B, N, H, d = 64, 128, 12, 64
    qkv = torch.randn(B * N, 3 * H * d, device=DEV, dtype=h)
    kpm = None if which == "bertnm" else key_padding_mask(B, N, h)
    for _ in range(reps):
        fk.attention(qkv, H, N, key_padding_mask=kpm)
if which in ("vit_sdpa", "bertnm_sdpa"):
    import contextlib
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend
    B, N, H, d = (64, 197, 12, 64) if which == "vit_sdpa" else (64, 128, 12, 64)
    qkv = torch.randn(B * N, 3 * H * d, device=DEV, dtype=h)
    x = qkv.view(B, N, 3, H, d).permute(2, 0, 3, 1, 4)
    # ViT on cuDNN; no-mask BERT on the default backend, the benchmark's SDPA reference there
    backend = sdpa_kernel([SDPBackend.CUDNN_ATTENTION]) if which == "vit_sdpa" else contextlib.nullcontext()
    with backend:
        for _ in range(reps):
            F.scaled_dot_product_attention(x[0], x[1], x[2])
torch.cuda.synchronize()
print("done", which)
