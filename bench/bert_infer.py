"""BERT-base inference as a user would write it: Hugging Face transformers, bert-base-uncased's
configuration with random weights (no download), SDPA attention, fp16, batch 64, 128 tokens with
a key-padding mask (sequence lengths drawn between 64 and 128).

    python3 bench/bert_infer.py [--batch 64] [--seq 128] [--steps 20] [--warmup 5]

Plain PyTorch, as bench/timm_infer.py: each timed step is an NVTX range named `step` ending with
a synchronize. `fuseprof bench -- python3 bench/bert_infer.py` runs it as it is and patched.
"""
import argparse
import time

import torch
from transformers import AutoModel, BertConfig


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    torch.manual_seed(0)
    model = AutoModel.from_config(BertConfig(), attn_implementation="sdpa").cuda().eval().half()
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), device="cuda")
    lengths = torch.randint(a.seq // 2, a.seq + 1, (a.batch,), device="cuda")
    mask = (torch.arange(a.seq, device="cuda")[None] < lengths[:, None]).long()
    with torch.inference_mode():
        for _ in range(a.warmup):
            model(input_ids=ids, attention_mask=mask)
        torch.cuda.synchronize()
        times = []
        for _ in range(a.steps):
            t0 = time.perf_counter()
            torch.cuda.nvtx.range_push("step")
            y = model(input_ids=ids, attention_mask=mask).last_hidden_state
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            times.append(time.perf_counter() - t0)
    times.sort()
    print(f"bert-base-uncased batch {a.batch} seq {a.seq} fp16: median {times[len(times) // 2] * 1e3:.3f} ms per "
          f"step, output checksum {(y * mask[..., None]).float().sum().item():.4f}")


if __name__ == "__main__":
    main()
