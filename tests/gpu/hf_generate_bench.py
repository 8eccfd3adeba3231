#!/usr/bin/env python3
"""Hugging Face transformers' `generate` with static batches, on the requests
`ropeserve bench --workload-out FILE` ran: the baseline of issue 16's
throughput target (scripts/gpu-check, section (c)).

  tests/gpu/hf_generate_bench.py --model DIR --workload FILE --batch-size N

Batches of N requests in file order, prompts left-padded to the batch's
longest, every member generating greedily until the batch's longest output
length (min_new_tokens = max_new_tokens: no early end at EOS), as
`ropeserve bench --baseline static` does. Useful tokens are each request's
own output length. Prints one JSON object: requests, batch_size,
useful_tokens, seconds, tok_s. A one-request generate before the clock
starts warms up the device.
"""
import argparse
import json
import sys
import time

import torch
import transformers as tf


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workload", required=True, help="a `ropeserve bench --workload-out` file")
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    if a.batch_size < 1:
        sys.exit("--batch-size must be >= 1")
    with open(a.workload) as f:
        w = json.load(f)
    prompts, out_lens = w.get("prompts"), w.get("output_lens")
    if not isinstance(prompts, list) or not isinstance(out_lens, list) or len(prompts) != len(out_lens) or not prompts:
        sys.exit(f"{a.workload}: expected non-empty 'prompts' and 'output_lens' of one length")

    # transformers 4.56 renamed torch_dtype to dtype (5.x warns on the old name).
    version = tuple(int(x) for x in tf.__version__.split(".")[:2] if x.isdigit())
    key = "dtype" if version >= (4, 56) else "torch_dtype"
    model = tf.AutoModelForCausalLM.from_pretrained(a.model, **{key: getattr(torch, a.dtype)})
    model = model.to(a.device).eval()
    pad = 0

    def run(batch, n):
        longest = max(len(p) for p in batch)
        ids = torch.tensor([[pad] * (longest - len(p)) + p for p in batch], device=a.device)
        mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in batch], device=a.device)
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           pad_token_id=pad, eos_token_id=None)

    run([prompts[0][:8]], 4)  # warm-up
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    useful = 0
    for b in range(0, len(prompts), a.batch_size):
        lens = out_lens[b:b + a.batch_size]
        run(prompts[b:b + a.batch_size], max(lens))
        useful += sum(lens)
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(json.dumps({"requests": len(prompts), "batch_size": a.batch_size, "useful_tokens": useful,
                      "seconds": seconds, "tok_s": useful / seconds}))


if __name__ == "__main__":
    main()
