#!/usr/bin/python3
"""Black-box tests of what an operator relies on: the Prometheus exposition
(promtool, a real Prometheus server), the metric names the Grafana dashboard
and the Inference Extension's endpoint picker query (vLLM's names included),
KV cache events as a router subscribes to them (pyzmq, python3-msgpack, the
block hashes recomputed with cbor2 and hashlib as vLLM and llm-d compute
them), deploy/k8s/llm-d's settings doing what its router does with them,
and request tracing (W3C traceparent in, trace ids in the JSON log and the
traceresponse header, spans exported over OTLP/HTTP to a receiver started
here, a stalled collector that must not slow requests).

    /usr/bin/python3 tests/e2e/ops_e2e.py --binary build/ropeserve [-k NAME]
"""
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import cbor2
import msgpack
import yaml
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import (HANG_GUARD_SECONDS, ROOT, TEXT, Server, check, curl, free_port, post_json, run_tests,  # noqa: E402
                     wait_until)

# What the endpoint picker reads when no flag overrides it: upstream's
# defaults (gateway-api-inference-extension v1.5.0, pkg/epp/server/options.go).
EPP_DEFAULT_METRICS = {
    "--total-queued-requests-metric": "vllm:num_requests_waiting",
    "--total-running-requests-metric": "vllm:num_requests_running",
    "--kv-cache-usage-percentage-metric": "vllm:kv_cache_usage_perc",
    "--lora-info-metric": "vllm:lora_requests_info",
    "--cache-info-metric": "vllm:cache_config_info",
}


def series(text):
    """Metric names of the samples in an exposition."""
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def some_traffic(env):
    s, g = env.main, env.g
    status, _, _ = post_json(s.http, "/v1/summarize", {"text": TEXT, "max_tokens": 8})
    check(status == 200, "summarize failed")
    list(g.stub(s.grpc).Generate(g.pb.GenerateRequest(prompt="Hello", max_tokens=4), timeout=HANG_GUARD_SECONDS))


def test_metrics_are_valid_prometheus(env):
    some_traffic(env)
    text, values = env.main.metrics()
    p = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True)
    # promtool's linter objects to vLLM's names themselves (':' in a name, a
    # histogram called *_total): those twins are exported as vLLM spells
    # them. Everything else must pass clean.
    problems = [line for line in (p.stdout + p.stderr).decode().splitlines()
                if line.strip() and not line.startswith("vllm:")]
    check(p.returncode in (0, 3) and not problems, f"promtool: {problems}")
    names = series(text)
    for suffix in ("request_queue_time_seconds_bucket", "request_prefill_time_seconds_bucket",
                   "request_decode_time_seconds_bucket", "request_inference_time_seconds_bucket",
                   "time_to_first_token_seconds_bucket", "inter_token_latency_seconds_bucket",
                   "e2e_request_latency_seconds_bucket", "request_prompt_tokens_bucket",
                   "request_generation_tokens_bucket", "prompt_tokens_total", "generation_tokens_total",
                   "num_preemptions_total", "prefix_cache_queries_total", "prefix_cache_hits_total",
                   "request_success_total", "num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
                   "cache_config_info"):
        for prefix in ("ropeserve_", "vllm:"):
            check(prefix + suffix in names, f"/metrics lacks {prefix + suffix}")
    check("ropeserve_iteration_tokens_bucket" in names and "vllm:iteration_tokens_total_bucket" in names,
          "iteration tokens histogram")
    for name in ("ropeserve_qa_request_latency_seconds_bucket", "ropeserve_requests_total", "ropeserve_build_info",
                 "ropeserve_otlp_spans_dropped_total", "ropeserve_kv_events_published_total",
                 "process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_open_fds", "process_max_fds", "process_start_time_seconds"):
        check(name in names, f"/metrics lacks {name}")
    # Every engine series carries the served model's name.
    for line in text.splitlines():
        if line.startswith("vllm:"):
            check('model_name="model"' in line, f"no model_name label: {line}")
    check(values.get('ropeserve_requests_total{code="200",endpoint="/v1/summarize",protocol="http"}', 0) >= 1,
          "summarize requests not counted")
    check(any(k.startswith("ropeserve_requests_total{") and 'protocol="grpc"' in k for k in values),
          "gRPC calls not counted")
    check(values.get('vllm:request_success_total{model_name="model",finished_reason="length"}', 0) >= 1,
          "finished requests not counted by reason")


def test_grafana_dashboard_queries_existing_metrics(env):
    """Every metric a panel of deploy/grafana/dashboards/ropeserve.json or a
    variable queries is exported by the running server."""
    some_traffic(env)
    names = series(env.main.metrics()[0])
    with open(os.path.join(ROOT, "deploy/grafana/dashboards/ropeserve.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    used = set()
    for e in exprs:
        used |= set(re.findall(r"\b(?:ropeserve|process|vllm)[_:][a-z0-9_:]+", e))
    missing = sorted(m for m in used if m not in names)
    check(not missing, f"dashboard metrics missing from /metrics: {missing}")
    for needed in ("ropeserve_requests_total", "ropeserve_time_to_first_token_seconds_bucket",
                   "ropeserve_inter_token_latency_seconds_bucket", "ropeserve_e2e_request_latency_seconds_bucket",
                   "ropeserve_num_requests_running", "ropeserve_num_requests_waiting", "ropeserve_kv_cache_usage_perc",
                   "ropeserve_num_preemptions_total", "ropeserve_prefix_cache_hits_total",
                   "ropeserve_generation_tokens_total", "ropeserve_request_success_total",
                   "ropeserve_request_prefill_time_seconds_bucket", "process_resident_memory_bytes"):
        check(needed in used, f"the dashboard has no panel on {needed}")


def test_endpoint_picker_and_autoscaler_metrics_exist(env):
    """The metrics deploy/k8s/inference-extension/epp.yaml makes the endpoint
    picker read (its defaults unless a flag overrides them; an empty flag
    switches one off) and the one the HPA scales on are exported."""
    text = env.main.metrics()[0]
    names = series(text)
    with open(os.path.join(ROOT, "deploy/k8s/inference-extension/epp.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    epp = next(d for d in docs if d["kind"] == "Deployment")
    args = epp["spec"]["template"]["spec"]["containers"][0]["args"]
    wanted = dict(EPP_DEFAULT_METRICS)
    for i, a in enumerate(args):
        flag, _, value = a.partition("=")
        if flag in wanted:
            wanted[flag] = value if value else args[i + 1]
    for flag, metric in wanted.items():
        if metric:
            check(metric.split("{")[0] in names, f"the EPP reads {metric} ({flag}); /metrics lacks it")
    check(re.search(r'^vllm:cache_config_info\{[^}]*block_size="16"[^}]*num_gpu_blocks="\d+"', text, re.M),
          "vllm:cache_config_info must carry block_size and num_gpu_blocks")
    with open(os.path.join(ROOT, "deploy/k8s/base/hpa.yaml")) as f:
        hpa = yaml.safe_load(f)
    check(hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] in names, "the HPA's metric is not exported")


def test_prometheus_server_scrapes_and_queries_vllm_names(env):
    s = env.main
    prom_port = free_port()
    d = os.path.join(env.workdir, "prometheus")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "prometheus.yml"), "w") as f:
        f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: ropeserve\n"
                f"    static_configs:\n      - targets: ['127.0.0.1:{s.admin}']\n")
    proc = subprocess.Popen(["prometheus", f"--config.file={d}/prometheus.yml", f"--storage.tsdb.path={d}/data",
                             f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def query(q):
        url = f"http://127.0.0.1:{prom_port}/api/v1/query?query=" + urllib.parse.quote(q)
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return json.load(r)["data"]["result"]
        except Exception:
            return []
    try:
        # A colon name, as the endpoint picker and vLLM's dashboards query it.
        wait_until(lambda: query('vllm:num_requests_running{model_name="model"}'), 60,
                   "Prometheus has no vllm:num_requests_running from the admin port")
        wait_until(lambda: query("ropeserve_build_info"), 10, "no ropeserve_build_info")
    finally:
        proc.terminate()
        proc.wait()


class OtlpReceiver:
    """An OTLP/HTTP (JSON) trace receiver; with `stall` set it holds every
    export request until `release()`."""

    def __init__(self):
        self.spans, self.stalled_posts = [], 0
        self.lock = threading.Lock()
        self.go = threading.Event()
        self.go.set()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if not receiver.go.is_set():
                    with receiver.lock:
                        receiver.stalled_posts += 1
                    receiver.go.wait(60)
                check(self.path == "/v1/traces", self.path)
                check(self.headers.get("Content-Type") == "application/json", self.headers.get("Content-Type"))
                for rs in json.loads(body)["resourceSpans"]:
                    for ss in rs["scopeSpans"]:
                        with receiver.lock:
                            receiver.spans.extend(ss["spans"])
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def trace(self, trace_id):
        with self.lock:
            return [s for s in self.spans if s["traceId"] == trace_id]

    def stall(self):
        self.go.clear()

    def release(self):
        self.go.set()

    def close(self):
        self.release()
        self.server.shutdown()


def traced_server(env, receiver, name):
    return Server(env.binary, env.model, env.workdir,
                  ["--log-format", "json", "--otlp-traces-endpoint", f"http://127.0.0.1:{receiver.port}/v1/traces"],
                  name=name)


def check_request_spans(spans, server_name, parent_span):
    """One server span under `parent_span`, a generate span under it, and
    queue / prefill / decode under that, in time order."""
    by_name = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    check(len(by_name.get(server_name, [])) == 1, f"no single {server_name!r} span: {sorted(by_name)}")
    server = by_name[server_name][0]
    check(server["kind"] == 2 and server.get("parentSpanId", "") == parent_span, server)
    gen = by_name.get("generate", [])
    check(len(gen) == 1 and gen[0]["parentSpanId"] == server["spanId"], f"generate spans: {gen}")
    attrs = {a["key"]: a["value"] for a in gen[0]["attributes"]}
    check(int(attrs["gen_ai.usage.output_tokens"]["intValue"]) == 4, attrs)
    last_end = int(gen[0]["startTimeUnixNano"])
    for name in ("queue", "prefill", "decode"):
        check(len(by_name.get(name, [])) == 1, f"no single {name} span")
        child = by_name[name][0]
        check(child["parentSpanId"] == gen[0]["spanId"], child)
        check(int(child["startTimeUnixNano"]) >= last_end - 1000, f"{name} starts before its predecessor ends")
        last_end = int(child["endTimeUnixNano"])
    check(int(server["startTimeUnixNano"]) <= int(gen[0]["startTimeUnixNano"]) and
          int(gen[0]["endTimeUnixNano"]) <= int(server["endTimeUnixNano"]) + 1000, "generate outside its server span")


def test_traceparent_reaches_logs_headers_and_otlp_spans(env):
    receiver = OtlpReceiver()
    s = traced_server(env, receiver, "traced")
    try:
        trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        status, body, hdrs = post_json(s.http, "/v1/completions", {"prompt": "Hello", "max_tokens": 4,
                                                                     "ignore_eos": True},
                                       headers=[f"traceparent: 00-{trace}-{parent}-01"])
        check(status == 200, body)
        m = re.fullmatch(r"00-([0-9a-f]{32})-([0-9a-f]{16})-01", hdrs.get("traceresponse", ""))
        check(m and m.group(1) == trace and m.group(2) != parent, f"traceresponse {hdrs.get('traceresponse')}")
        server_span = m.group(2)
        # The JSON access log line names the trace and the server span.
        wait_until(lambda: any(
            line.startswith("{") and json.loads(line).get("trace_id") == trace and
            json.loads(line).get("span_id") == server_span for line in s.read_log(0).splitlines()),
            10, "no access-log line with the trace id")
        wait_until(lambda: len(receiver.trace(trace)) >= 5, 60, "spans did not reach the collector")
        check_request_spans(receiver.trace(trace), "POST /v1/completions", parent)

        # gRPC: traceparent metadata in, traceresponse metadata out.
        g = env.g
        trace2 = "0af7651916cd43dd8448eb211c80319c"
        call = g.stub(s.grpc).Generate(g.pb.GenerateRequest(prompt="Hello", max_tokens=4, ignore_eos=True),
                                       timeout=HANG_GUARD_SECONDS, metadata=[("traceparent", f"00-{trace2}-b7ad6b7169203331-01")])
        list(call)
        md = dict(call.initial_metadata())
        check(md.get("traceresponse", "").startswith(f"00-{trace2}-"), md)
        wait_until(lambda: len(receiver.trace(trace2)) >= 5, 60, "gRPC spans did not reach the collector")
        check_request_spans(receiver.trace(trace2), "grpc Generate", "b7ad6b7169203331")

        # No (or a malformed) traceparent: a new trace, still in the header.
        _, _, hdrs = post_json(s.http, "/v1/completions", {"prompt": "Hi", "max_tokens": 2},
                               headers=["traceparent: 00-XYZ-bad-01"])
        fresh = hdrs.get("traceresponse", "")[3:35]
        check(re.fullmatch("[0-9a-f]{32}", fresh) and fresh != trace, hdrs)
        wait_until(lambda: receiver.trace(fresh), 60, "no spans for a new trace")
        check(all("parentSpanId" not in x for x in receiver.trace(fresh) if x["kind"] == 2), "a new trace has a root")
        # Unsampled traces are not recorded (but still answered with ids):
        # a sampled request after it is exported, the unsampled one is not.
        trace3, trace4 = "11111111111111111111111111111111", "33333333333333333333333333333333"
        _, _, hdrs = post_json(s.http, "/v1/completions", {"prompt": "Hi", "max_tokens": 2},
                               headers=[f"traceparent: 00-{trace3}-2222222222222222-00"])
        check(hdrs.get("traceresponse", "").startswith(f"00-{trace3}-") and hdrs["traceresponse"].endswith("-00"), hdrs)
        post_json(s.http, "/v1/completions", {"prompt": "Hi", "max_tokens": 2},
                  headers=[f"traceparent: 00-{trace4}-2222222222222222-01"])
        wait_until(lambda: len(receiver.trace(trace4)) >= 5, 60, "spans of the sampled request did not arrive")
        check(not receiver.trace(trace3), "spans of an unsampled trace were exported")
    finally:
        check(s.stop() == 0, "exit code")
        receiver.close()


def test_a_stalled_collector_does_not_slow_requests(env):
    receiver = OtlpReceiver()
    receiver.stall()
    s = traced_server(env, receiver, "stalled")
    try:
        # Spans of the first request: the exporter's POST now hangs.
        post_json(s.http, "/v1/completions", {"prompt": "Hello", "max_tokens": 2})
        wait_until(lambda: receiver.stalled_posts >= 1, 60, "the exporter never posted")
        # Requests run to the end while the collector holds the exporter.
        for i in range(8):
            status, body, _ = post_json(s.http, "/v1/completions", {"prompt": f"Request {i}", "max_tokens": 4})
            check(status == 200, body)
        check(receiver.stalled_posts >= 1 and not receiver.go.is_set(), "the collector is still stalled")
        # The hung POST times out (5 s): its spans are dropped and counted.
        wait_until(lambda: s.metrics()[1].get("ropeserve_otlp_spans_dropped_total", 0) >= 1, 30,
                   "dropped spans are not counted")
        receiver.release()
        _, _, hdrs = post_json(s.http, "/v1/completions", {"prompt": "After", "max_tokens": 2})
        after = hdrs["traceresponse"][3:35]
        wait_until(lambda: receiver.trace(after), 30, "export did not resume after the collector recovered")
        check(s.metrics()[1].get("ropeserve_otlp_spans_exported_total", 0) >= 1, "exported spans are not counted")
    finally:
        check(s.stop() == 0, "exit code")
        receiver.close()


# ---- KV cache events ----

def vllm_hash(value):
    """low64(SHA-256(canonical CBOR)): vLLM's sha256_cbor and llm-d's
    ChunkedTokenDatabase, with the libraries vLLM uses."""
    return int.from_bytes(hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()[-8:], "big")


def block_hashes(seed, tokens, block_size=16):
    """The hashes of the full blocks of `tokens`, chained from the seed's root."""
    parent, out = vllm_hash(seed), []
    for i in range(0, len(tokens) - block_size + 1, block_size):
        parent = vllm_hash([parent, tokens[i:i + block_size], None])
        out.append(parent)
    return out


class KvSubscriber:
    """What llm-d's indexer does with a pod's events: SUB on the topic,
    batches applied in sequence order, a gap filled from the replay socket
    (DEALER: one request, many replies, then seq -1). Every batch is checked
    against the layout vLLM's kv_events.py documents (msgspec array_like
    structs, tagged by class name).

    PUB/SUB drops what is published before a new subscription reaches the
    publisher (ZMQ's slow joiner): a gap shows only when a later batch
    arrives, so a subscriber that must agree with the server now (not after
    the next step) asks the replay socket for anything newer (`catch_up`)."""

    def __init__(self, ctx, events, replay, topic):
        self.ctx, self.events, self.replay, self.topic = ctx, events, replay, topic
        self.media = {"CPU": set(), "CPU_TIER": set()}  # the blocks each medium holds, from the events
        self.last_seq, self.stored, self.removed, self.replayed = -1, [], 0, 0
        self.live = 0  # batches that came through the SUB socket
        self.sub = None
        self.connect()

    @property
    def cached(self):
        """The main pool's blocks."""
        return self.media["CPU"]

    def connect(self):
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, self.topic.encode())
        self.sub.connect(self.events)

    def disconnect(self):
        self.sub.close(linger=0)
        self.sub = None

    def apply(self, seq, payload):
        check(seq == self.last_seq + 1, f"batch {seq} after {self.last_seq}")
        batch = msgpack.unpackb(payload)
        check(isinstance(batch, list) and len(batch) == 3, f"batch layout: {batch!r:.200}")
        ts, events, rank = batch
        check(isinstance(ts, float) and abs(ts - time.time()) < 3600 and rank == 0, f"{batch!r:.200}")
        for e in events:
            tag = e[0]
            if tag == "BlockStored":
                check(len(e) == 8, f"BlockStored fields: {e!r:.200}")
                _, hashes, parent, token_ids, block_size, lora_id, medium, lora_name = e
                check(block_size == 16 and lora_id is None and lora_name is None and medium in self.media,
                      f"{e!r:.200}")
                check(parent is None or isinstance(parent, int), f"parent: {e!r:.200}")
                check(len(token_ids) == 16 * len(hashes), f"tokens: {e!r:.200}")
                for h in hashes:
                    check(h not in self.media[medium], f"block {h} stored twice in {medium}")
                    self.media[medium].add(h)
                self.stored.append(e)
            elif tag == "BlockRemoved":
                check(len(e) == 3 and e[2] in self.media, f"BlockRemoved fields: {e!r:.200}")
                for h in e[1]:
                    check(h in self.media[e[2]], f"block {h} removed, never stored in {e[2]}")
                    self.media[e[2]].discard(h)
                self.removed += 1
            else:
                check(e == ["AllBlocksCleared"], f"unknown event {e!r:.200}")
                for blocks in self.media.values():
                    blocks.clear()
        self.last_seq = seq

    def catch_up(self):
        """Applies the batches after the last one seen, from the replay."""
        self.fill_gap(1 << 62)

    def agrees(self, same):
        """Whether `same()` (the events applied so far against the server's
        state) holds after the live batches, else after a catch-up: the
        step's last batch may have gone before the subscription did."""
        self.poll()
        if same():
            return True
        self.catch_up()
        return same()

    def fill_gap(self, upto):
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.connect(self.replay)
        try:
            dealer.send_multipart([b"", (self.last_seq + 1).to_bytes(8, "big")])
            while True:
                check(dealer.poll(10000), "the replay socket did not answer")
                empty, seq_bytes, payload = dealer.recv_multipart()
                seq = int.from_bytes(seq_bytes, "big", signed=True)
                if seq == -1:
                    check(payload == b"", "end marker with a payload")
                    break
                if self.last_seq < seq < upto:
                    self.apply(seq, payload)
                    self.replayed += 1
        finally:
            dealer.close(linger=0)

    def poll(self, ms=100):
        while self.sub.poll(ms):
            topic, seq_bytes, payload = self.sub.recv_multipart()
            check(topic == self.topic.encode(), f"topic {topic}")
            seq = int.from_bytes(seq_bytes, "big")
            if seq <= self.last_seq:
                continue
            if seq > self.last_seq + 1:
                self.fill_gap(seq)
            self.apply(seq, payload)
            self.live += 1
            ms = 20


def test_kv_events_replayed_reproduce_the_prefix_cache(env):
    ipc = os.path.join(env.workdir, "kv")
    os.makedirs(ipc, exist_ok=True)
    events, replay, topic = f"ipc://{ipc}/events", f"ipc://{ipc}/replay", "kv@127.0.0.1:8000@model"
    # 24 blocks of 16 tokens (512 bytes a token): the prompts below overflow it.
    s = Server(env.binary, env.model, env.workdir,
               ["--kv-events-endpoint", events, "--kv-events-replay-endpoint", replay, "--kv-events-topic", topic,
                "--kv-cache-memory", "192K", "--max-model-len", "128", "--block-size", "16"],
               name="kv-events", env={"PYTHONHASHSEED": "7"})
    ctx = zmq.Context()
    try:
        sub = KvSubscriber(ctx, events, replay, topic)

        def cache():
            status, _, body = curl(s.admin, "/debug/kv-cache")
            check(status == 200, body)
            return json.loads(body)

        def in_step():
            wait_until(lambda: sub.agrees(lambda: sub.cached == set(cache()["block_hashes"])), 30,
                       f"events give {sorted(sub.cached)}, the cache holds {cache()}")

        def complete(prompt):
            status, body, _ = post_json(s.http, "/v1/completions", {"prompt": prompt, "max_tokens": 3})
            check(status == 200, body)

        # Three questions over one 48-token document: the document's blocks
        # are stored once and hit twice.
        doc = [(i * 37) % 1000 + 1 for i in range(48)]
        for q in range(3):
            complete(doc + [900 + q] * 20)
            in_step()
        expected = block_hashes("7", doc)
        check(sub.stored[0][1][:3] == expected and sub.stored[0][2] is None,
              f"the document's blocks: {sub.stored[0][1]} / {expected}")
        check(sub.replayed >= 1, "the start-up batch (AllBlocksCleared) came back through the replay")
        # Other documents evict them.
        for d in range(5):
            complete([(i * 11 + d * 101) % 1000 + 1 for i in range(70)])
            in_step()
        check(sub.removed >= 1 and not set(expected) <= sub.cached, "nothing was evicted")
        # A subscriber that was away: batches missed, then the replay.
        sub.disconnect()
        before = sub.last_seq
        for d in range(3):
            complete(doc + [(i * 7 + d) % 1000 + 1 for i in range(30)])
        sub.connect()
        replayed = sub.replayed
        deadline = time.time() + 120  # until a batch after the reconnect shows the gap
        d = 0
        while sub.replayed == replayed and time.time() < deadline:
            complete([(i * 13 + d * 31) % 1000 + 1 for i in range(40)])
            sub.poll(200)
            d += 1
        check(sub.replayed > replayed and sub.last_seq > before + 1, "the missed batches were not replayed")
        check(sub.live >= 3, f"only {sub.live} batches came through the PUB socket")
        in_step()
        check(cache()["num_blocks"] == 24 and cache()["block_size"] == 16, cache())
        values = s.metrics()[1]
        check(values.get("ropeserve_kv_events_published_total", 0) >= sub.last_seq + 1 and
              values.get("ropeserve_kv_events_dropped_total", -1) == 0, "the publisher's counters")
    finally:
        ctx.destroy(linger=0)
        check(s.stop() == 0, "exit code")


def test_llm_d_overlay_settings_serve_its_router(env):
    """deploy/k8s/llm-d run as far as one machine can: a server with the
    overlay's event settings (its patch's env, ports moved to free ones)
    and API keys on; the router's steps done as llm-d-router's config says
    (render on the admin port without a key, SUB with its topicFilter,
    blocks hashed with its blockSize and hashSeed) must find the blocks the
    server stored for the request it then routes."""
    k8s = os.path.join(ROOT, "deploy", "k8s", "llm-d")
    with open(os.path.join(k8s, "kv-events-patch.yaml")) as f:
        container = yaml.safe_load(f)["spec"]["template"]["spec"]["containers"][0]
    with open(os.path.join(k8s, "epp.yaml")) as f:
        cm = next(d for d in yaml.safe_load_all(f) if d["kind"] == "ConfigMap")
    config = yaml.safe_load(cm["data"]["epp-config.yaml"])
    plugins = {p["type"]: p.get("parameters", {}) for p in config["plugins"]}
    tokens, producer = plugins["token-producer"], plugins["precise-prefix-cache-producer"]
    events_port, replay_port = free_port(), free_port()
    moved = {5556: events_port, 5559: replay_port}
    env_vars = {"POD_IP": "127.0.0.1"}
    for e in container["env"]:
        if "value" in e:
            value = e["value"].replace("$(POD_IP)", env_vars["POD_IP"])
            for old_port, new_port in moved.items():
                value = value.replace(f"tcp://*:{old_port}", f"tcp://*:{new_port}")
            env_vars[e["name"]] = value
    check(producer["kvEventsConfig"]["podDiscoveryConfig"]["socketPort"] == 5556 and
          env_vars["ROPESERVE_KV_EVENTS_ENDPOINT"] == f"tcp://*:{events_port}", env_vars)
    s = Server(env.binary, env.model, env.workdir,
               ["--served-model-name", tokens["modelName"], "--api-key", "sk-llm-d",
                "--block-size", str(producer["tokenProcessorConfig"]["blockSize"])],
               name="llm-d", env=env_vars)
    ctx = zmq.Context()
    try:
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, producer["kvEventsConfig"]["topicFilter"].encode())
        sub.connect(f"tcp://127.0.0.1:{events_port}")  # the picker dials the pod
        # A PUB drops what it sends before the subscription reaches it: other
        # prompts go first until one of their batches comes through.
        warm_up = 0
        while not sub.poll(200):
            check(warm_up < 300, "no event batch reached the subscriber")
            status, _, _ = post_json(s.http, "/v1/completions",
                                     {"model": tokens["modelName"], "prompt": f"warm-up {warm_up} " * 20,
                                      "max_tokens": 1}, headers=["Authorization: Bearer sk-llm-d"])
            check(status == 200, f"warm-up: {status}")
            warm_up += 1
        body = {"model": tokens["modelName"], "prompt": TEXT[:400], "max_tokens": 2}
        # The token-producer: the body, the admin port, no key.
        status, rendered, _ = post_json(s.admin, "/v1/completions/render", body)
        check(status == 200 and isinstance(rendered, list), f"{status} {rendered}")
        ids = rendered[0]["token_ids"]
        block = producer["tokenProcessorConfig"]["blockSize"]
        check(len(ids) >= 2 * block, f"the prompt has {len(ids)} tokens")
        status, _, _ = post_json(s.http, "/v1/completions/render", body)
        check(status == 401, f"the API port serves render without a key: {status}")
        # The request the router routes.
        status, answer, _ = post_json(s.http, "/v1/completions", dict(body, return_token_ids=True),
                                      headers=["Authorization: Bearer sk-llm-d"])
        check(status == 200 and answer["choices"][0]["prompt_token_ids"] == ids, f"{status} {answer}")
        # The router's keys for the prompt are among the blocks the pod stored.
        want = block_hashes(producer["tokenProcessorConfig"]["hashSeed"], ids, block)
        stored, topics = set(), set()
        deadline = time.time() + 60
        while not set(want) <= stored and time.time() < deadline:
            if sub.poll(500):
                topic, _, payload = sub.recv_multipart()
                topics.add(topic.decode())
                for e in msgpack.unpackb(payload)[1]:
                    if e[0] == "BlockStored":
                        stored.update(e[1])
        check(set(want) <= stored, f"the router's keys {want} are not among the stored blocks {sorted(stored)}")
        check(topics == {f"kv@127.0.0.1:8080@{tokens['modelName']}"}, topics)
    finally:
        ctx.destroy(linger=0)
        check(s.stop() == 0, "exit code")


def test_kv_offload_tier_brings_an_evicted_document_back(env):
    """--kv-offload-memory: a document's blocks, evicted from a 24-block
    cache by other prompts, come back from the host tier (cached_tokens),
    with the K/V they had: the answer equals the one a prefix-cache hit
    gave before the eviction, token for token. Its events carry the tier's
    medium and, replayed, give the tier's contents; without the tier the
    document is computed again. The same with the tier in a file
    (--kv-offload-path), which leaves nothing behind. With
    --no-enable-prefix-caching nothing is reused."""
    ipc = os.path.join(env.workdir, "kv-offload")
    os.makedirs(ipc, exist_ok=True)
    events, replay, topic = f"ipc://{ipc}/events", f"ipc://{ipc}/replay", "kv@127.0.0.1:8000@model"
    common = ["--kv-cache-memory", "192K", "--max-model-len", "128", "--block-size", "16"]
    tiered = Server(env.binary, env.model, env.workdir,
                    common + ["--kv-offload-memory", "4M", "--kv-events-endpoint", events,
                              "--kv-events-replay-endpoint", replay, "--kv-events-topic", topic],
                    name="kv-offload", env={"PYTHONHASHSEED": "7"})
    plain = Server(env.binary, env.model, env.workdir, common, name="kv-no-offload")
    uncached = Server(env.binary, env.model, env.workdir, common + ["--no-enable-prefix-caching"],
                      name="kv-no-prefix-caching")
    on_disk = Server(env.binary, env.model, env.workdir,
                     common + ["--kv-offload-memory", "4M", "--kv-offload-path", ipc], name="kv-offload-file")
    ctx = zmq.Context()
    try:
        sub = KvSubscriber(ctx, events, replay, topic)
        media = sub.media

        def ask(server, prompt):
            status, body, _ = post_json(server.http, "/v1/completions",
                                        {"prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": True,
                                         "return_token_ids": True})
            check(status == 200, body)
            return body["choices"][0]["token_ids"], body["usage"]["prompt_tokens_details"]["cached_tokens"]

        doc = [(i * 37) % 1000 + 1 for i in range(48)]
        question = doc + [(i * 3) % 1000 + 7 for i in range(20)]
        fillers = [[(i * 11 + d * 101) % 1000 + 1 for i in range(70)] for d in range(5)]
        first, _ = ask(uncached, question)
        again, cached = ask(uncached, question)
        check(cached == 0 and again == first, f"--no-enable-prefix-caching computes it again: cached {cached}")
        for server in (tiered, on_disk, plain):
            ask(server, question)
            hit, cached = ask(server, question)  # the prefix cache's answer
            check(cached == 64, f"a prefix-cache hit of 64 tokens: {cached}")
            for f in fillers:
                ask(server, f)
            again, cached = ask(server, question)
            if server is not plain:
                check(cached == 64 and again == hit, f"from the tier: cached {cached}, {again} vs {hit}")
            else:
                check(cached < 64, f"without the tier the document is computed again: cached {cached}")
        values = tiered.metrics()[1]
        check(values.get("ropeserve_kv_offload_loaded_blocks_total", 0) >= 1 and
              values.get("ropeserve_kv_offload_saved_blocks_total", 0) >= 4, "the tier's counters")
        # Nothing pinned every slot and no copy failed (a CPU tier's copies cannot).
        check(values.get("ropeserve_kv_offload_skipped_blocks_total") == 0 and
              values.get("ropeserve_kv_offload_failed_copies_total") == 0, "the tier's failure counters")

        def same():
            status, _, body = curl(tiered.admin, "/debug/kv-cache")
            check(status == 200, body)
            c = json.loads(body)
            return (media["CPU"] == set(c["block_hashes"]) and media["CPU_TIER"] == set(c["offloaded_block_hashes"])
                    and c["offload_blocks"] == 512)
        wait_until(lambda: sub.agrees(same), 30,
                   f"events give {len(media['CPU'])} + {len(media['CPU_TIER'])} blocks, the cache holds "
                   f"{curl(tiered.admin, '/debug/kv-cache')[2][:300]}")
        check(media["CPU_TIER"], "the tier's events")
        status, _, info = curl(tiered.http, "/v1/info")
        check(status == 200 and json.loads(info)["kv_offload"]["num_blocks"] == 512, info[:300])
    finally:
        ctx.destroy(linger=0)
        check(tiered.stop() == 0 and on_disk.stop() == 0 and plain.stop() == 0 and uncached.stop() == 0,
              "exit code")
    # The file of --kv-offload-path was unlinked at once: nothing stays behind.
    check(not [f for f in os.listdir(ipc) if f.startswith("ropeserve-kv-tier")], os.listdir(ipc))


def test_kv_events_flags_are_checked(env):
    for args, message in (
            (["--kv-events-config", '{"bogus": 1}'], "unknown key `bogus`"),
            (["--kv-events-config", '{"enable_kv_cache_events": "yes"}'], "`enable_kv_cache_events` must be"),
            (["--kv-events-endpoint", "tcp://*:notaport"], "--kv-events-endpoint tcp://*:notaport"),
            (["--kv-events-replay-endpoint", "tcp://*:5558"], "needs --kv-events-endpoint"),
            (["--kv-offload-memory", "12Q"], "--kv-offload-memory '12Q' must be bytes"),
            (["--kv-offload-memory", "100"], "holds no block"),
            (["--kv-offload-path", env.workdir], "--kv-offload-path holds the tier of --kv-offload-memory"),
            (["--kv-offload-memory", "1M", "--kv-offload-path", os.path.join(env.workdir, "no-such-dir")],
             "cannot create a file in"),
            (["--kv-offload-memory", "1M", "--no-enable-prefix-caching"], "it needs prefix caching"),
            (["--kv-events-endpoint", "ipc://" + os.path.join(env.workdir, "kv-flags-events"),
              "--no-enable-prefix-caching"], "it needs prefix caching")):
        p = subprocess.run([env.binary, "serve", "--summarizer", env.model, "--http-port", str(free_port()),
                            "--grpc-port", "-1", "--admin-port", "-1", "--data-dir",
                            os.path.join(env.workdir, "data-kv-flags")] + args,
                           capture_output=True, timeout=HANG_GUARD_SECONDS)
        out = (p.stdout + p.stderr).decode()
        check(p.returncode != 0 and message in out, f"{args}: exit {p.returncode}: {out[-500:]}")
    # Without events, /debug/kv-cache says how to turn them on.
    status, _, body = curl(env.main.admin, "/debug/kv-cache")
    check(status == 404 and "--kv-events-endpoint" in body, body)


if __name__ == "__main__":
    sys.exit(run_tests([v for k, v in list(globals().items()) if k.startswith("test_")], __doc__,
                       ("curl", "promtool", "prometheus")))
