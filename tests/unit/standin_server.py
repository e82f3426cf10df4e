"""A stand-in for a runtime container in the kubelet tests: answers the supervisor's status paths.

Not the runtime (that is tested with real Ray and vLLM in tests/runtime and tests/e2e): a few lines
of http.server whose /live turns to 503 when the file named by STANDIN_UNHEALTHY exists, so the
tests can watch the local kubelet notice, kill and restart a container.
"""

import http.server
import os
import sys
from pathlib import Path


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        unhealthy = Path(os.environ.get("STANDIN_UNHEALTHY", "/nonexistent"))
        code = 503 if self.path == "/live" and unhealthy.exists() else 200
        body = f"{self.path} uid={os.getuid()} host={os.uname().nodename}\n".encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        del format, args


if __name__ == "__main__":
    print("stand-in started", os.getuid(), flush=True)
    http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
