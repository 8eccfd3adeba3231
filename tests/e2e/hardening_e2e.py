#!/usr/bin/python3
"""Black-box tests of what hostile or careless clients can do to `ropeserve
serve`, on the real binary with a tiny generated model, with raw sockets
(so that the requests can be as broken as real attacks are), curl and
Python grpcio. No timing assertions: every check is about what happens
(a status, a closed connection, a counter back at 0), with generous
timeouts only so that a bug fails instead of hanging.

    /usr/bin/python3 tests/e2e/hardening_e2e.py --binary build/ropeserve [-k NAME]
"""
import gzip
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import Failure, Server, check, curl, post_json, run_tests, wait_until  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def connect(port, timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_some(sock):
    """The next bytes, or b"" when the server closed or reset the connection."""
    try:
        return sock.recv(65536)
    except (ConnectionResetError, socket.timeout):
        return b""


def read_response(sock):
    """Reads one HTTP response (status, headers, body) or None if the server
    closed without one."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = recv_some(sock)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = recv_some(sock)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def send_until_refused(sock, chunks):
    """Sends chunks until the server stops reading; returns bytes sent."""
    sent = 0
    sock.settimeout(10)
    try:
        for c in chunks:
            sock.sendall(c)
            sent += len(c)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    return sent


def closed_by_server(sock):
    sock.settimeout(10)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


# ---- tests ----

def test_request_bodies_are_capped_in_every_framing(env):
    s = env.main
    limit = 1 << 20
    rss_before = rss_kib(s.proc.pid)
    # Chunked, 64 MiB offered: refused once the cap is passed, not buffered.
    sock = connect(s.http)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    piece = b"x" * 65536
    chunk = b"%x\r\n" % len(piece) + piece + b"\r\n"
    sent = send_until_refused(sock, (chunk for _ in range(1024)))
    r = read_response(sock)
    check(r is not None and r[0] == 413, f"chunked: {r}")
    check(sent < 32 * limit, f"the server kept reading a chunked body past the cap ({sent} bytes taken)")
    sock.close()
    # No length, no chunking: a request without a body (RFC 9112, 6.3),
    # answered at once (400: an empty body is not JSON); what follows is
    # no request and is not read on and on.
    sock = connect(s.http)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n")
    sent = send_until_refused(sock, (piece for _ in range(512)))
    r = read_response(sock)
    check(r is not None and r[0] == 400, f"no length: {r}")
    check(sent < 32 * limit, f"the server kept reading after a request without a body ({sent} bytes taken)")
    sock.close()
    # A bodyless POST (curl -X POST .../cancel) is answered, not held until
    # the read timeout for a body that never comes (then a 400).
    sock = connect(s.http)
    sock.sendall(b"POST /v1/responses/resp_nope/cancel HTTP/1.1\r\nHost: x\r\n\r\n")
    r = read_response(sock)
    check(r is not None and r[0] == 404, f"bodyless POST: {r}")
    sock.close()
    # A huge Content-Length: refused before any body is sent.
    sock = connect(s.http)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n")
    r = read_response(sock)
    check(r is not None and r[0] == 413, f"content-length: {r}")
    check(closed_by_server(sock), "the connection stayed open after refusing an unread body")
    sock.close()
    # A gzip bomb: 64 MiB of zeros in ~64 KiB.
    bomb = gzip.compress(b"\0" * (64 << 20))
    sock = connect(s.http)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
                 % len(bomb))
    send_until_refused(sock, [bomb])
    r = read_response(sock)
    check(r is not None and r[0] == 413, f"gzip: {r}")
    sock.close()
    # Nothing of that was kept.
    grown = rss_kib(s.proc.pid) - rss_before
    check(grown < 48 * 1024, f"resident memory grew {grown} KiB")
    # And ordinary requests still work.
    status, _, _ = post_json(s.http, "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    check(status == 200, f"after the bodies: {status}")


def test_request_heads_are_capped(env):
    s = env.main
    for head in [b"GET /health HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(500)) + b"\r\n",
                 b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * (256 << 10) + b"\r\n\r\n",
                 b"GET /" + b"a" * (256 << 10) + b" HTTP/1.1\r\n\r\n"]:
        sock = connect(s.http)
        send_until_refused(sock, [head])
        r = read_response(sock)
        check(r is not None and r[0] == 431, f"{head[:40]!r}...: {r and r[0]}")
        sock.close()


def test_idle_connections_do_not_starve_probes(env):
    s = Server(env.binary, env.model, env.workdir, ["--http-max-connections", "64", "--http-keep-alive-timeout", "30"],
               name="idle")
    idle = []
    try:
        for _ in range(500):
            idle.append(connect(s.http))
        # The probe port answers (a liveness probe's 3 s timeout).
        start = time.time()
        status, _, _ = curl(s.admin, "/health", extra=["--max-time", "3"])
        check(status == 200, f"admin /health under 500 idle connections: {status}")
        print(f"  admin /health with 500 idle API connections: {1000 * (time.time() - start):.0f} ms")
        status, _, body = curl(s.admin, "/metrics", extra=["--max-time", "3"])
        check(status == 200 and "ropeserve_num_requests_running" in body, "admin /metrics")
        # The API port is full: a new connection gets 503 at once, not a wait.
        status, headers, _ = curl(s.http, "/health", extra=["--max-time", "3"])
        check(status == 503 and headers.get("retry-after") == "1", f"API port when full: {status} {headers}")
        check(curl(s.admin, "/v1/models", extra=["--max-time", "3"])[0] == 404, "the admin port serves only probes")
    finally:
        for c in idle:
            c.close()
    # Once they are gone the API port serves again.
    wait_until(lambda: curl(s.http, "/health", extra=["--max-time", "3"])[0] == 200, 30, "API port after the idlers")
    check(s.stop() == 0, "exit code")


def test_slow_senders_get_408_and_do_not_block_others(env):
    s = Server(env.binary, env.model, env.workdir, ["--http-read-timeout", "2"], name="slow")
    try:
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 30\r\n\r\n"
        sock = connect(s.http)
        stop = threading.Event()

        def trickle():
            try:
                for b in head + b'{"prompt": "hi", "max_tokens"':
                    if stop.is_set():
                        return
                    sock.sendall(bytes([b]))
                    time.sleep(0.2)
            except OSError:
                pass

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        # Meanwhile other clients are served.
        for _ in range(3):
            status, _, _ = post_json(s.http, "/v1/completions", {"prompt": "hi", "max_tokens": 2})
            check(status == 200, f"while a slow sender trickles: {status}")
        # The answer comes while the sender still trickles (read it now: once
        # the server closes, unread data would be lost to the reset).
        sock.settimeout(30)
        r = read_response(sock)
        stop.set()
        check(r is not None and r[0] == 408, f"slow sender: {r}")
        sock.close()
    finally:
        check(s.stop() == 0, "exit code")


def test_uploads_are_few_at_a_time(env):
    # Each upload may hold --max-file-bytes in memory: four are read at
    # once, a fifth is refused (429) before its body is read, and once the
    # slow ones are gone an upload goes through.
    s = Server(env.binary, env.model, env.workdir, [], name="uploads")
    try:
        boundary = "b0undary"
        head = (f"POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary={boundary}\r\n"
                f"Content-Length: 1000000\r\n\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                f"filename=\"a.jsonl\"\r\n\r\n").encode()
        slow = []
        for _ in range(4):
            sock = connect(s.http)
            sock.sendall(head + b"{")
            slow.append(sock)
        path = os.path.join(env.workdir, "upload.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/summarize",
                                "body": {"text": "Some text."}}) + "\n")
        form = ["-F", "purpose=batch", "-F", f"file=@{path}"]
        # The four are being read (their handlers have started) once a fifth is refused.
        wait_until(lambda: curl(s.http, "/v1/files", extra=form)[0] == 429, 30, "a fifth upload was not refused")
        status, _, text = curl(s.http, "/v1/files", extra=form)
        check(status == 429 and "too many uploads" in text, f"fifth upload: {status} {text}")
        for sock in slow:
            sock.close()
        wait_until(lambda: curl(s.http, "/v1/files", extra=form)[0] == 200, 60, "uploads stayed blocked")
    finally:
        check(s.stop() == 0, "exit code")


def test_unary_requests_are_cancelled_when_their_client_leaves(env):
    s = env.main
    wait_until(lambda: s.metrics()[1].get("ropeserve_num_requests_running") == 0, 60, "idle at the start")
    generated_before = s.metrics()[1]["ropeserve_generation_tokens_total"]
    # 16 choices of 2000 tokens: far longer than this test waits.
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 2000, "n": 16, "ignore_eos": True}).encode()
    sock = connect(s.http)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d"
                 b"\r\n\r\n" % len(body) + body)
    wait_until(lambda: s.metrics()[1].get("ropeserve_num_requests_running", 0) >= 1, 60, "the request did not start")
    sock.close()
    wait_until(lambda: s.metrics()[1].get("ropeserve_num_requests_running") == 0, 60,
               "the request kept running after its client left")
    wait_until(lambda: s.metrics()[1].get("ropeserve_kv_cache_usage_perc") == 0, 60, "KV blocks not returned")
    generated = s.metrics()[1]["ropeserve_generation_tokens_total"] - generated_before
    check(generated < 16 * 2000, f"all {generated} tokens were generated for a client that left")
    check("status=499" in s.read_log() or '"status":499' in s.read_log(), "the cancelled request was not logged as 499")


def test_malformed_and_unsupported_requests_are_4xx(env):
    s = env.main

    def expect(path, body, status, param=None):
        got, reply, _ = post_json(s.http, path, body)
        check(got == status, f"{path} {json.dumps(body)[:120]}: {got} {reply}")
        if param is not None:
            check(reply["error"]["param"] == param, f"param: {reply}")

    chat = "/v1/chat/completions"
    expect(chat, {"messages": [{"role": "user", "content": [{"type": 1}]}]}, 400, "messages[0].content[0].type")
    expect(chat, {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {
        "name": "f g"}}], "tool_choice": "auto"}, 400, "tools[0].function.name")
    expect(chat, {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}, 400,
           "response_format")
    expect(chat, {"messages": [{"role": "user", "content": "x"}], "guided_grammar": "root ::= x"}, 400,
           "guided_grammar")
    # A schema whose automaton explodes is refused quickly, not compiled for ever.
    started = time.monotonic()
    expect("/v1/completions", {"prompt": "x", "guided_regex": "(a|b)*a(a|b){40}"}, 400, "guided_regex")
    check(time.monotonic() - started < 30, "the explosive regex took too long to refuse")
    for field, value in [("best_of", 3), ("suffix", "!"), ("temprature", 0.5),
                         ("logit_bias", {"3": 101}), ("logit_bias", {"99999999": 1}), ("logit_bias", {"x": 1}),
                         ("logit_bias", {str(i): 1 for i in range(2000)}), ("priority", 1)]:
        expect("/v1/completions", {"prompt": "hi", field: value}, 400, field)
    # A vanishing temperature is greedy (it used to turn the probabilities into NaN).
    got, tiny, _ = post_json(s.http, "/v1/completions", {"prompt": "hi", "max_tokens": 8, "temperature": 1e-320,
                                                         "return_token_ids": True})
    check(got == 200, f"temperature 1e-320: {tiny}")
    _, greedy, _ = post_json(s.http, "/v1/completions", {"prompt": "hi", "max_tokens": 8, "temperature": 0,
                                                         "return_token_ids": True})
    check(tiny["choices"][0]["token_ids"] == greedy["choices"][0]["token_ids"], "1e-320 is not greedy")
    # What one request may ask for.
    expect("/v1/completions", {"prompt": ["hi"] * 64, "n": 16}, 400, "n")
    expect("/v1/completions", {"prompt": "hi", "stop": [str(i) for i in range(100)]}, 400, "stop")
    expect("/v1/completions", {"prompt": "hi", "stop_token_ids": list(range(1000))}, 400, "stop_token_ids")
    expect("/v1/completions", {"prompt": "hi", "logprobs": 21}, 400, "logprobs")
    context = "word " * (200 << 10)  # 1 MiB
    expect("/v1/qa", {"question": "q", "context": context, "max_seq_len": 8, "doc_stride": 3}, 400, "context")
    expect("/v1/qa", {"question": "q", "context": "c", "max_seq_len": 64, "doc_stride": 40}, 400, "doc_stride")
    # gRPC has the same limits.
    g = env.g
    stub = g.pb_grpc.InferenceStub(g.grpc.insecure_channel(f"127.0.0.1:{s.grpc}"))
    try:
        next(iter(stub.Generate(g.pb.GenerateRequest(prompt="hi", stop=[str(i) for i in range(100)]), timeout=30)))
        raise Failure("100 stop strings were accepted over gRPC")
    except g.grpc.RpcError as e:
        check(e.code() == g.grpc.StatusCode.INVALID_ARGUMENT, f"gRPC stop strings: {e.code()} {e.details()}")
    try:
        stub.Answer(g.pb.AnswerRequest(question="q", context=context, max_seq_len=8, doc_stride=3), timeout=60)
        raise Failure("a million QA windows were accepted over gRPC")
    except g.grpc.RpcError as e:
        check(e.code() == g.grpc.StatusCode.INVALID_ARGUMENT, f"gRPC QA windows: {e.code()} {e.details()}")


def test_cors_is_off_by_default_and_exact_when_on(env):
    s = env.main
    status, headers, _ = curl(s.http, "/v1/models", method="OPTIONS", headers=["Origin: https://evil.example"])
    check(status == 405 and "access-control-allow-origin" not in headers, f"CORS off: {status} {headers}")
    c = Server(env.binary, env.model, env.workdir, ["--allowed-origins", "https://app.example", "--api-key", "k1"],
               name="cors")
    try:
        pre = ["Origin: https://app.example", "Access-Control-Request-Method: POST",
               "Access-Control-Request-Headers: authorization, content-type"]
        status, headers, _ = curl(c.http, "/v1/chat/completions", method="OPTIONS", headers=pre)
        check(status == 204, f"preflight: {status}")
        check(headers.get("access-control-allow-origin") == "https://app.example", f"preflight headers: {headers}")
        check("POST" in headers.get("access-control-allow-methods", ""), headers)
        check("authorization" in headers.get("access-control-allow-headers", "").lower(), headers)
        # A path with several methods allows each of them.
        status, headers, _ = curl(c.http, "/v1/responses/resp_x", method="OPTIONS",
                                  headers=["Origin: https://app.example", "Access-Control-Request-Method: DELETE"])
        check(status == 204 and headers.get("access-control-allow-methods") == "GET, DELETE, OPTIONS",
              f"preflight of a GET and DELETE path: {status} {headers}")
        status, headers, _ = curl(c.http, "/v1/chat/completions", method="OPTIONS",
                                  headers=["Origin: https://evil.example", "Access-Control-Request-Method: POST"])
        check(status == 403 and "access-control-allow-origin" not in headers, f"other origin: {status} {headers}")
        status, headers, _ = curl(c.http, "/v1/models", headers=["Origin: https://app.example",
                                                                 "Authorization: Bearer k1"])
        check(status == 200 and headers.get("access-control-allow-origin") == "https://app.example", headers)
    finally:
        check(c.stop() == 0, "exit code")


def test_a_failing_forward_fails_its_requests_not_the_server(env):
    if os.environ.get("ROPESERVE_TEST_HOOKS_BUILT", "1") == "0":
        print("skipped: serve was built without its test hooks (-DROPESERVE_TEST_HOOKS=OFF)")
        return
    os.environ["ROPESERVE_INJECT_FAULTS"] = "4"
    try:
        s = Server(env.binary, env.model, env.workdir, [], name="faults")
    finally:
        del os.environ["ROPESERVE_INJECT_FAULTS"]
    try:
        codes = [post_json(s.http, "/v1/completions", {"prompt": "hi", "max_tokens": 3})[0] for _ in range(12)]
        check(500 in codes and 200 in codes, f"statuses: {codes}")
        check(set(codes) <= {200, 500}, f"statuses: {codes}")
        check(curl(s.http, "/health")[0] == 200, "the server is down")
        wait_until(lambda: s.metrics()[1].get("ropeserve_kv_cache_usage_perc") == 0, 60, "KV blocks leaked")
        check("injected fault" in s.read_log(), "the fault was not logged")
    finally:
        check(s.stop() == 0, "exit code")


if __name__ == "__main__":
    sys.exit(run_tests([v for k, v in list(globals().items()) if k.startswith("test_")], __doc__))
