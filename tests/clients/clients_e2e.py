#!/usr/bin/python3
"""Starts ropeserve on the demo models (one plain server with the QA model,
one with API keys, one that queues a single request) and runs
clients.test.mjs, anthropic.test.mjs, responses.test.mjs, structured.test.mjs and playground.test.mjs (headless
chromium) against them with `node --test` (see run.sh). Screenshots of
failed browser tests are kept in the server-log folder it prints."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from e2e_lib import Server  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="ropeserve-clients-")
    model, qa = os.path.join(workdir, "model"), os.path.join(workdir, "qa")
    subprocess.run([args.binary, "make-model", "--out", model, "--preset", "tiny"], check=True, capture_output=True)
    subprocess.run([args.binary, "make-model", "--qa", "--out", qa], check=True, capture_output=True)
    embed = os.path.join(workdir, "embed")
    subprocess.run([args.binary, "make-model", "--embedding", "--out", embed], check=True, capture_output=True)
    cls, rerank = os.path.join(workdir, "cls"), os.path.join(workdir, "rerank")
    subprocess.run([args.binary, "make-model", "--classifier", "neg,pos", "--out", cls], check=True, capture_output=True)
    subprocess.run([args.binary, "make-model", "--classifier", "relevance", "--out", rerank], check=True,
                   capture_output=True)
    ner = os.path.join(workdir, "ner")
    subprocess.run([args.binary, "make-model", "--token-classifier", "O,B-PER,I-PER", "--out", ner], check=True,
                   capture_output=True)
    servers = []
    ok = False
    try:
        main_server = Server(args.binary, model, workdir, ["--qa", qa, "--encoder", embed, "--encoder", cls, "--encoder", rerank,
                                                        "--encoder", ner],
                             name="main")
        servers.append(main_server)
        auth = Server(args.binary, model, workdir, ["--api-key", "secret-one", "--api-key", "secret-two"], name="auth")
        servers.append(auth)
        busy = Server(args.binary, model, workdir, ["--max-num-seqs", "1", "--max-queue-requests", "1"], name="busy")
        servers.append(busy)
        # The Batch API's SDK test compares batch results with online ones:
        # a server of its own, one batch line at a time.
        batch = Server(args.binary, model, workdir, ["--batch-max-in-flight", "1"], name="batch")
        servers.append(batch)
        env = dict(os.environ, RS_HTTP=f"http://127.0.0.1:{main_server.http}",
                   RS_AUTH_HTTP=f"http://127.0.0.1:{auth.http}", RS_BUSY_HTTP=f"http://127.0.0.1:{busy.http}",
                   RS_BATCH_HTTP=f"http://127.0.0.1:{batch.http}",
                   RS_GRPC=f"127.0.0.1:{main_server.grpc}", RS_ROOT=ROOT,
                   RS_OUT=os.path.join(workdir, "screenshots"))
        r = subprocess.run(["node", "--test", "--test-reporter=spec", os.path.join(HERE, "clients.test.mjs"),
                            os.path.join(HERE, "anthropic.test.mjs"), os.path.join(HERE, "responses.test.mjs"),
                            os.path.join(HERE, "structured.test.mjs"), os.path.join(HERE, "files.test.mjs"),
                            os.path.join(HERE, "batches.test.mjs"),
                            os.path.join(HERE, "playground.test.mjs")],
                           env=env, timeout=900)
        ok = r.returncode == 0
        for s in servers:
            if s.stop() != 0:
                print(f"FAIL {s.log_path}: exit code")
                ok = False
    finally:
        for s in servers:
            s.kill()
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"server logs kept in {workdir}")
            for s in servers:
                print(f"--- {s.log_path}\n{s.read_log()[-2000:]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
