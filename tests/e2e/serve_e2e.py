#!/usr/bin/python3
"""Black-box tests of `ropeserve serve`: the real binary on a tiny generated
model, driven by clients we did not write: curl (REST and SSE), Python's
grpcio with stubs generated from proto/ at test time. (Metrics, the
Prometheus server and tracing: tests/e2e/ops_e2e.py.)

Run with Debian's /usr/bin/python3 (python3-grpcio; stubs from protoc and grpc_python_plugin):
    /usr/bin/python3 tests/e2e/serve_e2e.py --binary build/ropeserve [-k NAME]
Each test prints PASS/FAIL; the exit code is the number of failures.
"""
import base64
import json
import math
import os
import random
import re
import signal
import struct
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import (HANG_GUARD_SECONDS, TEXT, Failure, Server, StreamingClient, check, curl,  # noqa: E402
                     post_json, post_together, run_tests, stream, wait_until)

# ---- tests ----

def summarize_body(**kw):
    return dict({"text": TEXT, "max_tokens": 24}, **kw)


def test_summarize_rest_sse_and_grpc_agree(env):
    s, g = env.main, env.g
    status, unary, hdrs = post_json(s.http, "/v1/summarize", summarize_body())
    check(status == 200, f"summarize: {status} {unary}")
    for key in ("id", "model", "summary", "finish_reason", "usage"):
        check(key in unary, f"summarize response lacks {key}: {unary}")
    check(set(unary["usage"]) == {"prompt_tokens", "completion_tokens", "cached_tokens", "total_tokens"}, unary["usage"])
    check(unary["usage"]["completion_tokens"] == 24 or unary["finish_reason"] == "stop", unary)
    status, events = stream(s.http, "/v1/summarize", summarize_body())
    check(status == 200 and events[-1] == "[DONE]", f"SSE summarize: {status} {events[-3:]}")
    parsed = [json.loads(e) for e in events[:-1]]
    text = "".join(p.get("delta", "") for p in parsed)
    check(text == unary["summary"], f"streamed {text!r} != unary {unary['summary']!r}")
    check(parsed[-1]["finish_reason"] == unary["finish_reason"], parsed[-1])
    check(parsed[-1]["usage"]["completion_tokens"] == unary["usage"]["completion_tokens"], parsed[-1])
    # gRPC unary and streaming.
    stub = g.stub(s.grpc)
    req = g.pb.SummarizeRequest(text=TEXT, max_tokens=24)
    r = stub.Summarize(req, timeout=HANG_GUARD_SECONDS)
    check(r.summary == unary["summary"], f"gRPC summary {r.summary!r} != REST {unary['summary']!r}")
    check(r.usage.prompt_tokens == unary["usage"]["prompt_tokens"], r.usage)
    chunks = list(stub.SummarizeStream(req, timeout=HANG_GUARD_SECONDS))
    check("".join(c.delta for c in chunks) == unary["summary"], "gRPC stream differs")
    check(chunks[-1].finish_reason == unary["finish_reason"] and chunks[-1].usage.completion_tokens ==
          unary["usage"]["completion_tokens"], chunks[-1])
    # Instruction: a different prompt.
    _, other, _ = post_json(s.http, "/v1/summarize", summarize_body(instruction="List the decisions."))
    check(other["usage"]["prompt_tokens"] != unary["usage"]["prompt_tokens"], "instruction ignored")


def test_greedy_outputs_agree_across_protocols(env):
    s, g = env.main, env.g
    # Summarize == chat completion of the same user message (chat template).
    _, summ, _ = post_json(s.http, "/v1/summarize", summarize_body())
    msg = "Summarize the following text concisely, in a few sentences.\n\n" + TEXT
    status, chat, _ = post_json(s.http, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": msg}], "max_tokens": 24, "temperature": 0})
    check(status == 200, chat)
    check(chat["choices"][0]["message"]["content"] == summ["summary"], "chat != summarize")
    # Completions (REST, unary and SSE) == gRPC Generate.
    body = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    status, comp, _ = post_json(s.http, "/v1/completions", body)
    check(status == 200, comp)
    ids = comp["choices"][0]["token_ids"]
    check(len(ids) == 16 and "prompt_token_ids" in comp["choices"][0], comp)
    status, events = stream(s.http, "/v1/completions", body)
    chunks = [json.loads(e) for e in events[:-1]]
    check(sum((c["choices"][0]["token_ids"] for c in chunks), []) == ids, "streamed ids differ")
    check("".join(c["choices"][0]["text"] for c in chunks) == comp["choices"][0]["text"], "streamed text differs")
    resp = list(g.stub(s.grpc).Generate(g.pb.GenerateRequest(prompt="Once upon a time", max_tokens=16,
                                                              ignore_eos=True), timeout=HANG_GUARD_SECONDS))
    check([t for m in resp for t in m.token_ids] == ids, "gRPC Generate ids differ")
    check("".join(m.text for m in resp) == comp["choices"][0]["text"], "gRPC Generate text differs")
    check(resp[-1].finish_reason == "length" and resp[-1].usage.completion_tokens == 16, resp[-1])


def test_vllm_allowed_ids_and_kept_stop_strings(env):
    s, g = env.main, env.g
    body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    status, free, _ = post_json(s.http, "/v1/completions", body)
    check(status == 200, free)
    ids, text = free["choices"][0]["token_ids"], free["choices"][0]["text"]
    # allowed_token_ids: every token is one of them (REST and gRPC alike).
    allowed = sorted({ids[3], ids[7], 5})
    status, only, _ = post_json(s.http, "/v1/completions", dict(body, allowed_token_ids=allowed))
    check(status == 200 and set(only["choices"][0]["token_ids"]) <= set(allowed), only)
    req = g.pb.GenerateRequest(prompt="Once upon a time", max_tokens=12, ignore_eos=True,
                               sampling=g.pb.SamplingParams(allowed_token_ids=allowed))
    resp = list(g.stub(s.grpc).Generate(req, timeout=HANG_GUARD_SECONDS))
    check([t for m in resp for t in m.token_ids] == only["choices"][0]["token_ids"], "gRPC allowed ids differ")
    status, err, _ = post_json(s.http, "/v1/completions", dict(body, allowed_token_ids=[]))
    check(status == 400 and err["error"]["param"] == "allowed_token_ids", err)
    # include_stop_str_in_output: the text ends with the stop string, unary
    # and streamed alike.
    # (A stop string of two characters of the output after its start,
    # none of them a replacement character: those stand for bytes that are
    # not UTF-8, which no stop string matches.)
    starts = [i for i in range(2, len(text) - 1) if "\ufffd" not in text[i:i + 2]]
    check(starts, text)
    stop = text[starts[0]:starts[0] + 2]
    kept = dict(body, stop=[stop], include_stop_str_in_output=True)
    status, out, _ = post_json(s.http, "/v1/completions", kept)
    want = text[:text.find(stop) + len(stop)]
    check(status == 200 and out["choices"][0]["text"] == want, (stop, text, out))
    check(out["choices"][0]["finish_reason"] == "stop", out)
    status, events = stream(s.http, "/v1/completions", kept)
    streamed = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e)["choices"])
    check(streamed == want, (streamed, want))
    # truncate_prompt_tokens: the prompt's last tokens only.
    prompt_ids = free["choices"][0]["prompt_token_ids"]
    check(len(prompt_ids) > 2, free)
    status, cut, _ = post_json(s.http, "/v1/completions", dict(body, truncate_prompt_tokens=2))
    check(status == 200 and cut["choices"][0]["prompt_token_ids"] == prompt_ids[-2:]
          and cut["usage"]["prompt_tokens"] == 2, cut)
    status, err, _ = post_json(s.http, "/v1/completions", dict(body, truncate_prompt_tokens=0))
    check(status == 400 and err["error"]["param"] == "truncate_prompt_tokens", err)
    # The render endpoint reports them as vLLM's SamplingParams, with the
    # kept tokens and their offsets in the prompt.
    status, rendered, _ = post_json(s.http, "/v1/completions/render",
                                    dict(kept, allowed_token_ids=allowed, bad_words=["xyz"], truncate_prompt_tokens=2,
                                         return_token_offsets=True))
    check(status == 200, rendered)
    sp = rendered[0]["sampling_params"]
    check(sp.get("include_stop_str_in_output") is True and sp.get("allowed_token_ids") == allowed
          and sp.get("bad_words") == ["xyz"] and sp.get("skip_special_tokens") is True
          and sp.get("truncate_prompt_tokens") == 2, rendered)
    check(rendered[0]["token_ids"] == prompt_ids[-2:] and len(rendered[0]["token_offsets"]) == 2
          and rendered[0]["token_offsets"][-1][1] == len("Once upon a time"), rendered)


def test_openai_streaming_details(env):
    s = env.main
    status, events = stream(s.http, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0, "n": 2,
        "stream_options": {"include_usage": True}})
    check(status == 200 and events[-1] == "[DONE]", events[-2:])
    chunks = [json.loads(e) for e in events[:-1]]
    check(all(c["object"] == "chat.completion.chunk" for c in chunks), chunks[0])
    usage = chunks[-1]
    check(usage["choices"] == [] and usage["usage"]["completion_tokens"] == 10, usage)
    for i in (0, 1):
        mine = [c["choices"][0] for c in chunks[:-1] if c["choices"][0]["index"] == i]
        check(mine[0]["delta"].get("role") == "assistant", mine[0])
        check(mine[-1]["finish_reason"] == "length", mine[-1])
    # A list of prompts: one choice per prompt.
    status, body, _ = post_json(s.http, "/v1/completions", {"prompt": ["a b", "c d"], "max_tokens": 2})
    check(status == 200 and [c["index"] for c in body["choices"]] == [0, 1], body)
    # /v1/models and /v1/info.
    status, models, _ = post_json(s.http, "/v1/models", None)
    check(status == 200 and models["data"][0]["id"] == "model", models)
    status, _, text = curl(s.http, "/v1/info")
    info = json.loads(text)
    check(info["kv_cache"]["block_size"] == 16 and info["device"] == "cpu" and info["limits"]["max_num_seqs"] > 0
          and info["quantization"] == "none", info)
    # The CPU kernels' configuration (the defaults: ctest sets none of it):
    # the ISA chosen (auto: the best this CPU runs) and the CPU it runs on.
    k = info["kernels"]
    # The int8 / int4 crossovers in effect (auto: the ISA's): AVX2's
    # matrix-vector kernels take every row count; with VNNI (and where no
    # table of its own applies) 16 and 48.
    vnni = "avx512_vnni" in k["cpu_extensions"].split()
    avx2_kernels = k["isa"] == "avx2" or (k["isa"] in ("avx512", "amx") and not vnni)
    crossovers = ("65536", "65536") if avx2_kernels else ("16", "48")
    check(k["isa_requested"] == "auto" and k["isa"] in ("generic", "neon", "avx2", "avx512", "amx")
          and k["cpu"] and k["cpu_extensions"] and k["pool_spin_us"] == "200"
          and k["int8_vnni_max_rows"] == crossovers[0] and k["int4_kernel_max_rows"] == crossovers[1]
          and k["int4_activations"] == ("int8_per_group" if avx2_kernels else "int16_per_row"), info)
    if "avx2" in k["cpu_extensions"].split():
        check(k["isa"] != "generic", k)


def test_structured_output_over_rest_and_grpc(env):
    s, g = env.main, env.g
    schema = {"type": "object", "properties": {"summary": {"type": "string", "maxLength": 30},
                                               "keywords": {"type": "array", "items": {"enum": ["bike", "vote", "city"]},
                                                            "minItems": 1, "maxItems": 3}},
              "required": ["summary", "keywords"]}
    # A summary as JSON, REST unary and SSE and gRPC unary agree (greedy).
    body = summarize_body(max_tokens=120, response_format={"type": "json_schema",
                                                           "json_schema": {"name": "s", "schema": schema}})
    status, unary, _ = post_json(s.http, "/v1/summarize", body)
    check(status == 200 and unary["finish_reason"] == "stop", unary)
    value = json.loads(unary["summary"])
    check(set(value) == {"summary", "keywords"} and len(value["summary"]) <= 30 and 1 <= len(value["keywords"]) <= 3,
          value)
    status, events = stream(s.http, "/v1/summarize", body)
    check("".join(json.loads(e).get("delta", "") for e in events[:-1]) == unary["summary"], "SSE differs")
    stub = g.stub(s.grpc)
    r = stub.Summarize(g.pb.SummarizeRequest(text=TEXT, max_tokens=120,
                                             constraint=g.pb.OutputConstraint(json_schema=json.dumps(schema))),
                       timeout=HANG_GUARD_SECONDS)
    check(r.summary == unary["summary"], f"gRPC {r.summary!r} != REST {unary['summary']!r}")
    # gRPC Generate with a regex and with choices; n > 1 streamed over REST.
    resp = list(stub.Generate(g.pb.GenerateRequest(prompt="Code:", max_tokens=20,
                                                   constraint=g.pb.OutputConstraint(regex="[A-Z]{2}-[0-9]{3}")),
                              timeout=HANG_GUARD_SECONDS))
    text = "".join(m.text for m in resp)
    check(re.fullmatch(r"[A-Z]{2}-[0-9]{3}", text) and resp[-1].finish_reason == "stop", (text, resp[-1]))
    choices = g.pb.OutputConstraint(choice=g.pb.OutputConstraint.Choices(values=["left", "right"]))
    resp = list(stub.Generate(g.pb.GenerateRequest(prompt="Go", max_tokens=5, constraint=choices), timeout=HANG_GUARD_SECONDS))
    check("".join(m.text for m in resp) in ("left", "right"), resp)
    status, events = stream(s.http, "/v1/completions", {"prompt": "Go", "n": 3, "temperature": 1, "max_tokens": 40,
                                                        "guided_regex": "(ab|cd)+!"})
    texts = {}
    for e in events[:-1]:
        c = json.loads(e)["choices"][0]
        texts[c["index"]] = texts.get(c["index"], "") + c["text"]
    check(len(texts) == 3 and all(re.fullmatch(r"(ab|cd)+!", t) for t in texts.values()), texts)
    # Errors: a keyword it cannot compile names itself, over both transports.
    status, err, _ = post_json(s.http, "/v1/completions", {"prompt": "x", "guided_json": {"not": {}}})
    check(status == 400 and err["error"]["param"] == "guided_json" and "'not'" in err["error"]["message"], err)
    try:
        list(stub.Generate(g.pb.GenerateRequest(prompt="x", constraint=g.pb.OutputConstraint(regex="(?=a)")),
                           timeout=HANG_GUARD_SECONDS))
        check(False, "a lookahead was accepted")
    except g.grpc.RpcError as e:
        check(e.code() == g.grpc.StatusCode.INVALID_ARGUMENT and "lookaround" in e.details(), e)
    status, err, _ = post_json(s.http, "/v1/completions", {"prompt": "x", "guided_regex": "a", "ignore_eos": True})
    check(status == 400 and err["error"]["param"] == "ignore_eos", err)


def test_question_answering_rest_and_grpc(env):
    s, g = env.main, env.g
    context = "The quick brown fox jumps over the lazy dog. It was a sunny day in the park near the river."
    body = {"question": "Where does the fox jump?", "context": context, "top_k": 3}
    status, one, _ = post_json(s.http, "/v1/qa", body)
    check(status == 200 and one["model"] == "qa", f"{status} {one}")
    check(1 <= len(one["answers"]) <= 3, one)
    for a in one["answers"]:
        check(set(a) == {"answer", "text", "score", "start", "end"} and a["answer"] == a["text"], a)
        check(context[a["start"]:a["end"]] == a["text"], f"not a substring: {a}")
    scores = [a["score"] for a in one["answers"]]
    check(scores == sorted(scores, reverse=True), scores)
    # Batched inputs answer each pair as if alone.
    status, batch, _ = post_json(s.http, "/v1/qa", {"inputs": [{"question": body["question"], "context": context},
                                                                {"question": "What?", "context": "A red ball."}],
                                                     "top_k": 3})
    check(status == 200 and len(batch["results"]) == 2, batch)
    check(batch["results"][0]["answers"] == one["answers"], "batched answers differ from the single request's")
    # A long context split into several windows; logits scoring; null answer.
    long_context = " ".join(f"Sentence {i} talks about item {i}." for i in range(200))
    status, long_ans, _ = post_json(s.http, "/v1/qa", {"question": "Which item?", "context": long_context,
                                                       "max_seq_len": 64, "doc_stride": 16, "scoring": "logits",
                                                       "handle_impossible_answer": True, "top_k": 2})
    check(status == 200 and long_ans["usage"]["windows"] > 3, long_ans.get("usage", long_ans))
    for a in long_ans["answers"]:
        check(long_context[a["start"]:a["end"]] == a["text"], a)
    # gRPC Answer gives the same answers.
    r = g.stub(s.grpc).Answer(g.pb.AnswerRequest(question=body["question"], context=context, top_k=3),
                              timeout=HANG_GUARD_SECONDS)
    check([(a.text, a.start, a.end) for a in r.answers] == [(a["text"], a["start"], a["end"]) for a in one["answers"]],
          f"gRPC {r.answers} != REST {one['answers']}")
    for a, b in zip(r.answers, one["answers"]):
        check(abs(a.score - b["score"]) < 1e-9, "scores differ")
    # Errors.
    check(post_json(s.http, "/v1/qa", {"question": "x"})[0] == 400, "missing context")
    check(post_json(s.http, "/v1/qa", dict(body, scoring="best"))[0] == 400, "bad scoring")
    check(post_json(s.http, "/v1/qa", dict(body, max_seq_len=100000))[0] == 400, "max_seq_len beyond the model")
    check(post_json(s.http, "/v1/qa", dict(body, question=""))[0] == 400, "empty question")
    check(g.code(lambda: g.stub(s.grpc).Answer(g.pb.AnswerRequest(question="q", context=""), timeout=10))
          == "INVALID_ARGUMENT", "gRPC empty context")
    _, values = s.metrics()
    check(values.get("ropeserve_qa_request_latency_seconds_count", 0) >= 4, "QA latency not observed")


def test_encoder_and_qa_alone_serve_no_decoder(env):
    """`serve --encoder DIR --qa DIR` without --model serves those models
    only (their own worker threads, no engine): the generation endpoints
    answer 501, everything else works; --demo on adds the demo decoder."""
    g = env.g
    s = Server(env.binary, None, env.workdir, ["--encoder", env.embed_model, "--qa", env.qa_model, "--demo", "off"],
               name="encoders-only", env={"ROPESERVE_CACHE": os.path.join(env.workdir, "cache-encoders-only")})
    try:
        status, _, models = curl(s.http, "/v1/models")
        tasks = {m["id"]: m["task"] for m in json.loads(models)["data"]}
        check(status == 200 and tasks == {"embed": "embed", "qa": "question-answering"}, f"{status} {models}")
        # The same vectors as the main server's, where the engine's steps run them.
        body = {"model": "embed", "input": ["hello world", "a second one"]}
        status, out, _ = post_json(s.http, "/v1/embeddings", body)
        check(status == 200, f"{status} {out}")
        _, main_out, _ = post_json(env.main.http, "/v1/embeddings", body)
        check([d["embedding"] for d in out["data"]] == [d["embedding"] for d in main_out["data"]],
              "embeddings differ from the main server's")
        qa = {"question": "What is the capital?", "context": "The capital of France is Paris. It is large."}
        status, answer, _ = post_json(s.http, "/v1/qa", qa)
        _, main_answer, _ = post_json(env.main.http, "/v1/qa", qa)
        check(status == 200 and [(a["start"], a["end"]) for a in answer["answers"]]
              == [(a["start"], a["end"]) for a in main_answer["answers"]], f"{status} {answer} vs {main_answer}")
        for path, payload in (("/v1/completions", {"prompt": "hi", "max_tokens": 2}),
                              ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                              ("/v1/summarize", {"text": TEXT}), ("/tokenize", {"prompt": "hi"})):
            status, err, _ = post_json(s.http, path, payload)
            check(status == 501 and "serve --model" in err["error"]["message"], f"{path}: {status} {err}")
        check(curl(s.http, "/v1/files")[0] == 501, "files without a generation model")
        status, _, info = curl(s.http, "/v1/info")
        info = json.loads(info)
        check(status == 200 and info["model"] is None and info["kv_cache"] is None
              and [e["model"] for e in info["embedding"]] == ["embed"] and info["qa"]["model"] == "qa"
              and "max_body_bytes" in info["limits"] and "max_num_seqs" not in info["limits"], info)
        check(curl(s.http, "/ready")[0] == 200 and g.health(s.grpc) == "SERVING", "not ready")
        stub = g.stub(s.grpc)
        r = stub.Embed(g.pb.EmbedRequest(inputs=[g.pb.EmbedInput(text="hello world")]), timeout=HANG_GUARD_SECONDS)
        check(list(r.embeddings[0].values) == out["data"][0]["embedding"], "gRPC Embed differs")
        check(g.code(lambda: stub.Generate(g.pb.GenerateRequest(prompt="hi", max_tokens=2), timeout=10))
              == "UNIMPLEMENTED", "gRPC Generate without a decoder")
        check(g.code(lambda: stub.Summarize(g.pb.SummarizeRequest(text=TEXT), timeout=10)) == "UNIMPLEMENTED",
              "gRPC Summarize without a decoder")
        r = stub.GetModelInfo(g.pb.GetModelInfoRequest(), timeout=10)
        check(sorted(m.task for m in r.models) == ["embed", "qa"] and r.num_kv_blocks == 0, r)
        _, values = s.metrics()
        check(values.get('ropeserve_qa_request_latency_seconds_count{model_name="qa"}', 0) >= 1
              and values.get('ropeserve_embedding_request_latency_seconds_count{model_name="embed"}', 0) >= 1,
              "latencies not observed")
        check("DEMO" not in s.read_log(tail=0) and "no generation model" in s.read_log(tail=0), s.read_log())
    finally:
        check(s.stop() == 0, "exit code")
    # --demo on: the demo decoder beside the encoder.
    s = Server(env.binary, None, env.workdir, ["--encoder", env.embed_model, "--demo", "on"], name="encoder-demo",
               env={"ROPESERVE_CACHE": os.path.join(env.workdir, "cache-encoders-only")})
    try:
        status, _, models = curl(s.http, "/v1/models")
        tasks = {m["id"]: m["task"] for m in json.loads(models)["data"]}
        check(tasks == {"demo-tiny": "generate", "embed": "embed"}, models)
        check(post_json(s.http, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2})[0] == 200, "demo decoder")
    finally:
        check(s.stop() == 0, "exit code")


def test_embeddings_openai_and_tei_shapes(env):
    s = env.main
    status, _, models = curl(s.http, "/v1/models")
    cards = {m["id"]: m for m in json.loads(models)["data"]}
    check(cards.get("embed", {}).get("task") == "embed" and cards["embed"]["dimensions"] == 64, cards)
    status, out, _ = post_json(s.http, "/v1/embeddings", {"model": "embed", "input": ["hello world", "a second one"]})
    check(status == 200 and out["object"] == "list" and out["model"] == "embed", f"{status} {out}")
    check([d["index"] for d in out["data"]] == [0, 1] and all(len(d["embedding"]) == 64 for d in out["data"]), out)
    for d in out["data"]:
        check(abs(sum(x * x for x in d["embedding"]) - 1) < 1e-5, "not normalized")
    check(out["usage"]["prompt_tokens"] == out["usage"]["total_tokens"] > 4, out["usage"])
    # base64: the same float32 values, little-endian.
    status, b64, _ = post_json(s.http, "/v1/embeddings", {"input": "hello world", "encoding_format": "base64"})
    raw = base64.b64decode(b64["data"][0]["embedding"])
    check(status == 200 and list(struct.unpack(f"<{len(raw) // 4}f", raw)) == out["data"][0]["embedding"],
          "base64 differs from float")
    # TEI's /embed: a list of vectors; the same numbers.
    status, tei, _ = post_json(s.http, "/embed", {"inputs": "hello world"})
    check(status == 200 and tei == [out["data"][0]["embedding"]], f"{status} {str(tei)[:200]}")
    status, short, _ = post_json(s.http, "/v1/embeddings", {"input": "hello world", "dimensions": 16})
    check(status == 200 and len(short["data"][0]["embedding"]) == 16, short)
    # Errors name the field; the model must exist.
    for body, param in [({"input": ""}, "input"), ({"input": ["a", ""]}, "input[1]"),
                        ({"input": "a", "dimensions": 65}, "dimensions"), ({"input": [[1, 10**6]]}, "input"),
                        ({"input": "a", "prompt_name": "nope"}, "prompt_name"), ({}, "input")]:
        status, err, _ = post_json(s.http, "/v1/embeddings", body)
        check(status == 400 and err["error"]["param"] == param, f"{body}: {status} {err}")
    status, err, _ = post_json(s.http, "/v1/embeddings", {"model": "nope", "input": "a"})
    check(status == 404 and err["error"]["code"] == "model_not_found", err)
    # gRPC Embed: the same vectors as REST (float32 both ways).
    g = env.g
    r = g.stub(s.grpc).Embed(g.pb.EmbedRequest(inputs=[g.pb.EmbedInput(text="hello world"),
                                                        g.pb.EmbedInput(text="a second one")]),
                             timeout=HANG_GUARD_SECONDS)
    check(r.model == "embed" and [list(e.values) for e in r.embeddings] == [d["embedding"] for d in out["data"]],
          "gRPC Embed differs from REST")
    check(r.usage.prompt_tokens == out["usage"]["prompt_tokens"], r.usage)
    ids = g.pb.EmbedInput(ids=g.pb.TokenIds(ids=[1, 2, 3]))
    r = g.stub(s.grpc).Embed(g.pb.EmbedRequest(inputs=[ids], dimensions=8, normalize=False), timeout=HANG_GUARD_SECONDS)
    check(len(r.embeddings[0].values) == 8 and r.embeddings[0].tokens == 3, r)
    check(g.code(lambda: g.stub(s.grpc).Embed(g.pb.EmbedRequest(inputs=[g.pb.EmbedInput(text="")]), timeout=10))
          == "INVALID_ARGUMENT", "gRPC empty input")
    check(g.code(lambda: g.stub(s.grpc).Embed(g.pb.EmbedRequest(model="nope", inputs=[ids]), timeout=10))
          == "NOT_FOUND", "gRPC unknown model")
    _, values = s.metrics()
    check(values.get('ropeserve_embedding_request_latency_seconds_count{model_name="embed"}', 0) >= 6,
          "embedding latency not observed")


def test_classify_score_and_rerank_shapes(env):
    """vLLM's /classify, /score and /rerank, TEI's /predict and /rerank, and
    gRPC Classify and Rerank on a classifier, a cross-encoder and the
    embedder: the shapes those servers answer, the same numbers over REST
    and gRPC, and errors naming the field."""
    s, g = env.main, env.g
    _, _, models = curl(s.http, "/v1/models")
    cards = {m["id"]: m for m in json.loads(models)["data"]}
    check(cards["cls"]["task"] == "classify" and cards["cls"]["labels"] == ["neg", "pos"], cards.get("cls"))
    check(cards["rerank"]["task"] == "score" and cards["rerank"]["score_activation"] == "sigmoid", cards.get("rerank"))
    status, out, _ = post_json(s.http, "/classify", {"model": "cls", "input": ["the owl sleeps", "a fox"]})
    check(status == 200 and out["object"] == "list" and out["model"] == "cls", f"{status} {out}")
    for d in out["data"]:
        check(d["num_classes"] == 2 and abs(sum(d["probs"]) - 1) < 1e-6, d)
        check(d["label"] == ["neg", "pos"][d["probs"].index(max(d["probs"]))], d)
    check(out["usage"]["prompt_tokens"] > 4, out["usage"])
    status, raw, _ = post_json(s.http, "/v1/classify", {"input": "the owl sleeps", "activation": False})
    check(status == 200 and raw["model"] == "cls", raw)  # the first classifier
    logits = raw["data"][0]["probs"]
    exp = [math.exp(v) for v in logits]
    check(all(abs(e / sum(exp) - p) < 1e-6 for e, p in zip(exp, out["data"][0]["probs"])), "softmax of the logits")
    # TEI's /predict: labels from the best down; a two-text list is a pair.
    status, tei, _ = post_json(s.http, "/predict", {"model": "cls", "inputs": "the owl sleeps"})
    check(status == 200 and sorted(tei, key=lambda x: x["label"]) ==
          [{"label": "neg", "score": out["data"][0]["probs"][0]}, {"label": "pos", "score": out["data"][0]["probs"][1]}]
          and tei[0]["score"] >= tei[1]["score"], tei)
    status, batch, _ = post_json(s.http, "/predict", {"model": "cls", "inputs": [["q", "d"], "x"]})
    check(status == 200 and len(batch) == 2 and all(len(b) == 2 for b in batch), batch)
    # gRPC Classify: the same scores.
    r = g.stub(s.grpc).Classify(g.pb.ClassifyRequest(model="cls", inputs=[g.pb.ClassifyInput(text="the owl sleeps"),
                                                                           g.pb.ClassifyInput(text="a fox")]),
                                timeout=HANG_GUARD_SECONDS)
    check([[x.score for x in c.scores] for c in r.results] == [
        [struct.unpack("f", struct.pack("f", p))[0] for p in d["probs"]] for d in out["data"]], "gRPC Classify != REST")
    check([c.label for c in r.results] == [d["label"] for d in out["data"]], r)
    # Reranking with the cross-encoder: vLLM's (Jina/Cohere) shape, TEI's, /score, gRPC Rerank.
    docs = ["the owl sleeps in the oak", "markets open at dawn", "rain on the hills"]
    status, rr, _ = post_json(s.http, "/v1/rerank", {"model": "rerank", "query": "where is the owl", "documents": docs})
    check(status == 200 and rr["model"] == "rerank" and len(rr["results"]) == 3, f"{status} {rr}")
    scores = {x["index"]: x["relevance_score"] for x in rr["results"]}
    check([x["relevance_score"] for x in rr["results"]] == sorted(scores.values(), reverse=True), "not ranked")
    check(all(x["document"]["text"] == docs[x["index"]] and 0 < x["relevance_score"] < 1 for x in rr["results"]), rr)
    status, top, _ = post_json(s.http, "/rerank", {"model": "rerank", "query": "where is the owl", "documents": docs,
                                                   "top_n": 1, "return_documents": False})
    check(status == 200 and top["results"] == [{"index": rr["results"][0]["index"],
                                                "relevance_score": rr["results"][0]["relevance_score"]}], top)
    status, ter, _ = post_json(s.http, "/rerank", {"model": "rerank", "query": "where is the owl", "texts": docs})
    check(status == 200 and {x["index"]: x["score"] for x in ter} == scores and "text" not in ter[0], ter)
    status, sc, _ = post_json(s.http, "/score", {"model": "rerank", "text_1": "where is the owl", "text_2": docs})
    check(status == 200 and [d["score"] for d in sc["data"]] == [scores[i] for i in range(3)], sc)
    r = g.stub(s.grpc).Rerank(g.pb.RerankRequest(model="rerank", query="where is the owl", documents=docs),
                              timeout=HANG_GUARD_SECONDS)
    check({x.index: x.relevance_score for x in r.results} == scores, "gRPC Rerank != REST")
    check(r.usage.prompt_tokens == rr["usage"]["prompt_tokens"], r.usage)
    # A cross-encoder is a classifier of one label too (sigmoid).
    status, one, _ = post_json(s.http, "/classify", {"model": "rerank", "input": "a"})
    check(status == 200 and one["data"][0]["num_classes"] == 1 and 0 < one["data"][0]["probs"][0] < 1, one)
    # The embedder reranks by cosine similarity: the same as its embeddings' dot products.
    status, er, _ = post_json(s.http, "/v1/rerank", {"model": "embed", "query": "owl", "documents": docs[:2]})
    _, emb, _ = post_json(s.http, "/v1/embeddings", {"model": "embed", "input": ["owl"] + docs[:2]})
    vec = [d["embedding"] for d in emb["data"]]
    for x in er["results"]:
        dot = sum(a * b for a, b in zip(vec[0], vec[1 + x["index"]]))
        check(abs(x["relevance_score"] - dot) < 1e-5, f"cosine {x} vs {dot}")
    # Errors: the field, and the model's task.
    for path, body, param in [("/classify", {"model": "cls", "input": ""}, "input"),
                              ("/rerank", {"model": "rerank", "query": "q", "documents": ["a", ""]}, "documents[1]"),
                              ("/rerank", {"model": "rerank", "query": "", "documents": ["a"]}, "query"),
                              ("/score", {"model": "rerank", "text_1": ["a", "b"], "text_2": ["c"]}, "text_1"),
                              ("/rerank", {"model": "cls", "query": "q", "documents": ["a"]}, "model"),
                              ("/v1/embeddings", {"model": "cls", "input": "a"}, "model")]:
        status, err, _ = post_json(s.http, path, body)
        check(status == 400 and err["error"]["param"] == param, f"{path} {body}: {status} {err}")
    # /v1/qa with retrieve: the cross-encoder ranks the passages, the QA model reads the best two.
    passages = [{"id": f"p{i}", "text": t} for i, t in enumerate(docs + ["the owl hunts at night in the woods"])]
    status, qa, _ = post_json(s.http, "/v1/qa", {"question": "where is the owl", "contexts": passages, "top_k": 2,
                                                 "retrieve": {"model": "rerank", "top_k": 2}})
    check(status == 200 and qa["retrieval_model"] == "rerank" and len(qa["retrieved"]) == 2, f"{status} {qa}")
    status, ranked, _ = post_json(s.http, "/v1/rerank", {"model": "rerank", "query": "where is the owl",
                                                         "documents": [p["text"] for p in passages], "top_n": 2})
    check([r["passage"] for r in qa["retrieved"]] == [r["index"] for r in ranked["results"]], "retrieval != /rerank")
    check(all(a["passage"] in [r["passage"] for r in qa["retrieved"]] and a["passage_id"] == f"p{a['passage']}"
              and "retrieval_score" in a for a in qa["answers"]), qa["answers"])
    check(qa["usage"]["retrieval_tokens"] > 0, qa["usage"])
    check(g.code(lambda: g.stub(s.grpc).Rerank(g.pb.RerankRequest(model="cls", query="q", documents=["a"]),
                                               timeout=10)) == "INVALID_ARGUMENT", "gRPC Rerank on a classifier")
    check(g.code(lambda: g.stub(s.grpc).Classify(g.pb.ClassifyRequest(model="cls"), timeout=10)) == "INVALID_ARGUMENT",
          "gRPC Classify without inputs")


def test_token_classification(env):
    """/v1/token-classify and gRPC ClassifyTokens on a token classifier:
    transformers' entity shapes per aggregation_strategy, offsets in the
    three units, REST == gRPC, errors naming the field."""
    s, g = env.main, env.g
    _, _, models = curl(s.http, "/v1/models")
    card = {m["id"]: m for m in json.loads(models)["data"]}["ner"]
    check(card["task"] == "token_classify" and card["labels"] == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], card)
    text = "Ann Lee 🦉 walks to Paris"
    status, none, _ = post_json(s.http, "/v1/token-classify", {"model": "ner", "input": [text, "a fox"],
                                                               "aggregation_strategy": "none", "ignore_labels": []})
    check(status == 200 and none["object"] == "list" and none["aggregation_strategy"] == "none", f"{status} {none}")
    check(len(none["data"]) == 2 and none["usage"]["prompt_tokens"] > 6, none)
    tokens = none["data"][0]["entities"]
    check(len(tokens) >= 6 and all(set(e) == {"entity", "score", "index", "word", "start", "end"} for e in tokens), tokens)
    check(all(0 < e["score"] <= 1 and 0 <= e["start"] <= e["end"] <= len(text) for e in tokens), tokens)
    check([e["index"] for e in tokens] == sorted(e["index"] for e in tokens), "tokens out of order")
    # The default: simple, "O" dropped; groups carry entity_group and no index.
    status, simple, _ = post_json(s.http, "/v1/token-classify", {"input": text})
    check(status == 200 and simple["model"] == "ner" and simple["aggregation_strategy"] == "simple", simple)
    for e in simple["data"][0]["entities"]:
        check(set(e) == {"entity_group", "score", "word", "start", "end"} and e["entity_group"] in ("PER", "LOC"), e)
    # Offsets: the owl is one code point, two UTF-16 units, four UTF-8 bytes.
    after = [e for e in tokens if e["start"] > text.index("🦉")]
    check(after, "no token after the owl")
    for unit, extra in (("utf16", 1), ("utf8_byte", 3)):
        status, u, _ = post_json(s.http, "/v1/token-classify", {"input": text, "aggregation_strategy": "none",
                                                                "ignore_labels": [], "offset_unit": unit})
        check(status == 200 and u["offset_unit"] == unit, u)
        moved = [e for e in u["data"][0]["entities"] if e["index"] in {a["index"] for a in after}]
        check([e["start"] - extra for e in moved] == [a["start"] for a in after], f"{unit}: {moved} vs {after}")
    # gRPC ClassifyTokens: the same entities.
    r = g.stub(s.grpc).ClassifyTokens(g.pb.ClassifyTokensRequest(model="ner", texts=[text, "a fox"],
                                                                 aggregation_strategy="none",
                                                                 ignore_labels=g.pb.LabelList()),
                                      timeout=HANG_GUARD_SECONDS)
    check(r.aggregation_strategy == "none" and len(r.results) == 2, r)
    got = [(e.label, e.score, e.word, e.start, e.end, e.index) for e in r.results[0].entities]
    want = [(e["entity"], e["score"], e["word"], e["start"], e["end"], e["index"]) for e in tokens]
    check(got == want, f"gRPC ClassifyTokens != REST: {got} vs {want}")
    r = g.stub(s.grpc).ClassifyTokens(g.pb.ClassifyTokensRequest(texts=[text]), timeout=HANG_GUARD_SECONDS)
    check([(e.label, e.word, e.start, e.end, e.index) for e in r.results[0].entities] ==
          [(e["entity_group"], e["word"], e["start"], e["end"], -1) for e in simple["data"][0]["entities"]],
          "gRPC default != REST default")
    for body, param in ((({"model": "cls", "input": "a"}), "model"), ({"input": "a", "aggregation_strategy": "mean"},
                        "aggregation_strategy"), ({"input": ["a", ""]}, "input[1]"), ({"input": "a", "stride": 8},
                        "stride"), ({"input": "a", "offset_unit": "bytes"}, "offset_unit")):
        status, err, _ = post_json(s.http, "/v1/token-classify", body)
        check(status == 400 and err["error"]["param"] == param, f"{body}: {status} {err}")
    check(g.code(lambda: g.stub(s.grpc).ClassifyTokens(g.pb.ClassifyTokensRequest(model="cls", texts=["a"]),
                                                       timeout=10)) == "INVALID_ARGUMENT", "gRPC on a classifier")
    check(g.code(lambda: g.stub(s.grpc).ClassifyTokens(g.pb.ClassifyTokensRequest(texts=["a"], offset_unit="x"),
                                                       timeout=10)) == "INVALID_ARGUMENT", "gRPC bad offset_unit")
    # A classifier endpoint refuses the token classifier by name.
    status, err, _ = post_json(s.http, "/classify", {"model": "ner", "input": "a"})
    check(status == 400 and err["error"]["param"] == "model", err)


def test_qa_and_decodes_both_progress(env):
    """A flood of QA requests does not stall running decodes, and many
    running decodes do not stall QA (QA windows share the engine's steps)."""
    s = env.main
    body = {"prompt": "Once upon a time", "max_tokens": 1500, "ignore_eos": True, "temperature": 0}
    streams = [StreamingClient(s.http, "/v1/completions", body) for _ in range(4)]
    for c in streams:
        check(c.read_event() is not None, "no first event")
    counts = [0] * len(streams)
    stop = threading.Event()

    def reader(i):
        while not stop.is_set() and streams[i].read_event() is not None:
            counts[i] += 1

    readers = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(len(streams))]
    for t in readers:
        t.start()
    context = " ".join(f"Fact {i}: the value of item {i} is {i * 7}." for i in range(150))
    results = []

    def ask():
        results.append(post_json(s.http, "/v1/qa", {"question": "What is item 3?", "context": context,
                                                    "max_seq_len": 128, "doc_stride": 32})[0])

    budget = json.loads(curl(s.http, "/v1/info")[2])["limits"]["max_num_batched_tokens"]
    before, m0 = sum(counts), s.metrics()[1]
    # 12 questions of ~40 windows each: enough to need many engine steps
    # beside the decodes (the check below counts steps, not seconds); 24
    # took past the hang guard on a 2-core machine with two other
    # compilers running beside the suite at ROPESERVE_THREADS=2.
    askers = [threading.Thread(target=ask) for _ in range(12)]
    for t in askers:
        t.start()
    for t in askers:
        t.join()
    m1 = s.metrics()[1]
    during = sum(counts) - before
    stop.set()
    for c in streams:
        c.kill()
    check(results.count(200) == len(askers), f"QA answers: {results}")
    check(during > 0, "the decodes made no progress during the QA flood")
    # No clock involved: an engine step runs at most `budget` window tokens
    # and decodes every running stream, so the flood's window tokens took at
    # least ceil(tokens / budget) steps, each giving the 4 streams a token.
    qa_tokens = m1.get("ropeserve_qa_window_tokens_total", 0) - m0.get("ropeserve_qa_window_tokens_total", 0)
    decoded = m1["ropeserve_generation_tokens_total"] - m0["ropeserve_generation_tokens_total"]
    check(qa_tokens > 0, "the QA windows did not run in engine steps")
    steps = -(-qa_tokens // budget)
    check(decoded >= 4 * steps, f"{decoded} tokens decoded while {qa_tokens} window tokens ran (>= {steps} steps)")
    wait_until(lambda: s.metrics()[1].get("ropeserve_num_requests_running") == 0, 60, "decodes still running")


def test_grpc_health_and_reflection(env):
    s, g = env.main, env.g
    check(g.health(s.grpc) == "SERVING", "health")
    check(g.health(s.grpc, "ropeserve.v1.Inference") == "SERVING", "service health")
    ch = g.grpc.insecure_channel(f"127.0.0.1:{s.grpc}")
    stub = g.refl_grpc.ServerReflectionStub(ch)
    responses = list(stub.ServerReflectionInfo(iter([g.refl_pb.ServerReflectionRequest(list_services="")]),
                                               timeout=10))
    names = {sv.name for sv in responses[0].list_services_response.service}
    check({"ropeserve.v1.Inference", "grpc.health.v1.Health"} <= names, names)
    info = g.stub(s.grpc).GetModelInfo(g.pb.GetModelInfoRequest(), timeout=10)
    check(info.models[0].has_tokenizer and info.block_size == 16, info)
    # x-request-id is echoed (REST header, gRPC initial metadata).
    _, hdrs, _ = curl(s.http, "/v1/models", headers=["x-request-id: abc-123"])
    check(hdrs.get("x-request-id") == "abc-123", hdrs)
    _, call = g.stub(s.grpc).GetModelInfo.with_call(g.pb.GetModelInfoRequest(), timeout=10,
                                                    metadata=[("x-request-id", "r-9")])
    check(("x-request-id", "r-9") in list(call.initial_metadata()), call.initial_metadata())


# OpenAI's error `type` per HTTP status (5xx: server_error).
OPENAI_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                      404: "not_found_error", 405: "invalid_request_error", 408: "invalid_request_error",
                      413: "invalid_request_error", 429: "rate_limit_error", 500: "server_error"}


def test_errors_have_one_shape_and_the_right_status(env):
    s, g = env.main, env.g
    cases = [
        ("POST", "/v1/summarize", b'{"text": "abc"', 400),          # truncated JSON
        ("POST", "/v1/summarize", b'{"text": 5}', 400),             # wrong type
        ("POST", "/v1/summarize", b'[1,2]', 400),                   # not an object
        ("POST", "/v1/summarize", b'{"text": "a", "max_tokens": 1e400}', 400),
        ("POST", "/v1/summarize", b'{"text": "a", "max_tokens": 99999999999999999999}', 400),
        ("POST", "/v1/summarize", b'{"text": "a", "max_tokens": 9223372036854775807}', 400),
        ("POST", "/v1/summarize", b'{"text": "a", "max_tokens": 100000}', 400),  # beyond the context
        ("POST", "/v1/summarize", b'{"text": ""}', 400),
        ("POST", "/v1/summarize", b'{"text": "a", "temperature": -1}', 400),
        ("POST", "/v1/summarize", b'{"text": "\xff\xfe"}', 400),   # invalid UTF-8
        ("POST", "/v1/summarize", b"[" * 100000 + b"]" * 100000, 400),  # deep nesting
        ("POST", "/v1/completions", b'{"prompt": [1, 2], "model": "nope"}', 404),
        ("GET", "/v1/nothing", None, 404),
        ("GET", "/v1/summarize", None, 405),
        ("DELETE", "/health", None, 405),
        ("POST", "/v1/summarize", b'{"text": "' + b"a" * (2 << 20) + b'"}', 413),
    ]
    for method, path, raw, want in cases:
        status, hdrs, text = curl(s.http, path, method=method, raw=raw,
                                  headers=["Content-Type: application/json"] if raw else [])
        check(status == want, f"{method} {path} {raw[:40] if raw else ''}: got {status}, want {want}: {text[:200]}")
        body = json.loads(text)
        err = body["error"]
        check(set(err) == {"message", "type", "param", "code"}, body)
        # OpenAI's shape: a type its SDKs know, `code` a string or null.
        check(err["type"] == OPENAI_ERROR_TYPES[want // 100 * 100 if want >= 500 else want], body)
        check(err["code"] is None or isinstance(err["code"], str), body)
        if b"100000" in (raw or b""):
            check(err["code"] == "context_length_exceeded" and err["param"] == "max_tokens", body)
        if path == "/v1/completions":
            check(err["code"] == "model_not_found" and err["param"] == "model", body)
        if want == 405:
            check("allow" in hdrs, hdrs)
    stub = g.stub(s.grpc)
    check(g.code(lambda: stub.Summarize(g.pb.SummarizeRequest(text=""), timeout=10)) == "INVALID_ARGUMENT", "empty")
    check(g.code(lambda: stub.Summarize(g.pb.SummarizeRequest(text="a", model="x"), timeout=10)) == "NOT_FOUND", "model")
    check(g.code(lambda: stub.Summarize(g.pb.SummarizeRequest(text="a", max_tokens=10 ** 9), timeout=10))
          == "INVALID_ARGUMENT", "max_tokens")
    check(g.code(lambda: stub.Generate(g.pb.GenerateRequest(prompt_ids=[10 ** 6]), timeout=10)) == "INVALID_ARGUMENT",
          "vocab")
    check(g.code(lambda: stub.Answer(g.pb.AnswerRequest(question="q", context="c", model="nope"), timeout=10))
          == "NOT_FOUND", "answer with an unknown model")
    # A deadline shorter than the generation: DEADLINE_EXCEEDED. The demo
    # model made these 2000 tokens in 261 ms on a quiet 2-core VM (Debian 13
    # suite, 2026-12-07), inside the 0.3 s this once allowed: 50 ms leaves
    # five times that margin, and a deadline that passes before the server
    # starts the call is DEADLINE_EXCEEDED too.
    long_gen = g.pb.GenerateRequest(prompt="x", max_tokens=2000, ignore_eos=True)
    check(g.code(lambda: stub.Generate(long_gen, timeout=0.05)) == "DEADLINE_EXCEEDED", "deadline")
    # Cancelling a stream: CANCELLED on the client, the request freed.
    it = stub.Generate(long_gen, timeout=HANG_GUARD_SECONDS)
    next(it)
    it.cancel()
    check(g.code(lambda: list(it)) == "CANCELLED", "cancel")
    # Garbage protobuf: the call fails, the server lives on.
    raw = g.grpc.insecure_channel(f"127.0.0.1:{s.grpc}").unary_unary(
        "/ropeserve.v1.Inference/Summarize", request_serializer=lambda b: b, response_deserializer=lambda b: b)
    for garbage in (b"\xff" * 64, bytes(random.Random(1).randrange(256) for _ in range(500)), b"\x0a\xff\xff\xff\xff\x0f"):
        code = g.code(lambda: raw(garbage, timeout=10))
        # gRPC C++'s callback handlers answer a request that does not parse
        # with UNIMPLEMENTED (server_callback_handlers.h); what matters here
        # is that the call fails cleanly and the server lives on.
        check(code in ("INTERNAL", "INVALID_ARGUMENT", "UNIMPLEMENTED"), f"garbage protobuf: {code}")
    wait_until(lambda: s.metrics()[1].get("ropeserve_num_requests_running") == 0, 60, "requests still running")
    status, _, _ = post_json(s.http, "/v1/summarize", summarize_body(max_tokens=2))
    check(status == 200 and s.proc.poll() is None, "the server did not survive")


def test_disconnecting_clients_free_their_kv_blocks(env):
    s = env.main
    max_tokens = 1500
    body = {"prompt": "Once upon a time", "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
    generated_before = s.metrics()[1].get("ropeserve_generation_tokens_total", 0)
    clients = [StreamingClient(s.http, "/v1/completions", body) for _ in range(32)]
    for c in clients:
        check(c.read_event() is not None, "no first event")
    for c in clients[::2]:
        c.kill()
    for c in clients[1::2]:
        events = c.read_all()
        check(events and events[-1] == "[DONE]", f"a remaining client did not finish: {events[-2:]}")
    wait_until(lambda: s.metrics()[1].get("ropeserve_kv_cache_usage_perc") == 0, 60,
               f"KV usage did not return to 0: {s.metrics()[1].get('ropeserve_kv_cache_usage_perc')}")
    _, values = s.metrics()
    check(values.get("ropeserve_num_requests_running") == 0, "requests still running")
    # The dropped requests stopped early: far fewer than 32 full generations.
    generated = values["ropeserve_generation_tokens_total"] - generated_before
    check(generated < 32 * max_tokens - 16 * max_tokens // 2, f"{generated} tokens: dropped clients kept generating")


def test_auth_overload_json_logs_and_yaml_config(env):
    g = env.g
    keyfile = os.path.join(env.workdir, "keys.txt")
    with open(keyfile, "w") as f:
        f.write("# keys\nsecret-two\n")
    config = os.path.join(env.workdir, "serve.yaml")
    with open(config, "w") as f:
        f.write("api-key: [secret-one]\nmax-num-seqs: 1\nmax-queue-requests: 2\nlog-format: json\n")
    s = Server(env.binary, env.model, env.workdir, ["--config", config, "--api-key-file", keyfile], name="auth")
    try:
        ok = ["Authorization: Bearer secret-one"]
        check(post_json(s.http, "/v1/summarize", summarize_body(max_tokens=2))[0] == 401, "no key")
        check(post_json(s.http, "/v1/summarize", summarize_body(max_tokens=2), ["Authorization: Bearer nope"])[0] == 401,
              "bad key")
        check(post_json(s.http, "/v1/summarize", summarize_body(max_tokens=2), ok)[0] == 200, "good key")
        # OpenAI's `user` goes to the access log.
        check(post_json(s.http, "/v1/completions", {"prompt": "hi", "max_tokens": 1, "user": "alice-7"}, ok)[0] == 200,
              "user")
        check(post_json(s.http, "/v1/summarize", summarize_body(max_tokens=2),
                        ["Authorization: Bearer secret-two"])[0] == 200, "key from file")
        check(curl(s.http, "/health")[0] == 200 and curl(s.http, "/metrics")[0] == 200, "probes need no key")
        # This server has a summarizer and no QA model: /v1/qa is 501, Answer UNIMPLEMENTED.
        status, body501, _ = post_json(s.http, "/v1/qa", {"question": "q", "context": "c"}, ok)
        check(status == 501 and body501["error"]["code"] == "not_implemented", f"QA without a QA model: {status}")
        check(g.code(lambda: g.stub(s.grpc).Answer(g.pb.AnswerRequest(question="q", context="c"), timeout=10,
                                                   metadata=[("authorization", "Bearer secret-one")]))
              == "UNIMPLEMENTED", "gRPC Answer without a QA model")
        # ... and no embedding model: /v1/embeddings and /embed 501, Embed UNIMPLEMENTED.
        for path, body in (("/v1/embeddings", {"input": "x"}), ("/embed", {"inputs": "x"}),
                           ("/classify", {"input": "x"}), ("/rerank", {"query": "q", "documents": ["x"]})):
            status, body501, _ = post_json(s.http, path, body, ok)
            check(status == 501 and body501["error"]["code"] == "not_implemented", f"{path} without a model: {status}")
        check(g.code(lambda: g.stub(s.grpc).Embed(g.pb.EmbedRequest(inputs=[g.pb.EmbedInput(text="x")]), timeout=10,
                                                  metadata=[("authorization", "Bearer secret-one")]))
              == "UNIMPLEMENTED", "gRPC Embed without an embedding model")
        stub = g.stub(s.grpc)
        req = g.pb.SummarizeRequest(text=TEXT, max_tokens=2)
        check(g.code(lambda: stub.Summarize(req, timeout=10)) == "UNAUTHENTICATED", "gRPC without key")
        check(g.code(lambda: stub.Summarize(req, timeout=10, metadata=[("authorization", "Bearer x")]))
              == "UNAUTHENTICATED", "gRPC bad key")
        check(g.code(lambda: stub.Summarize(req, timeout=HANG_GUARD_SECONDS,
                                            metadata=[("authorization", "Bearer secret-one")])) == "OK",
              "gRPC good key")
        # Flood: 1 running + 2 waiting fit; the rest get 429 with Retry-After
        # (REST) or RESOURCE_EXHAUSTED (gRPC), and every accepted request
        # completes. The REST requests arrive at once (post_together: a
        # client started one by one could see each finish before the next
        # on a loaded machine), and each runs its 200 tokens (ignore_eos).
        results = []
        lock = threading.Lock()

        def rest_client():
            flood = {"prompt": [5, 6, 7, 8], "max_tokens": 200, "ignore_eos": True}
            for status, fields in post_together(s.http, "/v1/completions", flood, 12, ok):
                with lock:
                    results.append(("rest", status, fields.get("retry-after")))

        def grpc_client():
            code = g.code(lambda: stub.Summarize(g.pb.SummarizeRequest(text=TEXT, max_tokens=200), timeout=HANG_GUARD_SECONDS,
                                                 metadata=[("authorization", "Bearer secret-one")]))
            with lock:
                results.append(("grpc", code, None))

        threads = [threading.Thread(target=rest_client)]
        threads += [threading.Thread(target=grpc_client) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rest = [r for r in results if r[0] == "rest"]
        grpc_codes = [r[1] for r in results if r[0] == "grpc"]
        check(all(code in (200, 429) for _, code, _ in rest), rest)
        check(any(code == 429 for _, code, _ in rest), f"no 429 in {rest}")
        check(all(ra == "1" for _, code, ra in rest if code == 429), "429 without Retry-After")
        check(sum(code == 200 for _, code, _ in rest) + grpc_codes.count("OK") >= 3, results)
        check(set(grpc_codes) <= {"OK", "RESOURCE_EXHAUSTED"}, grpc_codes)
        check("RESOURCE_EXHAUSTED" in grpc_codes or any(c == 429 for _, c, _ in rest), results)
    finally:
        code = s.stop()
    check(code == 0, f"exit code {code}")
    lines = [line for line in s.read_log(tail=None).split("\n") if line.strip()]
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            raise Failure(f"--log-format json wrote a non-JSON line: {line!r}")
        check("time" in obj and "level" in obj and "msg" in obj, obj)
    check(not any("secret-one" in line for line in lines), "an API key was logged")
    check(any(json.loads(line).get("msg") == "http request" for line in lines), "no access log line")
    check(any(json.loads(line).get("user") == "alice-7" for line in lines), "the request's user was not logged")


def test_request_timeout_is_504(env):
    # 1500 tokens of the tiny model take ~0.3 s since the AVX-512 attention
    # (more on a slower machine): a 0.05 s deadline leaves a wide margin.
    s = Server(env.binary, env.model, env.workdir, ["--request-timeout", "0.05"], name="timeout")
    try:
        status, body, _ = post_json(s.http, "/v1/completions",
                                    {"prompt": "x", "max_tokens": 1500, "ignore_eos": True})
        check(status == 504 and body["error"]["code"] == "timeout", f"{status} {body}")
        status, events = stream(s.http, "/v1/completions", {"prompt": "x", "max_tokens": 1500, "ignore_eos": True})
        check(status == 200 and "error" in json.loads(events[-2]) and events[-1] == "[DONE]", events[-2:])
    finally:
        s.stop()


def test_sigterm_drains_streams_and_exits_0(env):
    g = env.g
    s = Server(env.binary, env.model, env.workdir, ["--shutdown-timeout", "60"], name="drain")
    try:
        body = {"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True, "temperature": 0}
        clients = [StreamingClient(s.http, "/v1/completions", body) for _ in range(16)]
        for c in clients:
            check(c.read_event() is not None, "no first event")
        s.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: curl(s.http, "/ready")[0] == 503, 30, "/ready did not turn 503")
        status, body503, _ = post_json(s.http, "/v1/summarize", summarize_body(max_tokens=2))
        check(status == 503 and body503["error"]["code"] == "service_unavailable", f"new work during drain: {status}")
        check(g.health(s.grpc) == "NOT_SERVING", "gRPC health while draining")
        check(g.code(lambda: g.stub(s.grpc).Summarize(g.pb.SummarizeRequest(text="a"), timeout=10)) == "UNAVAILABLE",
              "gRPC during drain")
        for c in clients:
            events = c.read_all()
            check(events[-1] == "[DONE]", f"a stream was cut: {events[-2:]}")
            last = json.loads(events[-2])
            check(last["choices"][0]["finish_reason"] == "length", last)
            tokens = sum(len(json.loads(e)["choices"][0]["text"]) >= 0 for e in events[:-1])
            check(tokens >= 1, "no tokens")
        code = s.proc.wait(timeout=HANG_GUARD_SECONDS)
        check(code == 0, f"exit code {code}:\n{s.read_log()}")
    finally:
        s.kill()


def test_second_signal_exits_at_once(env):
    s = Server(env.binary, env.model, env.workdir, ["--shutdown-timeout", "600"], name="second")
    try:
        c = StreamingClient(s.http, "/v1/completions", {"prompt": "x", "max_tokens": 1900, "ignore_eos": True})
        check(c.read_event() is not None, "no first event")
        s.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: curl(s.http, "/ready")[0] == 503, 30, "/ready did not turn 503")
        s.proc.send_signal(signal.SIGTERM)
        code = s.proc.wait(timeout=10)
        check(code != 0, "a forced exit reported success")
        c.kill()
    finally:
        s.kill()


def test_tls_on_rest_and_grpc(env):
    g = env.g
    cert, key = os.path.join(env.workdir, "cert.pem"), os.path.join(env.workdir, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    s = Server(env.binary, env.model, env.workdir, ["--tls-cert", cert, "--tls-key", key], name="tls", tls=True)
    try:
        status, _, text = curl(s.http, "/v1/summarize", summarize_body(max_tokens=3), scheme="https",
                               extra=["--cacert", cert])
        check(status == 200 and "summary" in json.loads(text), f"HTTPS summarize: {status} {text[:200]}")
        p = subprocess.run(["curl", "-sS", "-o", "/dev/null", f"http://127.0.0.1:{s.http}/health"], capture_output=True)
        check(p.returncode != 0, "plain HTTP answered on the TLS port")
        with open(cert, "rb") as f:
            creds = g.grpc.ssl_channel_credentials(root_certificates=f.read())
        ch = g.grpc.secure_channel(f"127.0.0.1:{s.grpc}", creds)
        info = g.pb_grpc.InferenceStub(ch).GetModelInfo(g.pb.GetModelInfoRequest(), timeout=10)
        check(info.models[0].id == "model", info)
    finally:
        check(s.stop() == 0, "exit code")


def test_int8_weights_are_served(env):
    # --quantization int8 (float32 activations, the harness's --dtype):
    # reported by /v1/info and gRPC, generates over REST and gRPC alike.
    s = Server(env.binary, env.model, env.workdir, ["--quantization", "int8"], name="int8")
    try:
        info = json.loads(curl(s.http, "/v1/info")[2])
        check(info["quantization"] == "int8" and info["dtype"] == "F32", info)
        body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True}
        status, comp, _ = post_json(s.http, "/v1/completions", body)
        check(status == 200 and len(comp["choices"][0]["token_ids"]) == 8, comp)
        g = env.g
        check(g.stub(s.grpc).GetModelInfo(g.pb.GetModelInfoRequest(), timeout=10).models[0].quantization == "int8",
              "gRPC quantization")
        resp = list(g.stub(s.grpc).Generate(g.pb.GenerateRequest(prompt="Once upon a time", max_tokens=8,
                                                                  ignore_eos=True), timeout=HANG_GUARD_SECONDS))
        check([t for m in resp for t in m.token_ids] == comp["choices"][0]["token_ids"], "gRPC ids differ")
        check("with int8 weights" in s.read_log(), s.read_log())
    finally:
        check(s.stop() == 0, "exit code")


def test_speculative_decoding_keeps_the_output_and_counts_acceptance(env):
    # --speculative ngram: the same greedy tokens as the main (non-speculating)
    # server over REST and gRPC, vLLM's spec_decode counters in /metrics, the
    # per-request opt-out, and bad flags refused at start-up by name.
    bad = subprocess.run([env.binary, "serve", "--summarizer", env.model, "--speculative", "ngram",
                          "--prompt-lookup-min", "3", "--prompt-lookup-max", "2"], capture_output=True, timeout=60)
    check(bad.returncode != 0 and b"--prompt-lookup-max" in bad.stderr, bad.stderr)
    s = Server(env.binary, env.model, env.workdir,
               ["--speculative", "ngram", "--num-speculative-tokens", "4", "--prompt-lookup-min", "1"], name="spec")
    try:
        # A prompt that repeats itself; the tiny random model's greedy text
        # loops, which the lookup also proposes.
        prompt = "the cat sat on the mat and the cat sat on the mat and the cat"
        body = {"prompt": prompt, "max_tokens": 40, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
        want = post_json(env.main.http, "/v1/completions", body)[1]["choices"][0]
        status, got, _ = post_json(s.http, "/v1/completions", body)
        check(status == 200 and got["choices"][0]["token_ids"] == want["token_ids"], (got, want))
        check(got["choices"][0]["text"] == want["text"], "text differs")
        status, opted_out, _ = post_json(s.http, "/v1/completions", dict(body, speculative=False))
        check(status == 200 and opted_out["choices"][0]["token_ids"] == want["token_ids"], opted_out)
        status, err, _ = post_json(s.http, "/v1/completions", dict(body, speculative="no"))
        check(status == 400 and err["error"]["param"] == "speculative", err)
        g = env.g
        resp = list(g.stub(s.grpc).Generate(g.pb.GenerateRequest(prompt=prompt, max_tokens=40, ignore_eos=True),
                                            timeout=HANG_GUARD_SECONDS))
        check([t for m in resp for t in m.token_ids] == want["token_ids"], "gRPC ids differ")
        _, values = s.metrics()
        proposed = values.get("vllm:spec_decode_num_draft_tokens_total", 0)
        accepted = values.get("vllm:spec_decode_num_accepted_tokens_total", 0)
        check(proposed > 0 and 0 < accepted <= proposed, (proposed, accepted))
        check(values.get("ropeserve_spec_decode_num_drafts_total", 0) > 0, "drafts not counted")
        per_pos = sum(v for k, v in values.items()
                      if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total{"))
        check(per_pos == accepted, (per_pos, accepted))
        check('position="3"' in s.metrics()[0], "one per-position series per proposal slot")
    finally:
        check(s.stop() == 0, "exit code")


def test_uploaded_files_survive_restarts_and_keep_their_directory(env):
    # The Files API on a data directory: an uploaded file is there after a
    # SIGTERM and after a kill -9; a second server on the same directory
    # refuses to start, naming it; a damaged database stops the start-up.
    data = os.path.join(env.workdir, "files-data")
    path = os.path.join(env.workdir, "requests.jsonl")
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/summarize", "body": {"text": f"Text {i}."}}
             for i in range(3)]
    with open(path, "w") as f:
        f.write("\n".join(json.dumps(x) for x in lines) + "\n")
    s = Server(env.binary, env.model, env.workdir, ["--data-dir", data], name="files")
    try:
        status, _, text = curl(s.http, "/v1/files", extra=["-F", "purpose=batch", "-F", f"file=@{path}"])
        check(status == 200, f"upload: {status} {text}")
        file_id = json.loads(text)["id"]
        second = subprocess.run([env.binary, "serve", "--summarizer", env.model, "--http-port", "0", "--grpc-port",
                                 "-1", "--admin-port", "-1", "--data-dir", data], capture_output=True, timeout=120)
        check(second.returncode != 0 and b"in use by another ropeserve process" in second.stderr,
              f"a second server shared the directory: {second.returncode} {second.stderr[-500:]!r}")
    finally:
        check(s.stop() == 0, "exit code")
    # The first restart follows a SIGTERM, the second a kill -9.
    for after, how in (("sigterm", "kill"), ("kill -9", "sigterm")):
        s = Server(env.binary, env.model, env.workdir, ["--data-dir", data], name=f"files-{how}")
        try:
            status, _, text = curl(s.http, f"/v1/files/{file_id}/content")
            check(status == 200 and text == open(path).read(), f"after a {after}: {status} {text[:200]}")
        finally:
            if how == "kill":
                s.kill()
            else:
                check(s.stop() == 0, "exit code")
    with open(os.path.join(data, "batch.db"), "r+b") as f:
        f.write(b"not a database at all" * 10)
    bad = subprocess.run([env.binary, "serve", "--summarizer", env.model, "--http-port", "0", "--grpc-port", "-1",
                          "--admin-port", "-1", "--data-dir", data], capture_output=True, timeout=120)
    check(bad.returncode != 0 and b"batch.db" in bad.stderr, f"a damaged database: {bad.stderr[-500:]!r}")


def test_a_batch_survives_kill_9_with_every_result_exactly_once(env):
    # 500 lines; the server is killed with SIGKILL five times while they
    # run, then dies (exit 137, a fault hook) in the middle of finalizing:
    # after the result files' contents are written, before their rows
    # commit. The next server finishes the batch: every custom_id exactly
    # once in the output, request_counts never going back, and no stray
    # result file.
    data = os.path.join(env.workdir, "batch-kill-data")
    path = os.path.join(env.workdir, "batch-kill.jsonl")
    n = 500
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"custom_id": f"line-{i}", "method": "POST", "url": "/v1/completions",
                                "body": {"prompt": f"Item {i} of the list", "max_tokens": 64, "temperature": 0,
                                         "ignore_eos": True}}) + "\n")
    args = ["--data-dir", data, "--batch-max-in-flight", "4"]

    def batch_state(s, batch_id):
        status, _, text = curl(s.http, f"/v1/batches/{batch_id}")
        check(status == 200, f"retrieve: {status} {text}")
        return json.loads(text)

    s = Server(env.binary, env.model, env.workdir, args, name="batch-kill-0")
    status, _, text = curl(s.http, "/v1/files", extra=["-F", "purpose=batch", "-F", f"file=@{path}"])
    check(status == 200, f"upload: {status} {text}")
    status, created, _ = post_json(s.http, "/v1/batches", {"input_file_id": json.loads(text)["id"],
                                                           "endpoint": "/v1/completions", "completion_window": "24h"})
    check(status == 200 and created["status"] == "validating", created)
    batch_id = created["id"]
    done, kills = 0, 0
    while kills < 5:
        # Kill once this server has recorded some lines of its own (or the
        # batch ended; "validating" is before it starts: under load the
        # first poll can see it, and a kill then finds nothing done).
        def progressed():
            b = batch_state(s, batch_id)
            return b["request_counts"]["completed"] >= done + 20 or b["status"] not in ("validating", "in_progress")
        wait_until(progressed, 120, "the batch made no progress")
        b = batch_state(s, batch_id)
        check(b["status"] == "in_progress", f"finished before kill {kills + 1}: {b['request_counts']}")
        s.kill()
        kills += 1
        s = Server(env.binary, env.model, env.workdir, args, name=f"batch-kill-{kills}")
        b = batch_state(s, batch_id)
        counted = b["request_counts"]["completed"] + b["request_counts"]["failed"]
        check(counted >= done + 20 and b["request_counts"]["total"] == n, f"lost lines: {b['request_counts']}")
        done = counted
    s.kill()
    hooks = os.environ.get("ROPESERVE_TEST_HOOKS_BUILT", "1") != "0"
    if hooks:
        # The sixth server dies while finalizing.
        crash = Server(env.binary, env.model, env.workdir, args, name="batch-kill-crash",
                       env={"ROPESERVE_INJECT_BATCH_CRASH": "finalizing"}, wait=False)
        try:
            code = crash.proc.wait(timeout=300)
        finally:
            crash.kill()
        check(code == 137 and "exiting while a batch is finalized" in crash.read_log(),
              f"the crash hook did not fire: exit {code}\n{crash.read_log()}")
    else:
        print("skipped the crash while finalizing: serve was built without its test hooks")
    s = Server(env.binary, env.model, env.workdir, args, name="batch-kill-last")
    try:
        wait_until(lambda: batch_state(s, batch_id)["status"] == "completed", 120, "the batch did not complete")
        b = batch_state(s, batch_id)
        check(b["request_counts"] == {"total": n, "completed": n, "failed": 0}, b["request_counts"])
        check(b["error_file_id"] is None, b)
        status, _, text = curl(s.http, f"/v1/files/{b['output_file_id']}/content")
        check(status == 200, f"output: {status}")
        lines = [json.loads(x) for x in text.splitlines()]
        ids = [x["custom_id"] for x in lines]
        check(len(ids) == n and set(ids) == {f"line-{i}" for i in range(n)}, f"{len(ids)} lines, {len(set(ids))} ids")
        for x in lines:
            r = x["response"]
            check(r["status_code"] == 200 and r["body"]["usage"]["completion_tokens"] == 64 and x["error"] is None, x)
        # One output file: the one the crashed finalize wrote was swept.
        status, _, listed = curl(s.http, "/v1/files?purpose=batch_output")
        outputs = json.loads(listed)["data"]
        check([f["id"] for f in outputs] == [b["output_file_id"]], outputs)
        check(sorted(os.listdir(os.path.join(data, "files"))) ==
              sorted([b["output_file_id"], b["input_file_id"]]), os.listdir(os.path.join(data, "files")))
    finally:
        check(s.stop() == 0, "exit code")


if __name__ == "__main__":
    sys.exit(run_tests([v for k, v in list(globals().items()) if k.startswith("test_")], __doc__,
                       ("curl",)))
