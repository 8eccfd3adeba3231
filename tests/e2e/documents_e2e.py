#!/usr/bin/python3
"""Black-box tests of documents, not snippets: a 50,000-word document
summarized through map-reduce on the demo model (the summary is noise; the
mechanics are checked: chunks, progress events, every chunk in flight at
once, usage equal to what the metrics counted), refine/truncate, the size
limit, gRPC SummarizeStream's progress, and multi-passage QA with offsets
in three units and the Hugging Face pipeline's request shape.

Run with Debian's /usr/bin/python3:
    /usr/bin/python3 tests/e2e/documents_e2e.py --binary build/ropeserve [-k NAME]
"""
import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import HANG_GUARD_SECONDS, ROOT, Server, check, post_json, run_tests, wait_until  # noqa: E402

GPL = open(os.path.join(ROOT, "tests", "data", "text", "gpl-3.txt"), encoding="utf-8").read()


def document(words):
    """Real prose (the GPL, repeated) of about `words` words."""
    per = len(GPL.split())
    return "\n\n".join([GPL] * (words // per + 1)) if words > per else " ".join(GPL.split()[:words])


def sse(port, path, body, timeout=600):
    """Yields the JSON events of a streaming POST as they arrive."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, json.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        check(False, f"{path}: HTTP {r.status} {r.read()[:300]!r}")
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().rstrip("\n")
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            break
        yield json.loads(line[6:])
    conn.close()


def post(port, path, body, timeout=600):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    status, text = r.status, r.read()
    conn.close()
    return status, json.loads(text)


class InFlight:
    """Polls /metrics: the most requests running + waiting at once."""

    def __init__(self, server):
        self.server, self.most, self.stop = server, 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            v = self.server.metrics()[1]
            self.most = max(self.most, v.get("ropeserve_num_requests_running", 0) +
                            v.get("ropeserve_num_requests_waiting", 0))
            time.sleep(0.05)

    def done(self):
        self.stop.set()
        self.thread.join()
        return self.most


def counters(server):
    v = server.metrics()[1]
    return v.get("ropeserve_prompt_tokens_total", 0), v.get("ropeserve_generation_tokens_total", 0)


# ---- tests ----

def test_fifty_thousand_words_map_reduce(env):
    s = env.main
    text = document(50000)
    check(len(text.split()) >= 50000, "document too short")
    p0, g0 = counters(s)
    poller = InFlight(s)
    started = time.time()
    progress, deltas, last = [], [], None
    for e in sse(s.http, "/v1/summarize", {"text": text, "max_tokens": 64}):
        if e.get("event") == "progress":
            check(not deltas, "a progress event after the summary began")
            progress.append(e)
        elif "delta" in e:
            deltas.append(e["delta"])
        elif "finish_reason" in e:
            last = e
        else:
            check(False, f"unexpected event {e}")
    most = poller.done()
    check(last is not None, "no final event")
    check(last["strategy"] == "map_reduce", last)
    chunks = last["usage"]["chunks"]
    maps = [e for e in progress if e["phase"] == "map"]
    check(len(maps) == chunks and [e["chunks_done"] for e in maps] == list(range(1, chunks + 1)),
          f"{len(maps)} map events for {chunks} chunks")
    check(all(e["chunks_total"] == chunks for e in maps), "chunks_total varies")
    check(chunks >= 20, f"only {chunks} chunks for 50,000 words on a 2048-token model")
    reduces = [e for e in progress if e["phase"] == "reduce"]
    check(reduces and reduces[-1]["chunks_done"] == reduces[-1]["chunks_total"], "no complete reduce round")
    # Every chunk request was in the engine at once (running or queued).
    check(most >= chunks, f"at most {most} requests in flight for {chunks} chunks")
    # Usage is every request's tokens: exactly what the engine counted.
    p1, g1 = counters(s)
    check(last["usage"]["prompt_tokens"] == p1 - p0, f"usage {last['usage']} vs prompt counter {p1 - p0}")
    check(last["usage"]["completion_tokens"] == g1 - g0, f"usage {last['usage']} vs generation counter {g1 - g0}")
    check(last["usage"]["prompt_tokens"] > len(text.split()), "prompt tokens below the document's words")
    check(last["usage"]["total_tokens"] == last["usage"]["prompt_tokens"] + last["usage"]["completion_tokens"], last)
    print(f"  {chunks} chunks, {len(reduces)} reduce steps, {most} in flight, {time.time() - started:.1f} s")


def test_a_client_that_leaves_cancels_every_chunk(env):
    s = env.main
    conn = http.client.HTTPConnection("127.0.0.1", s.http, timeout=HANG_GUARD_SECONDS)
    conn.request("POST", "/v1/summarize", json.dumps({"text": document(20000), "max_tokens": 64, "stream": True}),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    check(r.status == 200, f"HTTP {r.status}")
    # The first event, or the keep-alive comment a slow (loaded) map phase sends first.
    first = r.readline()
    check(first.startswith(b"data: ") or first.startswith(b": keep-alive"), f"no first event: {first!r}")
    v = s.metrics()[1]
    check(v["ropeserve_num_requests_running"] + v["ropeserve_num_requests_waiting"] > 0, "nothing in flight")
    conn.sock.close()  # the client goes away mid-map
    conn.close()
    wait_until(lambda: (lambda m: m["ropeserve_num_requests_running"] == 0 and
                        m["ropeserve_num_requests_waiting"] == 0 and m["ropeserve_kv_cache_usage_perc"] == 0)(
        s.metrics()[1]), 10, "chunk requests still running after the client left")


def test_refine_truncate_and_unary(env):
    s = env.main
    text = document(2500)
    status, refine = post(s.http, "/v1/summarize", {"text": text, "strategy": "refine", "chunk_tokens": 1024,
                                                    "max_tokens": 16, "style": "bullets", "focus": "licences"})
    check(status == 200 and refine["strategy"] == "refine" and refine["usage"]["chunks"] >= 2, refine)
    status, trunc = post(s.http, "/v1/summarize", {"text": text, "strategy": "truncate", "max_tokens": 8})
    check(status == 200 and trunc["strategy"] == "truncate" and "chunks" not in trunc["usage"], trunc)
    status, short = post(s.http, "/v1/summarize", {"text": "A short note.", "max_tokens": 4})
    check(status == 200 and short["strategy"] == "single", short)
    status, err = post(s.http, "/v1/summarize", {"text": text, "chunk_tokens": 5})
    check(status == 400 and err["error"]["param"] == "chunk_tokens", err)
    status, err = post(s.http, "/v1/summarize", {"text": text, "style": "sonnet"})
    check(status == 400 and err["error"]["param"] == "style", err)


def test_document_size_limit_is_413(env):
    g = env.g
    small = Server(env.binary, env.model, env.workdir, ["--max-document-bytes", "20000"], name="small-docs")
    try:
        status, err = post(small.http, "/v1/summarize", {"text": document(5000)})
        check(status == 413 and err["error"]["code"] == "payload_too_large" and err["error"]["param"] == "text", err)
        code = g.code(lambda: g.stub(small.grpc).Summarize(g.pb.SummarizeRequest(text=document(5000)), timeout=30))
        check(code == "RESOURCE_EXHAUSTED", code)
        status, _ = post(small.http, "/v1/summarize", {"text": document(500), "max_tokens": 4})
        check(status == 200, "a document under the limit")
    finally:
        check(small.stop() == 0, "exit code")


def test_grpc_summarize_stream_reports_progress(env):
    s, g = env.main, env.g
    req = g.pb.SummarizeRequest(text=document(3000), max_tokens=12, chunk_tokens=512, chunk_max_tokens=16)
    msgs = list(g.stub(s.grpc).SummarizeStream(req, timeout=300))
    progress = [m.progress for m in msgs if m.HasField("progress")]
    check(progress and progress[0].phase == "map" and progress[0].chunks_done == 1, progress[:2])
    first_text = next(i for i, m in enumerate(msgs) if m.delta or m.finish_reason)
    check(all(not m.HasField("progress") for m in msgs[first_text:]), "progress after the summary began")
    maps = [p for p in progress if p.phase == "map"]
    check(len(maps) == maps[0].chunks_total >= 4, f"{len(maps)} map messages")
    unary = g.stub(s.grpc).Summarize(req, timeout=300)
    check(unary.strategy == "map_reduce" and unary.chunks == len(maps), unary)
    check(unary.summary == "".join(m.delta for m in msgs), "stream and unary differ (greedy)")
    check(unary.usage.prompt_tokens == msgs[-1].usage.prompt_tokens > 0, "usage differs")
    status, rest = post(s.http, "/v1/summarize", {"text": req.text, "max_tokens": 12, "chunk_tokens": 512,
                                                  "chunk_max_tokens": 16})
    check(status == 200 and rest["summary"] == unary.summary, "REST and gRPC differ")


def utf16_slice(text, start, end):
    return text.encode("utf-16-le")[2 * start:2 * end].decode("utf-16-le")


def test_multi_passage_qa(env):
    s, g = env.main, env.g
    passages = [{"id": f"doc-{i}", "text": f"Passage {i} \u00e9t\u00e9 \U0001F600 mentions item {i} and value {i * 7}."}
                for i in range(5)]
    passages[3] = passages[3]["text"]  # a plain string passage (no id)
    for unit in ("code_point", "utf16", "utf8_byte"):
        for scoring in ("pipeline", "logits"):
            status, r, _ = post_json(s.http, "/v1/qa", {"question": "Which value?", "contexts": passages, "top_k": 4,
                                                     "offset_unit": unit, "scoring": scoring,
                                                     "handle_impossible_answer": True})
            check(status == 200 and r["offset_unit"] == unit, r)
            check("null_score" in r, "no null_score")
            scores = [a["score"] for a in r["answers"]]
            check(scores == sorted(scores, reverse=True), scores)
            for a in r["answers"]:
                check(a["answer"] == a["text"], a)
                if a["answer"] == "":
                    check(a["passage"] is None, a)
                    continue
                p = passages[a["passage"]]
                body = p if isinstance(p, str) else p["text"]
                check(a.get("passage_id") == (None if isinstance(p, str) else p["id"]), a)
                got = {"code_point": lambda: body[a["start"]:a["end"]],
                       "utf16": lambda: utf16_slice(body, a["start"], a["end"]),
                       "utf8_byte": lambda: body.encode()[a["start"]:a["end"]].decode()}[unit]()
                check(got == a["answer"], f"{unit}: {got!r} != {a['answer']!r}")
    # The Hugging Face pipeline's shape.
    status, hf, _ = post_json(s.http, "/v1/qa", {"inputs": {"question": "Which item?", "context": passages[0]["text"]},
                                              "parameters": {"top_k": 2}})
    check(status == 200 and 1 <= len(hf["answers"]) <= 2 and "answer" in hf["answers"][0], hf)
    # gRPC: the same passages, answers and offsets as REST.
    status, rest, _ = post_json(s.http, "/v1/qa", {"question": "Which value?", "contexts": passages, "top_k": 3,
                                                "offset_unit": "utf16"})
    req = g.pb.AnswerRequest(question="Which value?", top_k=3, offset_unit="utf16",
                             passages=[g.pb.Passage(id=p["id"], text=p["text"]) if isinstance(p, dict)
                                       else g.pb.Passage(text=p) for p in passages])
    r = g.stub(s.grpc).Answer(req, timeout=HANG_GUARD_SECONDS)
    check([(a.text, a.start, a.end, a.passage) for a in r.answers] ==
          [(a["answer"], a["start"], a["end"], a["passage"]) for a in rest["answers"]], f"{r.answers} vs {rest}")
    check(g.code(lambda: g.stub(s.grpc).Answer(g.pb.AnswerRequest(question="q", context="c", passages=[
        g.pb.Passage(text="x")]), timeout=10)) == "INVALID_ARGUMENT", "context and passages together")


if __name__ == "__main__":
    sys.exit(run_tests([v for k, v in list(globals().items()) if k.startswith("test_")], __doc__))
