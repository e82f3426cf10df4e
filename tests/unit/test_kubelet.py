"""The local kubelet: back-off and probe thresholds (pure), probes against real sockets, and
restarts of a real container in a network namespace (root only; the container is a stand-in HTTP
server, named as such in standin_server.py: the real runtime runs in tests/e2e)."""

from __future__ import annotations

import asyncio
import http.server
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from multinode_llm_local.cluster import down
from multinode_llm_local.kubelet import Backoff, Kubelet, ProbeCounter, check
from multinode_llm_local.netns import Network, namespaces_with_prefix
from multinode_llm_local.pods import ContainerPlan, PodIdentity, Probe, plan_pod
from multinode_llm_local.state import ClusterPlan, ClusterState, Forward, process_alive
from multinode_llm_testing.networks import KUBELET_UNIT

STANDIN = Path(__file__).with_name("standin_server.py")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def test_backoff_restarts_at_once_then_doubles_up_to_five_minutes() -> None:
    backoff = Backoff()
    delays = [backoff.next(ran_for=1.0) for _ in range(8)]
    assert delays == [0, 10, 20, 40, 80, 160, 300, 300]


def test_backoff_resets_after_ten_minutes_of_running() -> None:
    backoff = Backoff()
    backoff.next(1.0)
    backoff.next(1.0)
    assert backoff.next(ran_for=601.0) == 0
    assert backoff.next(ran_for=1.0) == 10


def test_probe_counter_needs_consecutive_results() -> None:
    counter = ProbeCounter(success_threshold=2, failure_threshold=3)
    assert [counter.record(ok) for ok in (True, False, False, True, True)] == [
        None,
        None,
        None,
        None,
        "success",
    ]
    assert [counter.record(False) for _ in range(3)] == [None, None, "failure"]


class _Status(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = int(self.path.strip("/"))
        self.send_response(code)
        self.send_header("Content-Length", "6")
        self.end_headers()
        self.wfile.write(b"reason")

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@pytest.fixture
def status_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def _plan() -> ContainerPlan:
    return ContainerPlan(
        name="c",
        argv=[],
        env={},
        workdir="/",
        uid=0,
        gid=0,
        groups=[],
        no_new_privs=False,
        drop_capabilities=False,
        read_only_root=False,
        mounts=[],
    )


@pytest.mark.parametrize(
    ("code", "ok"), [(200, True), (302, True), (399, True), (400, False), (503, False)]
)
def test_http_probe_succeeds_on_2xx_and_3xx_only(status_server: int, code: int, ok: bool) -> None:
    probe = Probe(kind="http", port=status_server, path=f"/{code}", timeout=2)
    result, message = asyncio.run(check(probe, "127.0.0.1", None, _plan()))
    assert result is ok
    if not ok:
        assert f"statuscode: {code}" in message
        assert "reason" in message


def test_tcp_probe_fails_on_a_closed_port() -> None:
    probe = Probe(kind="tcp", port=1, timeout=2)
    ok, message = asyncio.run(check(probe, "127.0.0.1", None, _plan()))
    assert not ok
    assert "failed" in message


# --- a real container in a network namespace, run by the kubelet in this process ---------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Network, ClusterState]]:
    slots = KUBELET_UNIT.slots or range(0)
    prefix, subnet = KUBELET_UNIT.at(slots[os.getpid() % len(slots)])
    network = Network(prefix, subnet)
    network.create()
    state = ClusterState(prefix, root=tmp_path / "state")
    try:
        yield network, state
    finally:
        network.destroy()
        assert namespaces_with_prefix(prefix) == []


def _standin_pod(
    network: Network,
    state: ClusterState,
    flags: Path,
    command: list[str] | None = None,
    scratch_at: str = "/mnt/scratch",
    claim: Path | None = None,
    fs_group: int | None = None,
) -> Any:
    """One stand-in pod; with ``claim``, that directory is claim ``shared``, whose folder
    ``cache/compile`` (a subPath) the container mounts at /mnt/shared."""
    host = network.add_host("p")
    security: dict[str, Any] = {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True}
    if fs_group is not None:
        security["fsGroup"] = fs_group
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 2,
        "securityContext": security,
        "volumes": [
            {"name": "flags", "hostPath": {"path": str(flags)}},
            {"name": "code", "hostPath": {"path": str(STANDIN.parent)}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "shared", "persistentVolumeClaim": {"claimName": "shared"}},
        ],
        "containers": [
            {
                "name": "standin",
                "command": command or [sys.executable, "/mnt/code/standin_server.py", "8081"],
                "env": [
                    {"name": "STANDIN_UNHEALTHY", "value": "/mnt/flags/unhealthy"},
                    {
                        "name": "POD_IP",
                        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                    },
                ],
                "securityContext": {
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                },
                "volumeMounts": [
                    {"name": "flags", "mountPath": "/mnt/flags"},
                    {"name": "code", "mountPath": "/mnt/code", "readOnly": True},
                    {"name": "scratch", "mountPath": scratch_at},
                    {"name": "shared", "mountPath": "/mnt/shared", "subPath": "cache/compile"},
                ],
                "startupProbe": {
                    "httpGet": {"path": "/startup", "port": 8081},
                    "periodSeconds": 1,
                    "failureThreshold": 30,
                },
                "readinessProbe": {
                    "httpGet": {"path": "/ready", "port": 8081},
                    "periodSeconds": 1,
                },
                "livenessProbe": {
                    "httpGet": {"path": "/live", "port": 8081},
                    "periodSeconds": 1,
                    "failureThreshold": 2,
                },
            }
        ],
    }
    identity = PodIdentity(
        name="standin-0",
        namespace="default",
        ip=host.ip,
        netns=host.namespace,
        role="head",
        labels={},
        annotations={},
        directory=state.pod_dir("standin-0"),
        gpus=1,
    )
    if claim is None:
        pod_spec["volumes"].pop()
        pod_spec["containers"][0]["volumeMounts"].pop()
    pod = plan_pod(identity, pod_spec, [], {} if claim is None else {"shared": claim})
    plan = ClusterPlan(
        prefix=state.prefix,
        subnet=str(network.subnet),
        release="t",
        namespace="default",
        isvc="t",
        pods=[pod],
        forward=Forward(host="127.0.0.1", port=0, service="t", role="head", target_port=8081),
    )
    return plan


async def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.1)


def _run(
    state: ClusterState,
    plan: ClusterPlan,
    scenario: Callable[[Kubelet], Awaitable[None]],
) -> Kubelet:
    async def main() -> Kubelet:
        kubelet = Kubelet(state, plan)
        running = asyncio.create_task(kubelet.run(None))
        try:
            await scenario(kubelet)
        finally:
            kubelet.stop()
            await asyncio.wait_for(running, 30)
        return kubelet

    return asyncio.run(main())


@needs_root
def test_failing_liveness_kills_the_whole_container_and_restarts_it(
    cluster: tuple[Network, ClusterState], tmp_path: Path
) -> None:
    network, state = cluster
    flags = tmp_path / "flags"
    flags.mkdir()
    plan = _standin_pod(network, state, flags)
    first_pids: list[int] = []

    async def scenario(kubelet: Kubelet) -> None:
        runner = kubelet.runners["standin-0"][0]
        await _wait(lambda: runner.status["ready"], 30, "the stand-in to be Ready")
        first_pids.extend([runner.status["pid"], runner.status["init_pid"]])
        (flags / "unhealthy").touch()
        await _wait(
            lambda: runner.status["restarts"] == 1,
            30,
            "a restart after liveness failed",
        )
        (flags / "unhealthy").unlink()
        await _wait(lambda: runner.status["ready"], 30, "Ready again")

    kubelet = _run(state, plan, scenario)
    reasons = [e["reason"] for e in kubelet.events]
    assert "Killing" in reasons
    killing = next(e for e in kubelet.events if e["reason"] == "Killing")
    assert killing["message"].startswith(
        "Liveness probe failed: HTTP probe failed with statuscode: 503"
    )
    assert not any(process_alive(pid) for pid in first_pids)  # the old container is gone, all of it
    first_log = Path(plan.pods[0].directory) / "standin-0.log"
    assert "stand-in started 1000" in first_log.read_text()  # ran as the pod's runAsUser


@needs_root
def test_once_the_pid_file_names_the_kubelet_its_status_lists_every_pod(
    cluster: tuple[Network, ClusterState], tmp_path: Path
) -> None:
    network, state = cluster
    plan = _standin_pod(network, state, tmp_path, command=["sleep", "30"])
    listed: list[Any] = []

    async def scenario(kubelet: Kubelet) -> None:
        del kubelet
        await _wait(lambda: state.kubelet_pid() == os.getpid(), 10, "the pid file")
        listed.extend(state.load_status().get("pods", []))

    _run(state, plan, scenario)
    assert [p["name"] for p in listed] == ["standin-0"]


@needs_root
def test_a_crashing_container_backs_off_before_its_second_restart(
    cluster: tuple[Network, ClusterState], tmp_path: Path
) -> None:
    network, state = cluster
    plan = _standin_pod(network, state, tmp_path, command=["sh", "-c", "echo crashing; exit 3"])

    async def scenario(kubelet: Kubelet) -> None:
        runner = kubelet.runners["standin-0"][0]
        await _wait(
            lambda: runner.status["reason"] == "CrashLoopBackOff",
            30,
            "CrashLoopBackOff",
        )
        assert runner.status["restarts"] == 1  # the first restart came at once
        assert runner.status["last_state"]["exit_code"] == 3

    kubelet = _run(state, plan, scenario)
    backoffs = [e["message"] for e in kubelet.events if e["reason"] == "BackOff"]
    assert backoffs == ["back-off 10s restarting failed container"]


@needs_root
def test_the_container_sees_its_pod_not_the_host(
    cluster: tuple[Network, ClusterState], tmp_path: Path
) -> None:
    network, state = cluster
    script = (
        "hostname; id -u; echo $POD_IP; touch /mnt/scratch/ok && echo scratch-writable; "
        "touch /usr/x 2>/dev/null || echo root-read-only; ls /dev/shm | wc -l; "
        "ps -e --no-headers | wc -l; "
        "sleep 30"
    )
    plan = _standin_pod(network, state, tmp_path, command=["sh", "-c", script])
    log = Path(plan.pods[0].directory) / "standin-0.log"

    async def scenario(kubelet: Kubelet) -> None:
        await _wait(
            lambda: log.exists() and len(log.read_text().splitlines()) >= 7,
            20,
            "the script's output",
        )

    _run(state, plan, scenario)
    lines = log.read_text().split()
    assert lines[:7] == [
        "standin-0",
        "1000",
        plan.pods[0].ip,
        "scratch-writable",
        "root-read-only",
        "0",
        lines[6],
    ]
    assert int(lines[6]) <= 5  # its own PID namespace: init, sh, ps, wc (not the host's processes)


def _count_runs(directory: str) -> str:
    """A container that counts its runs in DIRECTORY/runs, crashing after its first run."""
    runs = f"{directory}/runs"
    return (
        f"n=$(cat {runs} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {runs}; "
        'echo "run $n"; if [ $n -lt 2 ]; then exit 3; fi; sleep 30'
    )


@needs_root
@pytest.mark.parametrize(
    ("scratch_at", "runs_in", "kept"),
    [
        ("/tmp", "/tmp", True),
        ("/mnt/scratch", "/tmp", False),
        ("/var/cache/multinode-llm/compile", "/var/cache/multinode-llm/compile", True),
    ],
    ids=["emptyDir at /tmp", "the container's own /tmp", "emptyDir at the compile cache's path"],
)
def test_an_emptydir_outlives_a_container_restart_and_goes_with_the_pod(
    cluster: tuple[Network, ClusterState],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scratch_at: str,
    runs_in: str,
    kept: bool,
) -> None:
    """As kubelet keeps a pod's emptyDir across restarts of its containers (the supervisors'
    restarts file lives on the chart's /tmp emptyDir, vLLM's compile cache on the chart's
    compile-cache emptyDir, at a path the host lacks), while a container's own /tmp, its image
    layer, is new on every start; removing the pod (``local down``) removes its emptyDirs."""
    network, state = cluster
    command = ["sh", "-c", _count_runs(runs_in)]
    plan = _standin_pod(network, state, tmp_path, command=command, scratch_at=scratch_at)
    pod_dir = Path(plan.pods[0].directory)
    second_log = pod_dir / "standin-1.log"

    async def scenario(kubelet: Kubelet) -> None:
        runner = kubelet.runners["standin-0"][0]
        await _wait(lambda: runner.status["restarts"] >= 1, 30, "the restart after the crash")
        await _wait(lambda: second_log.exists() and "run" in second_log.read_text(), 20, "run 2")

    _run(state, plan, scenario)
    assert (pod_dir / "standin-0.log").read_text().split() == ["run", "1"]
    assert second_log.read_text().split() == ["run", "2" if kept else "1"]
    emptydir = pod_dir / "volumes" / "scratch"
    assert (emptydir / "runs").exists() == kept
    # The kubelet ran in this process and is stopped: its pid file would make down stop this one.
    state.pid_file.unlink(missing_ok=True)
    monkeypatch.setenv("MULTINODE_LLM_LOCAL_STATE", str(state.directory.parent))
    down(state.prefix)
    assert not emptydir.exists()


@needs_root
@pytest.mark.parametrize(("fs_group", "gid", "mode"), [(2000, 2000, 0o2775), (None, 1000, 0o755)])
def test_a_missing_subpath_of_a_claim_is_made_for_the_pods_user_as_kubelet_makes_it(
    cluster: tuple[Network, ClusterState],
    tmp_path: Path,
    fs_group: int | None,
    gid: int,
    mode: int,
) -> None:
    """kubelet creates a writable mount's missing subPath at container start (the shared compile
    cache's folder on the model's claim); the pod's user (uid 1000) can write into it."""
    network, state = cluster
    claim = tmp_path / "claim"
    claim.mkdir()
    script = "echo compiled > /mnt/shared/entry && echo written; sleep 30"
    plan = _standin_pod(
        network, state, tmp_path, command=["sh", "-c", script], claim=claim, fs_group=fs_group
    )
    log = Path(plan.pods[0].directory) / "standin-0.log"
    assert not (claim / "cache").exists()  # planning makes nothing: the container's start does

    async def scenario(kubelet: Kubelet) -> None:
        del kubelet
        await _wait(lambda: log.exists() and "written" in log.read_text(), 20, "the write")

    _run(state, plan, scenario)
    for folder in (claim / "cache", claim / "cache" / "compile"):
        info = folder.stat()
        assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (1000, gid, mode), folder
    assert (claim / "cache" / "compile" / "entry").read_text() == "compiled\n"
