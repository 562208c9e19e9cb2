import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=8)
args = parser.parse_args()

model = GPT2LMHeadModel(GPT2Config()).cuda().eval().half()
ids = torch.randint(0, 50257, (args.batch, 512), device="cuda")

with torch.no_grad():
    model(ids)
    torch.cuda.synchronize()
    start = time.time()
    for _ in range(23):
        logits = model(ids).logits
    torch.cuda.synchronize()
print("gpt2: %.2f ms/iter" % ((time.time() - start) / 23 * 1000))
