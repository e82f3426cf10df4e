"""Pods on one machine for the runtime tests: each a network namespace running one supervisor.

A ``Pod`` is what Kubernetes would run: `multinode-llm head` or `multinode-llm worker` in its own
network namespace (``multinode_llm_local.netns``), with the environment KServe would inject, its
own Ray temp dir, and its log in a file. Killing a pod kills every process in its namespace (as a
node failure would); stopping it sends SIGTERM to the supervisor (as kubelet would).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multinode_llm_local.netns import NETNS_ETC, Host, Network
from multinode_llm_testing.namespaces import kill_namespace, remove_links
from multinode_llm_testing.waits import wait_until

NAMESPACE = "default"
HEAD_SVC = "tiny-head-1"
HEAD_FQDN = f"{HEAD_SVC}.{NAMESPACE}.svc.cluster.local"
STATUS_PORT = 8081
HTTP_PORT = 8080


@dataclass
class Pod:
    name: str
    host: Host
    process: subprocess.Popen[bytes]
    log_path: Path
    temp_dir: Path
    role: str
    args: tuple[str, ...]
    env: dict[str, str]

    @property
    def ip(self) -> str:
        return self.host.ip

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def get(self, path: str, port: int = STATUS_PORT, timeout: float = 2.0) -> tuple[int, Any]:
        """GET http://<pod>:<port><path> from the host: (status, JSON or text); (0, error): down."""
        try:
            with urllib.request.urlopen(
                f"http://{self.ip}:{port}{path}", timeout=timeout
            ) as answer:
                return answer.status, _parse(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, _parse(error.read())
        except OSError as error:
            return 0, str(error)

    def wait_exit(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM the supervisor (kubelet stopping the container) and wait for it."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL every process in the pod's namespace: the pod's node is gone."""
        kill_namespace(self.host.namespace)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


@dataclass
class Cluster:
    """A private network of pods; ``close()`` removes everything it started and created."""

    network: Network
    env: dict[str, str] = field(default_factory=dict)  # added to every pod's environment
    pods: list[Pod] = field(default_factory=list)

    def start(self, name: str, role: str, env: Mapping[str, str], *args: str) -> Pod:
        host = self.network.add_host(name)
        head = self.network.hosts.get("head")
        self.network.set_hosts(host, {HEAD_FQDN: head.ip} if head else {})
        # Names outside /etc/hosts fail at once, not by asking a DNS server outside the namespaces.
        (NETNS_ETC / host.namespace / "resolv.conf").write_text("nameserver 127.0.0.1\n")
        temp_dir = Path(tempfile.mkdtemp(prefix=f"{self.network.prefix}{name[:1]}", dir="/tmp"))
        pod_env = {
            **os.environ,
            "POD_IP": host.ip,
            "POD_NAME": name,
            "POD_NAMESPACE": NAMESPACE,
            "RAY_TEMP_DIR": str(temp_dir / "ray"),
            # vLLM's engine sockets go to the temp dir: the pod's own, removed with it.
            "TMPDIR": str(temp_dir),
            **self.env,
            **env,
        }
        log_path = temp_dir / f"{name}.log"
        process = _run(host, role, args, pod_env, log_path)
        pod = Pod(name, host, process, log_path, temp_dir, role, args, pod_env)
        self.pods.append(pod)
        return pod

    def start_group(
        self, env: Mapping[str, str], *head_args: str, ready_timeout_s: float, what: str
    ) -> tuple[Pod, Pod]:
        """A head and one worker that finds it through HEAD_SVC, returned once the head's /ready
        answers 200; either exiting first fails the test with its log."""
        head = self.start("head", "head", env, *head_args)
        worker = self.start("worker", "worker", {**env, "HEAD_SVC": HEAD_SVC})

        def ready() -> bool:
            assert head.alive(), f"the head exited:\n{head.log()[-3000:]}"
            assert worker.alive(), f"the worker exited:\n{worker.log()[-3000:]}"
            return head.get("/ready")[0] == 200

        wait_until(ready, ready_timeout_s, what, interval=0.25)
        return head, worker

    def restart(self, pod: Pod) -> None:
        """Start the pod's container again in the same namespace, as kubelet restarts it."""
        pod.kill()
        pod.process = _run(pod.host, pod.role, pod.args, pod.env, pod.log_path)

    def close(self) -> None:
        for pod in self.pods:
            if pod.alive():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    pod.stop(timeout=30)
            kill_namespace(pod.host.namespace)
        self.network.destroy()
        remove_links(self.network.prefix)
        for pod in self.pods:
            shutil.rmtree(pod.temp_dir, ignore_errors=True)


def _run(
    host: Host, role: str, args: tuple[str, ...], env: dict[str, str], log_path: Path
) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        argv = host.command([sys.executable, "-m", "multinode_llm", role, *args])
        return subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode(errors="replace")
