#!/usr/bin/python3
"""Black-box tests of what an operator relies on: the Prometheus exposition
(promtool, a real Prometheus server), the metric names the Grafana dashboard
and the Inference Extension's endpoint picker query (vLLM's names included),
and request tracing (W3C traceparent in, trace ids in the JSON log and the
traceresponse header, spans exported over OTLP/HTTP to a receiver started
here, a stalled collector that must not slow requests).

    /usr/bin/python3 tests/e2e/ops_e2e.py --binary build/ropeserve [-k NAME]
"""
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import urllib.parse
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import HANG_GUARD_SECONDS, ROOT, TEXT, Server, check, free_port, post_json, run_tests, wait_until  # noqa: E402

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
                 "ropeserve_otlp_spans_dropped_total", "process_cpu_seconds_total", "process_resident_memory_bytes",
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


if __name__ == "__main__":
    sys.exit(run_tests([v for k, v in list(globals().items()) if k.startswith("test_")], __doc__,
                       ("curl", "promtool", "prometheus")))
