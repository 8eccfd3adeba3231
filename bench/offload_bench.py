#!/usr/bin/python3
"""The host KV tier (--kv-offload-memory): questions over one long document
with other traffic between them that evicts the document from the KV
cache. Each question's time to first token (a max_tokens 1 request, so its
wall time) with the tier and without, side by side in one run (one server
after the other, the same prompts). The first question computes the
document on both; the later ones find it in the tier, or compute it again.

    bench/offload_bench.py [--binary build/ropeserve] [--model DIR] [--doc-tokens 4096]
        [--questions 6] [--threads 2] [--filler-prompt-tokens N] [--plain-questions N]

The model defaults to the random-weight qwen2.5-0.5b shape in
~/.cache/ropeserve/bench (made with `ropeserve make-model` when missing);
prompts are token ids (the document, a 32-token question; before each
later question, filler traffic as long as the document). The KV cache
holds 1.5 documents, so the filler evicts it; the tier holds 4 caches.

A long document makes both sides slow to run: --filler-prompt-tokens cuts
the filler traffic into prompts of that many tokens (the same evictions,
without the quadratic attention of one document-long prompt), and
--plain-questions runs only that many questions without the tier (each
later one recomputes the document: minutes at 30,000 tokens).
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time

from bench_server import BenchServer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def first_token(port, prompt):
    """(seconds, cached prompt tokens) of a one-token completion."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0}
    start = time.time()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    reply = json.loads(r.read())
    seconds = time.time() - start
    if r.status != 200:
        sys.exit(f"HTTP {r.status}: {reply}")
    return seconds, reply["usage"]["prompt_tokens_details"]["cached_tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "ropeserve"))
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/ropeserve/bench/qwen2.5-0.5b"))
    ap.add_argument("--doc-tokens", type=int, default=4096)
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--filler-prompt-tokens", type=int, default=0,
                    help="cut each filler into prompts of this many tokens (0: one prompt)")
    ap.add_argument("--plain-questions", type=int, default=0,
                    help="questions run without the tier (0: as many as with it; at least 2)")
    args = ap.parse_args()
    if args.questions < 2 or args.doc_tokens < 16 or args.filler_prompt_tokens < 0 or args.plain_questions < 0:
        sys.exit("--questions must be at least 2, --doc-tokens at least 16, the others not negative")
    if not os.path.exists(os.path.join(args.model, "config.json")):
        subprocess.run([args.binary, "make-model", "--preset", "qwen2.5-0.5b", "--out", args.model], check=True)
    config = json.load(open(os.path.join(args.model, "config.json")))
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    kv_bytes_per_token = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * 2  # bfloat16
    cache = int(1.5 * args.doc_tokens) * kv_bytes_per_token
    doc = [(i * 7919) % 30000 + 100 for i in range(args.doc_tokens)]
    questions = [doc + [(q * 131 + i * 17) % 30000 + 100 for i in range(32)] for q in range(args.questions)]
    fillers = [[(f * 4099 + i * 104729) % 30000 + 100 for i in range(args.doc_tokens)]
               for f in range(args.questions)]
    chunk = args.filler_prompt_tokens or args.doc_tokens
    fillers = [[filler[c:c + chunk] for c in range(0, len(filler), chunk)] for filler in fillers]
    plain_questions = max(2, args.plain_questions) if args.plain_questions else args.questions
    results = {}
    for name, extra, count in (("tier", ["--kv-offload-memory", str(4 * cache)], args.questions),
                               ("no tier", [], plain_questions)):
        server = BenchServer(args.binary, args.model,
                             ["--dtype", "bfloat16", "--max-model-len", str(args.doc_tokens + 64),
                              "--max-num-batched-tokens", "2048", "--kv-cache-memory", str(cache)] + extra,
                             args.threads, "offload-bench")
        port = server.port
        rows = []
        try:
            for q, prompt in enumerate(questions[:count]):
                if q > 0:
                    for part in fillers[q]:  # evicts the document from the cache
                        first_token(port, part)
                seconds, cached = first_token(port, prompt)
                rows.append((seconds, cached))
                print(f"{name}: question {q}: {seconds:.2f} s to the first token, {cached} tokens cached", flush=True)
        finally:
            server.stop()
        results[name] = rows
    tier = statistics.median(s for s, _ in results["tier"][1:])
    plain = statistics.median(s for s, _ in results["no tier"][1:])
    print(f"\n| {args.doc_tokens}-token document | questions | first question | later questions "
          "(median TTFT, min-max) | cached tokens (later) |")
    print("|---|---:|---:|---:|---:|")
    for name in ("tier", "no tier"):
        rows = results[name]
        later = [s for s, _ in rows[1:]]
        print(f"| {name} | {len(rows)} | {rows[0][0]:.2f} s | {statistics.median(later):.2f} s "
              f"({min(later):.2f}-{max(later):.2f}) | {rows[-1][1]:,} |")
    print(f"\nlater questions: {plain / tier:.1f}x faster with the tier")


if __name__ == "__main__":
    main()
