import argparse
import time

import torch
from transformers import BertConfig, BertForSequenceClassification

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--seq", type=int, default=128)
args = parser.parse_args()

torch.manual_seed(0)
model = BertForSequenceClassification(BertConfig(num_labels=2)).cuda().train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True)
ids = torch.randint(1000, 30000, (args.batch, args.seq), device="cuda")
lengths = torch.randint(args.seq // 2, args.seq + 1, (args.batch,), device="cuda")
mask = (torch.arange(args.seq, device="cuda")[None, :] < lengths[:, None]).long()
labels = torch.randint(0, 2, (args.batch,), device="cuda")

for step in range(30):
    if step == 5:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
print(f"bert-base fine-tune {args.batch}x{args.seq}: {(time.perf_counter() - t0) / 25 * 1e3:.2f} ms/step, "
      f"loss {out.loss.item():.4f}")
