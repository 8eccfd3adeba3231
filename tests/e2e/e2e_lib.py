#!/usr/bin/python3
"""What the black-box tests share (serve_e2e.py, hardening_e2e.py): clients
we did not write (curl for REST and SSE, Python grpcio with stubs generated
from proto/ at test time), the server under test, and the test runner.
Run with Debian's /usr/bin/python3 (python3-grpcio)."""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = ("The committee met on Tuesday to discuss the new budget. After a long debate, "
        "members agreed to fund the library renovation and to delay the road project.")


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def free_ports(n):
    """n distinct ports free now. Their sockets stay bound until all n are
    chosen: a port closed at once can be the kernel's next pick (one server
    once got the same port for its gRPC and admin listeners)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port():
    return free_ports(1)[0]


# ---- REST through curl ----

# How long a request that must succeed may take before the test calls it
# hung. Deadlines that are part of what a test checks (a liveness probe's
# 3 s, a 0.3 s gRPC deadline) are spelled where they are checked.
HANG_GUARD_SECONDS = 300

def curl(port, path, body=None, method=None, headers=(), raw=None, scheme="http", extra=()):
    """Returns (status, headers dict, body text). --max-time is a hang guard,
    not a speed check: on a loaded 2-core machine a flood of requests can
    take minutes (ctest's 600 s per suite is the outer guard)."""
    cmd = ["curl", "-sS", "-D", "-", "--max-time", str(HANG_GUARD_SECONDS)]
    cmd += list(extra)
    if method:
        cmd += ["-X", method]
    for h in headers:
        cmd += ["-H", h]
    data = None
    if raw is not None:
        data = raw
    elif body is not None:
        data = json.dumps(body).encode()
    if data is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    cmd.append(f"{scheme}://127.0.0.1:{port}{path}")
    out = subprocess.run(cmd, input=data, capture_output=True, check=False).stdout.decode("utf-8", "replace")
    head, _, text = out.partition("\r\n\r\n")
    while head.startswith("HTTP/1.1 100"):
        head, _, text = text.partition("\r\n\r\n")
    lines = head.split("\r\n")
    check(lines and lines[0].startswith("HTTP/"), f"no HTTP response from {path}: {out[:200]!r}")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, text


def post_json(port, path, body, headers=()):
    status, hdrs, text = curl(port, path, body, headers=headers)
    try:
        return status, json.loads(text), hdrs
    except ValueError:
        return status, text, hdrs


def sse_events(text):
    """The data payloads of an event stream, in order."""
    events = []
    for block in text.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                events.append(line[len("data: "):])
    return events


def stream(port, path, body, headers=()):
    """A streaming request with curl -N; returns (status, events)."""
    status, _, text = curl(port, path, dict(body, stream=True), headers=headers, extra=["-N"])
    return status, sse_events(text)


def post_together(port, path, body, n, headers=()):
    """n identical POSTs that reach the server at once, whatever the load on
    this machine: each is sent on its own connection but for its body's last
    byte, then the n last bytes go out back to back. Returns [(status,
    {lower-case header: value})] in the connections' order."""
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n" + "".join(h + "\r\n" for h in headers) +
            "\r\n").encode()
    socks = []
    try:
        for _ in range(n):
            sock = socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD_SECONDS)
            socks.append(sock)
            sock.sendall(head + payload[:-1])
        for sock in socks:
            sock.sendall(payload[-1:])
        out = []
        for sock in socks:
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
            fields = dict((k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:]))
            out.append((int(lines[0].split(" ")[1]), fields))
        return out
    finally:
        for sock in socks:
            sock.close()


class StreamingClient:
    """curl -N in the background, readable event by event; kill() drops the
    connection like a client that goes away."""

    def __init__(self, port, path, body):
        cmd = ["curl", "-sSN", "--max-time", str(HANG_GUARD_SECONDS), "-H", "Content-Type: application/json", "--data-binary",
               json.dumps(dict(body, stream=True)), f"http://127.0.0.1:{port}{path}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.events = []

    def read_event(self):
        while True:
            line = self.proc.stdout.readline()
            if not line:
                return None
            line = line.decode("utf-8", "replace").rstrip("\n")
            if line.startswith("data: "):
                self.events.append(line[6:])
                return line[6:]

    def read_all(self):
        while self.read_event() is not None:
            pass
        self.proc.wait()
        return self.events

    def kill(self):
        self.proc.kill()
        self.proc.wait()


# ---- gRPC through grpcio ----

class Grpc:
    def __init__(self, workdir):
        out = os.path.join(workdir, "stubs")
        os.makedirs(out, exist_ok=True)
        protos = [("proto", "proto/ropeserve/v1/ropeserve.proto"),
                  ("tests/e2e/protos", "tests/e2e/protos/health.proto"),
                  ("tests/e2e/protos", "tests/e2e/protos/reflection.proto")]
        for include, proto in protos:
            # Debian's protoc with its gRPC Python plugin (protobuf-compiler-grpc):
            # python3-grpc-tools bundles protoc 3.5, too old for proto3 `optional`.
            subprocess.run(["protoc", f"-I{os.path.join(ROOT, include)}", f"--python_out={out}",
                            f"--grpc_python_out={out}", "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
                            os.path.join(ROOT, proto)], check=True)
        sys.path.insert(0, out)
        import grpc  # noqa: E402
        from ropeserve.v1 import ropeserve_pb2, ropeserve_pb2_grpc  # noqa: E402
        import health_pb2, health_pb2_grpc, reflection_pb2, reflection_pb2_grpc  # noqa: E402
        self.grpc = grpc
        self.pb = ropeserve_pb2
        self.pb_grpc = ropeserve_pb2_grpc
        self.health_pb = health_pb2
        self.health_grpc = health_pb2_grpc
        self.refl_pb = reflection_pb2
        self.refl_grpc = reflection_pb2_grpc

    def stub(self, port):
        ch = self.grpc.insecure_channel(f"127.0.0.1:{port}")
        return self.pb_grpc.InferenceStub(ch)

    def health(self, port, service=""):
        # wait_for_ready: a transient connect error (seen once as EINVAL from
        # connect() while a second suite ran beside this one) is retried
        # within the timeout instead of failing the call: the status is what
        # is checked, and the server is up whenever this is called.
        ch = self.grpc.insecure_channel(f"127.0.0.1:{port}")
        r = self.health_grpc.HealthStub(ch).Check(self.health_pb.HealthCheckRequest(service=service), timeout=10,
                                                  wait_for_ready=True)
        return self.health_pb.HealthCheckResponse.ServingStatus.Name(r.status)

    def code(self, fn):
        """Runs fn; returns the gRPC status code name (OK when it succeeds)."""
        try:
            r = fn()
            if hasattr(r, "__iter__") and not hasattr(r, "ListFields"):
                list(r)
            return "OK"
        except self.grpc.RpcError as e:
            return e.code().name


# ---- the server under test ----

class Server:
    def __init__(self, binary, model, workdir, args=(), name="server", tls=False, env=None, wait=True):
        self.http, self.grpc, self.admin = free_ports(3)
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "wb")
        # model None: no --summarizer (a server of encoders or a QA model alone).
        cmd = [binary, "serve"] + (["--summarizer", model] if model is not None else []) + [
            "--host", "127.0.0.1", "--http-port", str(self.http), "--grpc-port", str(self.grpc),
            "--admin-port", str(self.admin), "--dtype", "float32"] + list(args)
        if "--kv-cache-memory" not in args:
            cmd += ["--kv-cache-memory", "32M"]
        # Each server its own data directory (one server per directory),
        # kept in the workdir rather than the user's state directory.
        if "--data-dir" not in args:
            cmd += ["--data-dir", os.path.join(workdir, f"data-{name}")]
        env = dict(os.environ, ROPESERVE_THREADS=os.environ.get("ROPESERVE_THREADS", "1"), **(env or {}))
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        if not wait:  # the caller watches the process itself
            return
        deadline = time.time() + 120
        while time.time() < deadline:
            check(self.proc.poll() is None, f"{name} exited at start-up:\n{self.read_log()}")
            if tls:
                if self._up() and curl(self.http, "/ready", scheme="https", extra=["-k"])[0] == 200:
                    return
            else:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/ready", timeout=2) as r:
                        if r.status == 200:
                            return
                except Exception:
                    pass
            time.sleep(0.1)
        raise Failure(f"{name} did not become ready:\n{self.read_log()}")

    def _up(self):
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.http)) == 0

    def read_log(self, tail=4000):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        return text[-tail:] if tail else text

    def metrics(self):
        """The /metrics text and its samples by series ('name{labels}');
        a labelled series is also summed under its bare name (so
        values['ropeserve_num_requests_running'] reads the one served
        model's gauge whatever its model_name)."""
        _, _, text = curl(self.http, "/metrics")
        values, sums = {}, {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
                if "{" in name:
                    bare = name.split("{")[0]
                    sums[bare] = sums.get(bare, 0.0) + float(value)
        for bare, total in sums.items():
            values.setdefault(bare, total)
        return text, values

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_until(fn, timeout, message):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if fn():
            return
        time.sleep(0.1)
    raise Failure(message)


class Env:
    pass


def run_tests(tests, description, tools=("curl",)):
    """The shared runner: makes the tiny models and the gRPC stubs, starts the
    main server (with the QA and embedding models), runs every test whose name contains -k
    and prints PASS/FAIL; returns the number of failures."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--binary", required=True)
    ap.add_argument("-k", default="", help="run tests whose name contains this")
    args = ap.parse_args()
    for tool in tools:
        if shutil.which(tool) is None:
            print(f"missing {tool}: run scripts/deps", file=sys.stderr)
            return 1
    env = Env()
    env.binary = os.path.abspath(args.binary)
    env.workdir = tempfile.mkdtemp(prefix="ropeserve-e2e-")
    env.model = os.path.join(env.workdir, "model")
    subprocess.run([env.binary, "make-model", "--out", env.model, "--preset", "tiny"], check=True,
                   capture_output=True)
    env.qa_model = os.path.join(env.workdir, "qa")
    subprocess.run([env.binary, "make-model", "--qa", "--out", env.qa_model], check=True, capture_output=True)
    env.embed_model = os.path.join(env.workdir, "embed")
    subprocess.run([env.binary, "make-model", "--embedding", "--out", env.embed_model], check=True,
                   capture_output=True)
    # A sequence classifier and a cross-encoder reranker (one label) beside the embedder.
    env.cls_model = os.path.join(env.workdir, "cls")
    subprocess.run([env.binary, "make-model", "--classifier", "neg,pos", "--out", env.cls_model], check=True,
                   capture_output=True)
    env.rerank_model = os.path.join(env.workdir, "rerank")
    subprocess.run([env.binary, "make-model", "--classifier", "relevance", "--qa-arch", "roformer", "--out",
                    env.rerank_model], check=True, capture_output=True)
    # A token classifier (named-entity tags), served as "ner" (NAME=DIR).
    env.ner_model = os.path.join(env.workdir, "token-model")
    subprocess.run([env.binary, "make-model", "--token-classifier", "O,B-PER,I-PER,B-LOC,I-LOC", "--out",
                    env.ner_model], check=True, capture_output=True)
    env.g = Grpc(env.workdir)
    env.main = Server(env.binary, env.model, env.workdir,
                      ["--qa", env.qa_model, "--encoder", env.embed_model, "--encoder", env.cls_model,
                       "--encoder", env.rerank_model, "--encoder", "ner=" + env.ner_model], name="main")
    failures = 0
    try:
        for test in tests:
            if args.k not in test.__name__:
                continue
            start = time.time()
            try:
                test(env)
                print(f"PASS {test.__name__} ({time.time() - start:.1f} s)", flush=True)
            except Exception:
                failures += 1
                print(f"FAIL {test.__name__} ({time.time() - start:.1f} s)\n{traceback.format_exc()}", flush=True)
        code = env.main.stop()
        if code != 0:
            failures += 1
            print(f"FAIL main server exit code {code}")
    finally:
        env.main.kill()
        if failures:
            print(f"server logs kept in {env.workdir}")
            print(env.main.read_log()[-3000:])
        else:
            shutil.rmtree(env.workdir, ignore_errors=True)
    return failures


