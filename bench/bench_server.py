"""A ropeserve server for the Python benches: started on free ports, ready
when /ready answers, stopped with SIGTERM (bench/document_bench.py,
bench/offload_bench.py)."""
import http.client
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BenchServer:
    """`ropeserve serve --summarizer MODEL` on 127.0.0.1 with `args` after
    the ports (gRPC and the admin port off), ROPESERVE_THREADS=threads;
    its log in /tmp/ropeserve-NAME-PORT.log."""

    def __init__(self, binary, model, args, threads, name):
        self.port = free_port()
        cmd = [binary, "serve", "--summarizer", model, "--host", "127.0.0.1", "--http-port", str(self.port),
               "--grpc-port", "-1", "--admin-port", "-1"] + list(args)
        self.log = open(f"/tmp/ropeserve-{name}-{self.port}.log", "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, ROPESERVE_THREADS=str(threads)))
        for _ in range(3000):
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/ready")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                sys.exit(f"server exited; see {self.log.name}")
            time.sleep(0.2)
        sys.exit("server not ready")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)
