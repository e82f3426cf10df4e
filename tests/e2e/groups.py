"""The e2e suite's helpers: a local cluster per test module, waits with deadlines, leftover checks.

End-to-end tests: the chart's rendered pods run by the local cluster, with real helm, Ray and vLLM.

Every test here is marked ``e2e``. Groups need root (network namespaces), the ``cpu`` extra (Ray,
vLLM) and helm (``bash hack/install-tools.sh``); without them the tests skip and say which is
missing. Groups run one at a time on the machine (``flock /tmp/multinode-llm-vllm.lock``), each on
its own network prefix and /24, and every group is checked to leave nothing running or mounted.
The measured times (ready, recovered) are printed in pytest's summary.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multinode_llm.config import DEFAULT_STATUS_PORT as STATUS_PORT
from multinode_llm.errors import UserError
from multinode_llm_local import cluster
from multinode_llm_local.chart import find_chart, find_helm
from multinode_llm_local.netns import namespaces_with_prefix
from multinode_llm_local.state import ClusterPlan, ClusterState, process_alive
from multinode_llm_testing.locks import vllm_lock
from multinode_llm_testing.networks import E2E_GROUPS
from multinode_llm_testing.pod_processes import check_no_ray as check_no_ray_in
from multinode_llm_testing.pod_processes import command_of, netns_pids
from multinode_llm_testing.serving_checks import RAY_NODES_SCRIPT, check_ray, parse_ray_nodes
from multinode_llm_testing.waits import wait_seconds

TIMINGS: list[tuple[str, str, float]] = []  # (scenario, what, seconds), printed at the end


def record(scenario: str, what: str, seconds: float) -> None:
    TIMINGS.append((scenario, what, seconds))
    print(f"e2e timing: {scenario}: {what}: {seconds:.1f} s")


def group_prerequisites(serving: bool = True) -> str:
    """Why groups (or, with ``serving=False``, the CLI) cannot run here, or "" when they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces): run the e2e suite as root"
    for module in ("vllm", "ray", "openai") if serving else ():
        if importlib.util.find_spec(module) is None:
            return f"needs {module}: run through tox -e e2e (it installs the cpu extra and openai)"
    try:
        find_helm(find_chart())
    except UserError as error:
        return str(error)
    return ""


@dataclass
class LocalGroup:
    """A running local cluster, as the tests see it: its plan, status, pods, logs and URL."""

    name: str
    prefix: str
    plan: ClusterPlan
    ready_s: float
    seen_pids: set[int] = field(default_factory=set)

    @property
    def state(self) -> ClusterState:
        return ClusterState(self.prefix)

    model: str = "tiny-llama"  # model.name in the built-in local values

    @property
    def base_url(self) -> str:
        return self.plan.url.removesuffix("/v1")

    def status(self) -> dict[str, Any]:
        current = cluster.status(self.prefix) or {}
        for pod in current.get("pods", []):
            for container in pod["containers"]:
                self.seen_pids.update(p for p in (container["pid"], container["init_pid"]) if p)
        if current.get("kubelet_pid"):
            self.seen_pids.add(int(current["kubelet_pid"]))
        return current

    def pods(self, role: str) -> list[dict[str, Any]]:
        return [p for p in self.status().get("pods", []) if p["role"] == role]

    def pod(self, role: str) -> dict[str, Any]:
        return self.pods(role)[0]

    def status_code(self, role: str, path: str) -> int:
        """The HTTP status the pod's status port answers on ``path`` (what kubelet's probes ask);
        0 when nothing answers."""
        url = f"http://{self.pod(role)['ip']}:{STATUS_PORT}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except OSError:
            return 0

    def wait(self, condition: Callable[[], bool], timeout: float, what: str) -> float:
        """Wait for ``condition`` with a deadline; return the seconds it took."""
        return wait_seconds(condition, timeout, f"{what} ({self.name})", interval=0.5)

    def kill(self, role: str) -> float:
        """SIGKILL the first ``role`` pod's container (its PID namespace dies with it): when."""
        container = self.pod(role)["containers"][0]
        assert container["init_pid"], f"{role} is not running"
        os.kill(int(container["init_pid"]), signal.SIGKILL)
        return time.time()

    def kill_netns(self, role: str) -> list[int]:
        """SIGKILL every process in the first ``role`` pod's network namespace, once (the kubelet
        then restarts the container in the same namespace, as after a node's processes die)."""
        pids = netns_pids(self.pod(role)["netns"])
        assert pids, f"nothing runs in the {role} pod"
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def processes(self) -> dict[str, dict[int, str]]:
        """Each running pod's processes (every PID of its network namespace): pod name -> PID
        -> command."""
        return {
            pod["name"]: {pid: command_of(pid) for pid in netns_pids(pod["netns"])}
            for pod in self.status()["pods"]
            if pod["netns"]
        }

    def status_json(self, role: str) -> dict[str, Any]:
        """The first ``role`` pod's ``/status`` on its status port (the supervisor's facts)."""
        url = f"http://{self.pod(role)['ip']}:{STATUS_PORT}/status"
        with urllib.request.urlopen(url, timeout=5) as answer:
            body: dict[str, Any] = json.loads(answer.read())
        return body

    def exec(self, role: str, argv: Sequence[str], timeout: float = 120) -> str:
        """Run a command in the pod's container (as ``kubectl exec`` would); return its stdout."""
        command = cluster.exec_in_pod(self.prefix, role, argv)
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert result.returncode == 0, f"{argv} in {role} failed: {result.stderr[-2000:]}"
        return result.stdout

    def ray_nodes(self) -> list[dict[str, Any]]:
        """The alive Ray nodes as the head's Ray cluster lists them (run inside the head pod)."""
        return parse_ray_nodes(self.exec("head", ["python", "-c", RAY_NODES_SCRIPT]))

    def check_ray(self, tensor: int) -> None:
        pod_ips = [p["ip"] for p in self.status()["pods"]]
        check_ray(self.ray_nodes(), pod_ips, tensor)

    def log(self, role: str, previous: bool = False) -> str:
        container = self.pod(role)["containers"][0]
        path = (container.get("last_state") or {}).get("log") if previous else container.get("log")
        return Path(path).read_text(errors="replace") if path else ""


def head_log_at_its_deadline(group: LocalGroup, wait_s: int) -> tuple[str, float]:
    """The group's only worker is left Pending (no GPU left for it): wait for the head to exit,
    check that it failed at its deadline (not before, not much later), and return its last run's
    log and the seconds the wait took. Either executor's head must do this."""
    worker = group.pod("worker")
    assert worker["phase"] == "Pending"
    assert worker["pending"] == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    started = time.monotonic()
    group.wait(
        lambda: group.pod("head")["containers"][0]["last_state"] is not None,
        wait_s + 120,
        "the head to exit",
    )
    failed_after = time.monotonic() - started
    last = group.pod("head")["containers"][0]["last_state"]
    assert last["exit_code"] != 0
    ran_for = last["finished_at"] - last["started_at"]
    assert wait_s <= ran_for < wait_s + 60  # it gave up at its deadline, not before, not much later
    log = Path(last["log"]).read_text(errors="replace")
    assert f"did not form within {wait_s} s" in log
    assert "kubectl get pods -l app=isvc." in log  # where to look for the worker
    assert not group.pod("head")["ready"]
    return log, failed_after


def check_no_ray(group: LocalGroup) -> None:
    """No Ray process in any pod of an mp group (pod_processes.check_no_ray)."""
    for pod in group.status()["pods"]:
        check_no_ray_in(pod["name"], pod["role"], group.processes()[pod["name"]])


def _free_prefix() -> Iterator[tuple[str, str]]:
    """A network prefix and /24 of the e2e slots (multinode_llm_testing.networks.E2E_GROUPS) no
    other run holds (an abstract unix socket per slot is its lock)."""
    for number in E2E_GROUPS.slots or ():
        lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            lock.bind(f"\0multinode-llm-e2e-{number}")
        except OSError:
            lock.close()
            continue
        try:
            prefix, subnet = E2E_GROUPS.at(number)
            yield prefix, str(subnet)
        finally:
            lock.close()
        return
    raise AssertionError(f"no free local cluster slot for {E2E_GROUPS.user}")


@contextlib.contextmanager
def local_group(
    name: str,
    claim: Path,
    sets: Sequence[str] = (),
    node_gpus: int = 0,
    wait_ready: bool = True,
    wait_s: float = 900,
    kserve_version: str = "",
    also: Sequence[str] = (),
    images: Mapping[str, str] | None = None,
) -> Iterator[LocalGroup]:
    """A local cluster from the chart with the built-in local values plus ``sets``; removed after,
    and checked to have left no process, namespace, hosts file, bridge, state or mount behind."""
    with contextlib.ExitStack() as stack:
        prefix, subnet = stack.enter_context(contextlib.contextmanager(_free_prefix)())
        stack.enter_context(vllm_lock())
        options = cluster.UpOptions(
            sets=sets,
            volumes={"models": claim},
            prefix=prefix,
            subnet=subnet,
            port=0,
            node_gpus=node_gpus,
            kserve_version=kserve_version,
            also=also,
            images=images or {},
        )
        started = time.monotonic()
        group: LocalGroup | None = None
        try:
            plan = cluster.start(options, progress=lambda line: print(f"[{name}] {line}"))
            group = LocalGroup(name=name, prefix=prefix, plan=plan, ready_s=0.0)
            group.status()
            if wait_ready:
                cluster.wait_ready(
                    group.state, plan, wait_s, lambda line: print(f"[{name}] {line}")
                )
                group.ready_s = time.monotonic() - started
                record(name, "up -> head Ready", group.ready_s)
            yield group
        finally:
            if group is not None:
                group.status()
                _print_logs(group)
            cluster.down(prefix)
            _assert_nothing_left(prefix, group.seen_pids if group else set(), claim)


def _print_logs(group: LocalGroup) -> None:
    """The tail of every container log, for the test report of a failure."""
    for pod_dir in sorted(group.state.pods_dir.glob("*")):
        for log in sorted(pod_dir.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-40:]
            print(f"--- {log} (last {len(tail)} lines) ---")
            print("\n".join(tail))


def _assert_nothing_left(prefix: str, pids: set[int], claim: Path) -> None:
    assert namespaces_with_prefix(prefix) == [], "network namespaces left behind"
    assert not list(Path("/etc/netns").glob(f"{prefix}-*")), "hosts files left behind"
    bridge = subprocess.run(
        ["ip", "link", "show", f"{prefix}-br"], capture_output=True, check=False
    )
    assert bridge.returncode != 0, "bridge left behind"
    assert not ClusterState(prefix).directory.exists(), "state directory left behind"
    alive = [pid for pid in pids if process_alive(pid)]
    assert alive == [], f"processes left running: {alive}"
    mounts = Path("/proc/mounts").read_text()
    assert str(claim) not in mounts, "the model claim is still mounted on the host"
    assert f"/{prefix}/" not in mounts, "a pod volume is still mounted on the host"


def chat_once(group: LocalGroup, prompt: str = "Say hello.", max_tokens: int = 8) -> str:
    import openai

    client = openai.OpenAI(base_url=group.plan.url, api_key="unused", timeout=120, max_retries=0)
    reply = client.chat.completions.create(
        model=group.model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
    )
    assert reply.choices[0].finish_reason in ("length", "stop")
    return reply.choices[0].message.content or ""


def serves_now(group: LocalGroup) -> bool:
    """True when one completion through the head's Service succeeds right now."""
    import openai

    client = openai.OpenAI(base_url=group.plan.url, api_key="unused", timeout=60, max_retries=0)
    try:
        reply = client.completions.create(model=group.model, prompt="The group", max_tokens=4)
    except openai.OpenAIError:
        return False
    return bool(reply.choices) and reply.usage is not None and reply.usage.completion_tokens > 0
