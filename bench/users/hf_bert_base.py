import argparse
import time

import torch
from transformers import BertConfig, BertModel

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--seq", type=int, default=128)
args = parser.parse_args()

model = BertModel(BertConfig()).cuda().eval().half()
ids = torch.randint(1000, 30000, (args.batch, args.seq), device="cuda")
# Real batches are padded: sequences of random length, the rest masked out.
lengths = torch.randint(args.seq // 2, args.seq + 1, (args.batch,), device="cuda")
mask = (torch.arange(args.seq, device="cuda")[None, :] < lengths[:, None]).long()

with torch.inference_mode():
    for _ in range(5):
        model(input_ids=ids, attention_mask=mask)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(30):
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.cuda.synchronize()
print(f"bert-base {args.batch}x{args.seq}: {(time.perf_counter() - t0) / 30 * 1e3:.2f} ms")
