"""A BERT-sized encoder written by hand, the way a research codebase writes one."""
import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--seq", type=int, default=128)
args = parser.parse_args()


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x, keep):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        return self.out(y.transpose(1, 2).reshape(b, n, d))


class Layer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.attn = SelfAttention(d, heads)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, keep):
        x = self.ln1(x + self.attn(x, keep))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Encoder(nn.Module):
    def __init__(self, vocab=30522, d=768, heads=12, layers=12):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(512, d)
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(layers))
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=1 / math.sqrt(p.shape[-1]))

    def forward(self, ids, keep):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for layer in self.layers:
            x = layer(x, keep)
        return x


model = Encoder().cuda().eval().to(torch.bfloat16)
ids = torch.randint(0, 30522, (args.batch, args.seq), device="cuda")
lengths = torch.randint(args.seq // 2, args.seq + 1, (args.batch,), device="cuda")
keep = torch.arange(args.seq, device="cuda")[None, :] < lengths[:, None]

with torch.inference_mode():
    for _ in range(5):
        model(ids, keep)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(30):
        model(ids, keep)
    torch.cuda.synchronize()
print(f"hand-written encoder {args.batch}x{args.seq}: {(time.perf_counter() - t0) / 30 * 1e3:.2f} ms")
