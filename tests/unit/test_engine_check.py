"""The head asks its vLLM over HTTPS when vLLM serves it (a non-empty ``--ssl-certfile``, as
KServe's LLMInferenceService passes with its TLS on), else over HTTP.

The engine is a stand-in, named as such: a few lines of http.server answering vLLM's ``/health``
and ``/v1/models`` behind a real TLS socket with an openssl certificate. Real vLLM serves in
tests/runtime and tests/e2e.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from multinode_llm.config import head_config
from multinode_llm.group.engine_check import EngineCheck
from multinode_llm.group.process import Child

ENV = {
    "PIPELINE_PARALLEL_SIZE": "2",
    "TENSOR_PARALLEL_SIZE": "1",
    "REQUEST_GPU_COUNT": "1",
    "MODEL_NAME": "llm",
    "MODEL_DIR": "/mnt/models",
    "POD_IP": "127.0.0.1",
}
STANDIN_ENGINE = """
import http.server, json, ssl, sys

class Engine(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": "llm"}]} if self.path == "/v1/models" else {}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Engine)
if len(sys.argv) > 2:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[2], sys.argv[3])
    server.socket = context.wrap_socket(server.socket, server_side=True)
print("listening", flush=True)
server.serve_forever()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl for the engine's certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "tls.crt", folder / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=llm-workload.serving.svc", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def listening(port: int, deadline_s: float = 30.0) -> None:
    """Until the stand-in accepts connections on ``port``."""
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline_s
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if loop.time() > until:
                raise
            await asyncio.sleep(0.05)
        else:
            writer.close()
            await writer.wait_closed()
            return


async def ask(vllm_args: list[str], *engine_args: str) -> tuple[str, tuple[bool, bool]]:
    port = free_port()
    config = head_config(ENV, {"port": port, "vllm_args": vllm_args})
    engine = await Child.start(
        "engine", [sys.executable, "-c", STANDIN_ENGINE, str(port), *engine_args], {}
    )
    check = EngineCheck(config)
    try:
        await listening(port)
        return check.base_url, await check.check(engine)
    finally:
        await check.close()
        await engine.stop(5)


def test_the_head_asks_a_tls_engine_over_https_without_checking_its_certificate(
    certificate: tuple[Path, Path],
) -> None:
    cert, key = certificate
    args = ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    url, answer = asyncio.run(ask(args, str(cert), str(key)))
    assert url.startswith("https://127.0.0.1:")
    assert answer == (True, True)


def test_an_empty_certificate_file_is_plain_http_as_uvicorn_reads_it() -> None:
    url, answer = asyncio.run(ask(["--ssl-certfile", "", "--ssl-keyfile", ""]))
    assert url.startswith("http://127.0.0.1:")
    assert answer == (True, True)


def test_a_plain_http_check_of_a_tls_engine_fails(certificate: tuple[Path, Path]) -> None:
    """What the head did before it read --ssl-certfile: the engine never answered."""
    cert, key = certificate
    _, answer = asyncio.run(ask([], str(cert), str(key)))
    assert answer == (False, False)
