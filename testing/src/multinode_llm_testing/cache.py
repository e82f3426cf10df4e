"""Caches as real processes (`multinode-llm cache serve`), and raw HTTP for what clients hide."""

from __future__ import annotations

import contextlib
import functools
import http.client
import os
import random
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from multinode_llm.cache import metrics as cache_metrics

from multinode_llm_testing.ports import free_port
from multinode_llm_testing.waits import WaitTimeoutError, wait_until

NETNS_ETC = Path("/etc/netns")  # where `ip netns exec` finds a namespace's hosts file
# The peers' headless Service name and the cache's port, as the chart's DaemonSet has them.
PEERS_NAME = "cache-peers"
PEER_PORT = 8090


class NamespaceHost(Protocol):
    """A network namespace a process can run in (``multinode_llm_local.netns.Host``)."""

    @property
    def namespace(self) -> str: ...

    @property
    def ip(self) -> str: ...

    def command(self, argv: Sequence[str]) -> list[str]: ...


class CacheProcess:
    """One ``multinode-llm cache serve`` process, started in ``prefix`` (``ip netns exec NS``)."""

    def __init__(
        self,
        upstream: str,
        store: Path,
        log_path: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        args: Sequence[str] = (),
        prefix: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port()
        self.store = store
        self.log_path = log_path
        command = [
            *prefix,
            sys.executable,
            "-m",
            "multinode_llm",
            "--log-level",
            "INFO",
            "cache",
            "serve",
            "--upstream",
            upstream,
            "--store",
            str(store),
            "--host",
            host,
            "--port",
            str(self.port),
            *args,
        ]
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def wait_ready(self, timeout: float = 30) -> CacheProcess:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"cache exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/ready", timeout=2) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        wait_until(ready, timeout, f"cache {self.url} to be ready")
        return self

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as response:
            return cache_metrics.parse(response.read().decode())

    @property
    def pid(self) -> int:
        return self.process.pid

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss(self) -> int:
        """Resident memory now, in bytes."""
        return _status_kib(self.pid, "VmRSS") * 1024

    def peak_rss(self) -> int:
        """The most resident memory the process ever had, in bytes."""
        return _status_kib(self.pid, "VmHWM") * 1024

    def leftovers(self, settle: float = 10.0) -> list[Path]:
        """Files a finished fill or metadata write must not leave: partial blobs, temporaries.

        A verified fill lets its readers go before its partial file is synced and renamed into
        place (fills.py: a flush can outlast a client's read timeout), so a client can hold the
        whole blob while the rename is still to come: this waits up to ``settle`` seconds for
        them to go, and returns what is still there then."""
        with contextlib.suppress(WaitTimeoutError):
            wait_until(lambda: not self._leftovers(), settle, "the fills to settle")
        return self._leftovers()

    def _leftovers(self) -> list[Path]:
        partial = (
            list((self.store / "partial").iterdir()) if (self.store / "partial").exists() else []
        )
        return partial + list(self.store.rglob("*.tmp"))

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL: a node dying, with no chance to finish anything."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no {field}")


def raw_request(
    url: str,
    method: str,
    raw_path: str,
    headers: dict[str, str] | dict[str, bytes] | None = None,
    read_limit: int | None = None,
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """Send ``raw_path`` byte for byte (no client-side normalization of '..' or encodings)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.putrequest(method, raw_path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        if read_limit is not None:
            return response.status, response.headers, response.read(read_limit)
        try:
            body = response.read()
        except http.client.IncompleteRead as short:
            body = short.partial
        return response.status, response.headers, body
    finally:
        connection.close()


def hf_env(endpoint: str, home: Path, token: str | None = None) -> dict[str, str]:
    """The environment of a huggingface_hub process that reaches the Hub through ``endpoint``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HF_", "HUGGING_FACE"))
    }
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1")
    # `hf` asks pypi.org for a newer version once per HF_HOME: in a network namespace with no DNS
    # the lookup waits out the resolver (10 s) before the first request the test is about.
    env["HF_HUB_DISABLE_UPDATE_CHECK"] = "1"
    if token:
        env["HF_TOKEN"] = token
    return env


def model_files(seed: int = 0, shard_size: int = 2 << 20) -> dict[str, bytes]:
    """A small model's files: JSON (git files), two LFS shards and a nested LFS file."""
    rng = random.Random(seed)
    return {
        "config.json": b'{"model_type": "llama", "hidden_size": 128, "seed": %d}' % seed,
        "generation_config.json": b'{"max_new_tokens": 16}',
        "tokenizer.json": rng.randbytes(6000).hex().encode()[:9000],
        "model-00001-of-00002.safetensors": rng.randbytes(shard_size),
        "model-00002-of-00002.safetensors": rng.randbytes(shard_size // 2),
        "adapters/lora.bin": rng.randbytes(50_000),
        "README.md": b"# a fake model for tests\n",
    }


def assert_same_files(directory: Path, files: dict[str, bytes]) -> None:
    for path, content in files.items():
        got = (directory / path).read_bytes()
        assert got == content, (
            f"{path}: {len(got)} bytes differ from the {len(content)} upstream has"
        )


def start_peers(hosts: Sequence[NamespaceHost], upstream: str, work: Path) -> list[CacheProcess]:
    """One cache per host (a node), all finding each other through ``PEERS_NAME`` (every peer's
    address, as a headless Service answers); returned at once, see ``wait_for_peers``."""
    for host in hosts:
        lines = ["127.0.0.1 localhost", *(f"{peer.ip} {PEERS_NAME}" for peer in hosts)]
        (NETNS_ETC / host.namespace).mkdir(parents=True, exist_ok=True)
        (NETNS_ETC / host.namespace / "hosts").write_text("\n".join(lines) + "\n")
    return [
        CacheProcess(
            upstream,
            work / f"store-{host.namespace}",
            work / f"{host.namespace}.log",
            host=host.ip,
            port=PEER_PORT,
            args=["--peers", PEERS_NAME, "--advertise-address", host.ip],
            prefix=host.command([]),
        )
        for host in hosts
    ]


def wait_for_peers(caches: Sequence[CacheProcess], timeout: float = 30) -> None:
    """Every cache ready and seeing every peer live."""
    for cache in caches:
        cache.wait_ready()
    for cache in caches:
        sees_all = functools.partial(_sees, cache, len(caches))
        wait_until(sees_all, timeout, f"{cache.url} to see every peer")


def _sees(cache: CacheProcess, peers: int) -> bool:
    return cache.metrics()["peers_live"] == peers
