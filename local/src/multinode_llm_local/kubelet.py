"""The local kubelet: a small daemon that runs the plan's pods, probes them and restarts them.

It does what kubelet does for the fields our chart uses, with Kubernetes' rules:

- each container runs as the processes of ``container.py`` in the pod's network namespace, with
  its own PID, mount and UTS namespaces (so killing it kills all of it);
- startup probe first (liveness and readiness wait for it), readiness probed at once when it
  passes: kubelet's sync on a startup result triggers a readiness run (``UpdatePodStatus``,
  ``pkg/kubelet/prober/prober_manager.go``, Kubernetes v1.37.2), so the chart's head startup
  period bounds the wait from engine to Ready; readiness sets the pod's Ready after
  ``successThreshold`` successes and clears it after ``failureThreshold`` failures; a startup or
  liveness probe that fails ``failureThreshold`` times in a row kills the container (SIGTERM,
  SIGKILL after the grace period) and it is restarted (``restartPolicy: Always``);
- restarts back off as CrashLoopBackOff does: the first at once, then 10 s, 20 s, ... up to 5 min,
  reset after a container ran for 10 minutes;
- a host port is forwarded to the head Service's *ready* endpoints (no ready pod, no connection).

``status.json`` in the state directory is the kubelet's API: pods, containers, restart counts,
readiness, and the recent events (probe failures, kills, back-offs) with their times.

Run as ``python -m multinode_llm_local.kubelet STATE_DIR [--forward-fd FD]`` (``local up`` does).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from multinode_llm_local.pods import ContainerPlan, PodPlan, Probe
from multinode_llm_local.state import ClusterPlan, ClusterState, write_json

log = logging.getLogger("multinode_llm_local.kubelet")

BACKOFF_BASE_S = 10.0
BACKOFF_MAX_S = 300.0
BACKOFF_RESET_S = 600.0
EVENTS_KEPT = 300
INIT_FIND_DEADLINE_S = 10.0


class Backoff:
    """CrashLoopBackOff: the delay before each restart of one container."""

    def __init__(self) -> None:
        self.current = 0.0

    def next(self, ran_for: float) -> float:
        """The delay before restarting a container that ran ``ran_for`` seconds and stopped."""
        if ran_for >= BACKOFF_RESET_S:
            self.current = 0.0
        delay = self.current
        self.current = BACKOFF_BASE_S if self.current == 0 else min(self.current * 2, BACKOFF_MAX_S)
        return delay


@dataclass
class ProbeCounter:
    """Consecutive results of one probe; says when a threshold is crossed."""

    success_threshold: int
    failure_threshold: int
    successes: int = 0
    failures: int = 0

    def record(self, ok: bool) -> str | None:
        """Return "success" or "failure" when this result reaches that threshold, else None."""
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            return "success" if self.successes >= self.success_threshold else None
        self.successes, self.failures = 0, self.failures + 1
        return "failure" if self.failures >= self.failure_threshold else None


def enter_command(init_pid: int, plan: ContainerPlan, argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` inside a running container, as its user, with its env."""
    command = ["nsenter", "--target", str(init_pid), "--net", "--mount", "--pid", "--uts"]
    if plan.rootfs:  # the init's root is the image's (container.py chroots into it)
        command.append("--root")
    if plan.uid or plan.gid:
        command += ["--setuid", str(plan.uid), "--setgid", str(plan.gid)]
    env = [f"{key}={value}" for key, value in plan.env.items()]
    return [*command, "--wd=" + plan.workdir, "env", "-i", *env, *argv]


async def check(
    probe: Probe, pod_ip: str, init_pid: int | None, plan: ContainerPlan
) -> tuple[bool, str]:
    """Run one probe once: (succeeded, what happened)."""
    try:
        return await asyncio.wait_for(_check(probe, pod_ip, init_pid, plan), probe.timeout)
    except TimeoutError:
        return False, f"{probe.kind} probe timed out after {probe.timeout:g}s"
    except OSError as error:
        return False, f"{probe.kind} probe failed: {error}"


async def _check(
    probe: Probe, pod_ip: str, init_pid: int | None, plan: ContainerPlan
) -> tuple[bool, str]:
    host = probe.host or pod_ip
    if probe.kind == "tcp":
        _, writer = await asyncio.open_connection(host, probe.port)
        writer.close()
        return True, "connected"
    if probe.kind == "http":
        return await _http_get(host, probe)
    if init_pid is None:
        return False, "exec probe: the container is not running"
    process = await asyncio.create_subprocess_exec(
        *enter_command(init_pid, plan, probe.command),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await process.communicate()
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        raise
    text = output.decode(errors="replace").strip()[-300:]
    return process.returncode == 0, f"exit code {process.returncode}: {text}"


async def _http_get(host: str, probe: Probe) -> tuple[bool, str]:
    """One HTTP GET as kubelet sends it; 200-399 is success."""
    reader, writer = await asyncio.open_connection(host, probe.port)
    try:
        headers = {"Host": f"{host}:{probe.port}", "User-Agent": "kube-probe/1.31", "Accept": "*/*"}
        headers.update(probe.headers)
        head = f"GET {probe.path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()
        )
        writer.write((head + "Connection: close\r\n\r\n").encode())
        await writer.drain()
        response = b""
        while len(response) < 8192 and (chunk := await reader.read(8192)):
            response += chunk  # the server closes after the body (Connection: close)
    finally:
        writer.close()
    status_line, _, rest = response.decode(errors="replace").partition("\r\n")
    parts = status_line.split()
    if len(parts) < 2 or not parts[1].isdigit():
        return False, f"HTTP probe got no status line from {host}:{probe.port}{probe.path}"
    code = int(parts[1])
    body = rest.partition("\r\n\r\n")[2].strip()[:300]
    if 200 <= code < 400:
        return True, f"HTTP {code}"
    return False, f"HTTP probe failed with statuscode: {code}: {body}"


class PodHost(Protocol):
    """What a ContainerRunner needs of whoever runs its pod: this module's Kubelet, or the real
    cluster's node agent (controlplane/node.py)."""

    @property
    def stopping(self) -> bool: ...

    def event(self, pod: PodPlan, container: str, reason: str, message: str) -> None: ...

    def changed(self) -> None: ...

    async def sleep(self, seconds: float) -> bool: ...


class ContainerRunner:
    """One container of one pod: start, probe, kill, restart, with its status."""

    def __init__(self, kubelet: PodHost, pod: PodPlan, plan: ContainerPlan) -> None:
        self.kubelet = kubelet
        self.pod = pod
        self.plan = plan
        self.process: asyncio.subprocess.Process | None = None
        self.init_pid: int | None = None
        self.status: dict[str, Any] = {
            "name": plan.name,
            "state": "waiting",
            "reason": "ContainerCreating",
            "restarts": 0,
            "ready": False,
            "started": False,
            "pid": None,
            "init_pid": None,
            "log": "",
            "started_at": None,
            "last_state": None,
        }

    async def run(self, restart_policy: str = "Always") -> int:
        """Run the container, restarting it as ``restart_policy`` says (Always, OnFailure, Never);
        return its last exit code once it is not restarted, or once the kubelet stops."""
        backoff = Backoff()
        exit_code = 0
        while not self.kubelet.stopping:
            started = time.time()
            exit_code, reason = await self._run_once()
            finished = time.time()
            self._set(
                state="terminated",
                reason=reason,
                ready=False,
                started=False,
                pid=None,
                init_pid=None,
                last_state={
                    "exit_code": exit_code,
                    "reason": reason,
                    "started_at": started,
                    "finished_at": finished,
                    "log": self.status["log"],
                },
            )
            self.kubelet.event(
                self.pod, self.plan.name, "Terminated", f"exit code {exit_code} ({reason})"
            )
            if self.kubelet.stopping:
                return exit_code
            if restart_policy == "Never" or (restart_policy == "OnFailure" and exit_code == 0):
                return exit_code
            delay = backoff.next(finished - started)
            if delay:
                self._set(state="waiting", reason="CrashLoopBackOff")
                self.kubelet.event(
                    self.pod,
                    self.plan.name,
                    "BackOff",
                    f"back-off {delay:g}s restarting failed container",
                )
                if await self.kubelet.sleep(delay):
                    return exit_code
            self.status["restarts"] += 1
        return exit_code

    async def stop(self, grace: float) -> None:
        """Kill the running container: SIGTERM to its init, SIGKILL after ``grace`` seconds."""
        process, init_pid = self.process, self.init_pid
        if process is None or process.returncode is not None:
            return
        target = init_pid or process.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGKILL)
            await process.wait()

    async def _run_once(self) -> tuple[int, str]:
        """Start the container, probe it until it exits or a probe kills it: (exit code, reason)."""
        process = await self._start()
        probing = asyncio.create_task(self._probe())
        waiting = asyncio.create_task(process.wait())
        done, _ = await asyncio.wait({probing, waiting}, return_when=asyncio.FIRST_COMPLETED)
        kill_reason = None
        if probing in done and not probing.cancelled():
            if probing.exception() is None:
                kill_reason = probing.result()
            else:  # a bug here must not leave a container unprobed without a word
                log.error(
                    "probing %s/%s failed",
                    self.pod.name,
                    self.plan.name,
                    exc_info=probing.exception(),
                )
                kill_reason = f"Probe error: {probing.exception()}"
        if kill_reason:
            grace = self._grace(kill_reason)
            self.kubelet.event(
                self.pod, self.plan.name, "Killing", f"{kill_reason}, will be restarted"
            )
            self._set(ready=False)
            await self.stop(grace)
        probing.cancel()
        exit_code = await waiting
        reason = (
            kill_reason.split(":")[0]
            if kill_reason
            else ("Completed" if exit_code == 0 else "Error")
        )
        return exit_code, reason

    async def _start(self) -> asyncio.subprocess.Process:
        pod_dir = Path(self.pod.directory)
        log_path = pod_dir / f"{self.plan.name}-{self.status['restarts']}.log"
        argv = [
            *("ip", "netns", "exec", self.pod.netns),
            *("unshare", "--pid", "--fork", "--mount-proc", "--uts", "--propagation", "private"),
            *(sys.executable, "-m", "multinode_llm_local.container"),
            *(str(pod_dir / "pod.json"), self.plan.name),
        ]
        with log_path.open("ab") as output:
            self.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,
            )
        self.init_pid = await _child_of(self.process.pid)
        self._set(
            state="running",
            reason="",
            pid=self.process.pid,
            init_pid=self.init_pid,
            log=str(log_path),
            started_at=time.time(),
        )
        self.kubelet.event(
            self.pod, self.plan.name, "Started", f"started container (log {log_path})"
        )
        return self.process

    async def _probe(self) -> str | None:
        """Run the probes of one container run; return why to kill it, or None when it exited."""
        started = time.monotonic()
        startup = self.plan.startup
        if startup is not None:
            failed = await self._until(startup, "Startup", started, stop_on_success=True)
            if failed:
                return failed
        self._set(started=True)
        if self.plan.readiness is None:
            self._set(ready=True)
            self.kubelet.changed()
        loops: list[Awaitable[str | None]] = []
        if self.plan.readiness is not None:
            loops.append(self._readiness(self.plan.readiness, started))
        if self.plan.liveness is not None:
            loops.append(
                self._until(self.plan.liveness, "Liveness", started, stop_on_success=False)
            )
        if not loops:
            await asyncio.Event().wait()
        tasks = [asyncio.ensure_future(loop) for loop in loops]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            return next(iter(done)).result()
        finally:
            for task in tasks:
                task.cancel()

    async def _until(
        self, probe: Probe, name: str, started: float, stop_on_success: bool
    ) -> str | None:
        """Probe until it fails ``failureThreshold`` times in a row; return the kill reason."""
        counter = ProbeCounter(1, probe.failure_threshold)
        await _sleep_until(started + probe.initial_delay)
        while True:
            ok, message = await check(probe, self.pod.ip, self.init_pid, self.plan)
            crossed = counter.record(ok)
            if not ok:
                self.kubelet.event(
                    self.pod, self.plan.name, "Unhealthy", f"{name} probe failed: {message}"
                )
            if crossed == "failure":
                return f"{name} probe failed: {message}"
            if ok and stop_on_success:
                return None
            await asyncio.sleep(probe.period)

    async def _readiness(self, probe: Probe, started: float) -> str | None:
        counter = ProbeCounter(probe.success_threshold, probe.failure_threshold)
        await _sleep_until(started + probe.initial_delay)
        while True:
            ok, message = await check(probe, self.pod.ip, self.init_pid, self.plan)
            crossed = counter.record(ok)
            if not ok:
                self.kubelet.event(
                    self.pod, self.plan.name, "Unhealthy", f"Readiness probe failed: {message}"
                )
            if crossed is not None and (crossed == "success") != self.status["ready"]:
                self._set(ready=crossed == "success")
                self.kubelet.event(self.pod, self.plan.name, "Ready" if ok else "NotReady", message)
            await asyncio.sleep(probe.period)

    def _grace(self, reason: str) -> float:
        probe = self.plan.liveness if reason.startswith("Liveness") else self.plan.startup
        if probe is not None and probe.grace is not None:
            return probe.grace
        return self.pod.grace

    def _set(self, **changes: Any) -> None:
        self.status.update(changes)
        self.kubelet.changed()


class Kubelet:
    """Runs every pod of a plan until told to stop; keeps ``status.json`` current."""

    def __init__(self, state: ClusterState, plan: ClusterPlan) -> None:
        self.state = state
        self.plan = plan
        self.stopping = False
        self._stop_event = asyncio.Event()
        self._dirty = asyncio.Event()
        self.events: list[dict[str, Any]] = []
        self.runners: dict[str, list[ContainerRunner]] = {
            pod.name: [ContainerRunner(self, pod, c) for c in pod.containers] for pod in plan.pods
        }

    async def run(self, forward_socket: socket.socket | None) -> None:
        for pod in self.plan.pods:
            Path(pod.directory).mkdir(parents=True, exist_ok=True)
            write_json(Path(pod.directory) / "pod.json", pod.to_json())
            if pod.pending:
                self.event(pod, "", "FailedScheduling", pod.pending)
        # Status first, then the pid file: once `local up` sees the kubelet, status lists every pod.
        self._write_status()
        self.state.pid_file.write_text(str(os.getpid()))
        tasks = [
            asyncio.create_task(runner.run())
            for pod in self.plan.pods
            if not pod.pending
            for runner in self.runners[pod.name]
        ]
        writer = asyncio.create_task(self._write_status_loop())
        server = None
        if forward_socket is not None:
            server = await asyncio.start_server(self._forward, sock=forward_socket)
        await self._stop_event.wait()
        if server is not None:
            server.close()
        await self._stop_all()
        await asyncio.gather(*tasks, return_exceptions=True)
        writer.cancel()
        self._write_status()

    def stop(self) -> None:
        self.stopping = True
        self._stop_event.set()

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless the kubelet is stopping; True when it is."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_event.wait(), seconds)
        return self.stopping

    def changed(self) -> None:
        self._dirty.set()

    def event(self, pod: PodPlan, container: str, reason: str, message: str) -> None:
        entry = {
            "time": time.time(),
            "pod": pod.name,
            "container": container,
            "reason": reason,
            "message": message,
        }
        self.events = [*self.events[-EVENTS_KEPT + 1 :], entry]
        log.info("%s/%s %s: %s", pod.name, container, reason, message)
        self.changed()

    def pod_status(self, pod: PodPlan) -> dict[str, Any]:
        containers = [runner.status for runner in self.runners[pod.name]]
        ready = bool(containers) and all(c["ready"] for c in containers) and not pod.pending
        if pod.pending:
            phase = "Pending"
        elif any(c["state"] == "running" for c in containers):
            phase = "Running"
        else:
            phase = "Pending"
        return {
            "name": pod.name,
            "role": pod.role,
            "ip": pod.ip,
            "netns": pod.netns,
            "gpus": pod.gpus,
            "phase": phase,
            "ready": ready,
            "pending": pod.pending,
            "restarts": sum(c["restarts"] for c in containers),
            "containers": containers,
        }

    async def _stop_all(self) -> None:
        stops = [
            runner.stop(self.plan_pod(name).grace)
            for name, runners in self.runners.items()
            for runner in runners
        ]
        await asyncio.gather(*stops, return_exceptions=True)

    def plan_pod(self, name: str) -> PodPlan:
        return next(pod for pod in self.plan.pods if pod.name == name)

    async def _write_status_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            self._write_status()
            await asyncio.sleep(0.2)

    def _write_status(self) -> None:
        write_json(
            self.state.status_file,
            {
                "time": time.time(),
                "kubelet_pid": os.getpid(),
                "url": self.plan.url,
                "pods": [self.pod_status(pod) for pod in self.plan.pods],
                "events": self.events,
            },
        )

    async def _forward(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        """Forward one connection to a ready pod behind the Service, as kube-proxy would."""
        forward = self.plan.forward
        backends = [
            pod
            for pod in self.plan.pods
            if _selects(forward.selector, pod.labels)
            or (not forward.selector and pod.role == forward.role)
            if self.pod_status(pod)["ready"]
        ]
        if not backends:
            client_writer.close()
            return
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(backends[0].ip, forward.target_port), 5
            )
        except (OSError, TimeoutError):
            client_writer.close()
            return
        await asyncio.gather(
            _pipe(client_reader, writer), _pipe(reader, client_writer), return_exceptions=True
        )


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def _sleep_until(deadline: float) -> None:
    await asyncio.sleep(max(0.0, deadline - time.monotonic()))


async def _child_of(pid: int) -> int | None:
    """The host pid of the first child of ``pid`` (the container's init, forked by unshare)."""
    deadline = time.monotonic() + INIT_FIND_DEADLINE_S
    children = Path(f"/proc/{pid}/task/{pid}/children")
    while time.monotonic() < deadline:
        try:
            found = children.read_text().split()
        except OSError:
            return None  # unshare already exited
        if found:
            return int(found[0])
        await asyncio.sleep(0.02)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="multinode_llm_local.kubelet")
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("--forward-fd", type=int, default=None)
    args = parser.parse_args(argv)
    state = ClusterState(args.state_dir.name, args.state_dir.parent)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        handlers=[logging.FileHandler(state.log_file)],
    )
    plan = state.load_plan()
    if plan is None:
        log.error("no cluster plan in %s", state.directory)
        return 1
    forward = socket.socket(fileno=args.forward_fd) if args.forward_fd is not None else None
    asyncio.run(_serve(state, plan, forward))
    log.info("kubelet stopped")
    return 0


async def _serve(state: ClusterState, plan: ClusterPlan, forward: socket.socket | None) -> None:
    kubelet = Kubelet(state, plan)
    loop = asyncio.get_running_loop()
    stop: Callable[[], None] = kubelet.stop
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    await kubelet.run(forward)


if __name__ == "__main__":
    sys.exit(main())
