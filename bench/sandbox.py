"""Where a benchmark runs: its locks, its private network of pods, and the cleanup after it.

Each benchmark holds the bench lock (two benchmark runs on one machine wait for each other instead
of colliding on the bench's prefixes and subnets, ``multinode_llm_testing.networks``) and, when it
starts vLLM, the machine-wide vLLM lock that every suite of this project takes
(``multinode_llm_testing.locks``). Everything a benchmark starts is a process in one of its
network namespaces, so cleanup is by namespace: every PID ``ip netns pids`` lists is killed, the
namespaces and links go, and the /dev/shm files its vLLM left are removed (only those that appeared
while it held the vLLM lock and that no live process holds).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multinode_llm_local.netns import Host, Network, namespaces_with_prefix
from multinode_llm_testing.namespaces import kill_namespace, remove_links
from multinode_llm_testing.networks import Allocation


@dataclass
class Pod:
    """Processes started in one network namespace; killing the pod kills all of its processes."""

    host: Host
    directory: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def ip(self) -> str:
        return self.host.ip

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> int:
        """Start ``argv`` in the pod, its output in ``<name>.log``; returns its PID."""
        with (self.directory / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                self.host.command(list(argv)),
                # vLLM's engine sockets go to the temp dir: the pod's own, removed with it.
                env={**env, "TMPDIR": str(self.directory)},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.processes.append(process)
        return process.pid

    def log(self, name: str) -> str:
        path = self.directory / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def exited(self) -> list[int]:
        """Exit codes of the processes that have ended."""
        return [code for code in (p.poll() for p in self.processes) if code is not None]

    def kill(self) -> None:
        kill_namespace(self.host.namespace)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


@dataclass
class Sandbox:
    """A private network of pods under a prefix of the bench's; ``close()`` removes all of it."""

    network: Network
    pods: dict[str, Pod] = field(default_factory=dict)

    def pod(self, name: str) -> Pod:
        host = self.network.add_host(name)
        self.network.set_hosts(host, {})
        # Names outside /etc/hosts fail at once instead of asking a DNS server outside.
        (Path("/etc/netns") / host.namespace / "resolv.conf").write_text("nameserver 127.0.0.1\n")
        # Short: Ray's unix socket paths under it must stay below 107 characters.
        directory = Path(tempfile.mkdtemp(prefix=f"{self.network.prefix}{name[:1]}", dir="/tmp"))
        pod = self.pods[name] = Pod(host, directory)
        return pod

    def close(self) -> None:
        for pod in self.pods.values():
            pod.kill()
        self.network.destroy()
        remove_links(self.network.prefix)
        for pod in self.pods.values():
            shutil.rmtree(pod.directory, ignore_errors=True)


@contextlib.contextmanager
def sandbox(net: Allocation) -> Iterator[Sandbox]:
    """Pods on one of the bench's networks (multinode_llm_testing.networks); hold the bench lock."""
    prefix, subnet = net.at()
    network = Network(prefix, subnet)
    network.create()  # removes what a crashed run with this prefix left first
    box = Sandbox(network)
    try:
        yield box
    finally:
        box.close()
        left = namespaces_with_prefix(prefix)
        if left:
            raise RuntimeError(f"namespaces left behind: {left}")


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """(status, body) of a GET; (0, b"") when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 - http:// only
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def http_post_json(url: str, body: dict[str, Any], timeout: float = 30.0) -> int:
    """The status of a JSON POST to an http:// URL; 0 when nothing answers."""
    import http.client
    import json
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout)
    try:
        connection.request(
            "POST", parts.path, json.dumps(body), {"Content-Type": "application/json"}
        )
        answer = connection.getresponse()
        answer.read()
        return answer.status
    except OSError:
        return 0
    finally:
        connection.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])
