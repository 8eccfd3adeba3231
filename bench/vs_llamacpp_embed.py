#!/usr/bin/python3
"""Sentence-embedding throughput and latency, ropeserve against llama.cpp on
the same weights, in one run (issue 35; docs/benchmarks.md).

  bench/vs_llamacpp_embed.py LLAMA_CPP_DIR [--rounds 2] [--threads 2] [--requests 32]

The model: a ModernBERT-base-shaped embedder with random weights (hidden
768, 22 layers, 12 heads, intermediate 1152, vocabulary 50368, local
attention 128 with a global layer every 3; float32), generated once by
`ropeserve make-model --embedding` into ~/.cache/ropeserve/bench/ and written
as an F32 GGUF by bench/gguf_from_checkpoint.py --f32 (numpy and the tree's
gguf-py). Servers, both on THREADS threads, both answering over HTTP:
  - ropeserve serve --encoder DIR: POST /v1/embeddings with token ids;
  - llama.cpp llama-server --embedding --pooling mean (built in
    LLAMA_CPP_DIR/build if missing; -np 32 slots, -b/-ub 512 (the longest
    input: an encoder's sequence must fit one micro-batch, and a larger one
    makes its attention span every sequence packed into it, 4-30x slower at
    batch 32 when tried with 4096), float32 KV cache, flash attention off,
    as the parity test runs it): POST /embedding with ids.
Workloads: inputs of 128 and 512 random token ids; "batch 1" sends REQUESTS
requests one after another, "batch 32" keeps 32 requests in flight (one
input each: the server batches them). Prints embeddings per second and the
p50 / p99 request latency per server and workload, the servers alternated
per round, then medians and ratios. Not run by the test suite.
"""
import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ropeserve"
SHAPE = ["--hidden-size", "768", "--layers", "22", "--heads", "12", "--intermediate-size", "1152",
         "--vocab-size", "50368", "--max-position-embeddings", "8192"]


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def wait_healthy(port, proc, path="/health", timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server on {port} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    sys.exit(f"server on {port} not healthy after {timeout} s")


class Server:
    def __init__(self, name, cmd, port, path, body, ready):
        self.name, self.port, self.path, self.body = name, port, path, body
        self.log = open(CACHE / f"bench/{name}-embed.log", "w")
        self.proc = subprocess.Popen([str(c) for c in cmd], stdout=self.log, stderr=subprocess.STDOUT)
        wait_healthy(port, self.proc, ready)

    def embed(self, ids):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        start = time.perf_counter()
        conn.request("POST", self.path, json.dumps(self.body(ids)), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        elapsed = time.perf_counter() - start
        conn.close()
        if r.status != 200:
            sys.exit(f"{self.name}: HTTP {r.status}: {data[:300]}")
        return elapsed

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def workload(server, inputs, concurrency):
    """(embeddings per second, p50 s, p99 s) of `inputs` with `concurrency` in flight."""
    latencies, lock, queue = [], threading.Lock(), list(inputs)

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                ids = queue.pop()
            t = server.embed(ids)
            with lock:
                latencies.append(t)

    server.embed(inputs[0])  # warm-up
    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return len(inputs) / wall, statistics.median(latencies), p99


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--binary", type=Path, default=ROOT / os.environ.get("BUILD_DIR", "build") / "ropeserve")
    args = ap.parse_args()
    llama = args.llama.resolve()
    server_bin = llama / "build/bin/llama-server"
    if not server_bin.exists():
        run(["cmake", "-S", llama, "-B", llama / "build", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
             "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF"])
        run(["ninja", "-C", llama / "build", "llama-server"])
    model = CACHE / "bench/modernbert-base-embed"
    (CACHE / "bench").mkdir(parents=True, exist_ok=True)
    if not (model / "model.safetensors").exists():
        run([args.binary, "make-model", "--embedding", "--out", model] + SHAPE)
        config = json.loads((model / "config.json").read_text())
        config.update({"local_attention": 128, "global_attn_every_n_layers": 3})  # ModernBERT-base's
        (model / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    gguf = CACHE / "llamacpp/modernbert-base-embed-f32.gguf"
    if not gguf.exists():
        gguf.parent.mkdir(parents=True, exist_ok=True)
        run(["/usr/bin/python3", ROOT / "bench/gguf_from_checkpoint.py", "--f32", model, str(gguf) + ".tmp"],
            env=dict(os.environ, PYTHONPATH=str(llama / "gguf-py")))
        os.replace(str(gguf) + ".tmp", gguf)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    rng = random.Random(35)
    inputs = {n: [[rng.randrange(vocab - 3) for _ in range(n)] for _ in range(args.requests)] for n in (128, 512)}
    servers = {
        "ropeserve": lambda: Server("ropeserve", [args.binary, "--threads", args.threads, "serve", "--encoder",
                                                  f"embed={model}", "--http-port", 18701, "--grpc-port", -1,
                                                  "--admin-port", -1], 18701, "/v1/embeddings",
                                    lambda ids: {"model": "embed", "input": [ids]}, "/ready"),
        "llama.cpp": lambda: Server("llamacpp", [server_bin, "-m", gguf, "--embedding", "--pooling", "mean",
                                                 "-t", args.threads, "-np", 32, "-c", 32 * 512, "-b", 512,
                                                 "-ub", 512, "-ctk", "f32", "-ctv", "f32", "-fa", "off",
                                                 "--host", "127.0.0.1", "--port", 18702, "--no-webui"],
                                    18702, "/embedding", lambda ids: {"content": ids}, "/health"),
    }
    results = {}  # (server, tokens, concurrency) -> [(eps, p50, p99)]
    for rnd in range(args.rounds):
        order = list(servers) if rnd % 2 == 0 else list(reversed(servers))
        for name in order:
            s = servers[name]()
            try:
                for tokens in (128, 512):
                    for concurrency in (1, 32):
                        r = workload(s, inputs[tokens], concurrency)
                        results.setdefault((name, tokens, concurrency), []).append(r)
                        print(f"round {rnd + 1} {name:9} {tokens:4} tokens, batch {concurrency:2}: "
                              f"{r[0]:7.2f} embeddings/s, p50 {r[1] * 1e3:8.1f} ms, p99 {r[2] * 1e3:8.1f} ms",
                              flush=True)
            finally:
                s.stop()
    print("\n| input | batch | ropeserve emb/s | llama.cpp emb/s | ratio | ropeserve p99 ms | llama.cpp p99 ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for tokens in (128, 512):
        for concurrency in (1, 32):
            ours = results[("ropeserve", tokens, concurrency)]
            theirs = results[("llama.cpp", tokens, concurrency)]
            eo, et = statistics.median(r[0] for r in ours), statistics.median(r[0] for r in theirs)
            po, pt = statistics.median(r[2] for r in ours), statistics.median(r[2] for r in theirs)
            print(f"| {tokens} | {concurrency} | {eo:.2f} | {et:.2f} | {eo / et:.2f}x | {po * 1e3:.0f} | {pt * 1e3:.0f} |")


if __name__ == "__main__":
    main()
