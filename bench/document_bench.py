#!/usr/bin/python3
"""Long-document summarization: the same map-reduce request through a server
that batches (the default) and through one that runs one request at a time
(`--max-num-seqs 1`: the chunk summaries one after another), side by side
in one run. Prints wall time, chunks and tokens per document size.

    bench/document_bench.py [--binary build/ropeserve] [--model DIR] [--words 3000 10000]
        [--chunk-tokens 1024] [--chunk-max-tokens 64] [--max-tokens 64]

The model defaults to the random-weight qwen2.5-0.5b shape in
~/.cache/ropeserve/bench (made with `ropeserve make-model` when missing);
documents are the GPL v3 (tests/data/text) repeated to the word count.
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import time

from bench_server import BenchServer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPL = open(os.path.join(ROOT, "tests", "data", "text", "gpl-3.txt"), encoding="utf-8").read()


def document(words):
    """The GPL repeated, cut after its `words`-th word."""
    text = GPL
    while len(text.split()) < words:
        text += "\n\n" + GPL
    ends = [m.end() for m in re.finditer(r"\S+", text)]
    return text[: ends[words - 1]]


def summarize(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    start = time.time()
    c.request("POST", "/v1/summarize", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    reply = json.loads(r.read())
    if r.status != 200:
        sys.exit(f"HTTP {r.status}: {reply}")
    return time.time() - start, reply


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "ropeserve"))
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/ropeserve/bench/qwen2.5-0.5b"))
    ap.add_argument("--words", type=int, nargs="+", default=[3000, 10000])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--chunk-tokens", type=int, default=1024)
    ap.add_argument("--chunk-max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.model, "config.json")):
        subprocess.run([args.binary, "make-model", "--preset", "qwen2.5-0.5b", "--out", args.model], check=True)
    rows = []
    for name, extra in (("batched (default)", []), ("one at a time (--max-num-seqs 1)", ["--max-num-seqs", "1"])):
        server = BenchServer(args.binary, args.model, ["--dtype", "bfloat16", "--kv-cache-memory", "2G"] + extra,
                             args.threads, "document-bench")
        port = server.port
        try:
            for words in args.words:
                body = {"text": document(words), "strategy": "map_reduce", "max_tokens": args.max_tokens,
                        "chunk_tokens": args.chunk_tokens, "chunk_max_tokens": args.chunk_max_tokens}
                seconds, reply = summarize(port, body)
                u = reply["usage"]
                rows.append((words, name, seconds, u.get("chunks", 1), u["prompt_tokens"], u["cached_tokens"],
                             u["completion_tokens"]))
                print(f"{words} words, {name}: {seconds:.1f} s, {u}", flush=True)
        finally:
            server.stop()
    print("\n| words | server | wall s | chunks | prompt tokens | cached | generated |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for w, name, s, ch, p, ca, g in rows:
        print(f"| {w:,} | {name} | {s:.1f} | {ch} | {p:,} | {ca:,} | {g:,} |")


if __name__ == "__main__":
    main()
