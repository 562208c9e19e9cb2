"""A BERT-sized encoder built from PyTorch's own nn.TransformerEncoder."""
import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--seq", type=int, default=128)
args = parser.parse_args()


class Encoder(nn.Module):
    def __init__(self, vocab=30522, d=768, heads=12, layers=12):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, 512, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, ids, padding):
        x = self.embed(ids) + self.pos[:, : ids.shape[1]]
        return self.encoder(x, src_key_padding_mask=padding)


model = Encoder().cuda().eval().half()
ids = torch.randint(0, 30522, (args.batch, args.seq), device="cuda")
lengths = torch.randint(args.seq // 2, args.seq + 1, (args.batch,), device="cuda")
padding = torch.arange(args.seq, device="cuda")[None, :] >= lengths[:, None]

with torch.no_grad():
    for _ in range(5):
        model(ids, padding)
    times = []
    for _ in range(30):
        torch.cuda.synchronize()
        t = time.perf_counter()
        model(ids, padding)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
print(f"nn.TransformerEncoder {args.batch}x{args.seq}: {sum(times) / len(times) * 1e3:.2f} ms")
