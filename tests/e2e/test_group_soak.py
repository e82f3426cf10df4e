"""A soak: rounds of faults against one PP=2 TP=1 group while a client keeps asking it for text.

The rounds, in order: kill the worker pod's container, kill the head pod's container, kill the Ray
GCS process inside the head pod. Each round must heal with no manual step, within its deadline; the
client may see errors only inside a round's outage window (from the fault until the first
successful request after the group restarted); a stretch of clean requests separates the rounds;
and nothing is left behind: no process, namespace or mount (``local_group`` checks those), no new
file in the host's /dev/shm, and no file descriptor of this pytest process (the client's sockets).
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from groups import LocalGroup, local_group, record

SCENARIO = "soak PP=2 TP=1"
RECOVERY_S = 600  # each round's deadline, from the fault until a clean stretch of requests
REQUEST_EVERY_S = 0.5  # the steady load: one small completion this often, start to start
REQUEST_TIMEOUT_S = 15.0  # a request in flight when a pod dies fails within this
CLEAN_RUN = 6  # successful requests in a row that a round must end with (about 3 s)
FD_SLACK = 4  # descriptors the process may gain (interpreter caches, not sockets left open)


@dataclass(frozen=True)
class Request:
    started: float  # time.monotonic()
    ended: float
    error: str  # "" when the completion came back with tokens

    @property
    def ok(self) -> bool:
        return not self.error


class SteadyLoad:
    """One small completion every REQUEST_EVERY_S through the head's Service, from a thread, with
    one real ``openai`` client that is closed when the load stops. Requests run one at a time, so
    none is in flight beside the one that ends an outage."""

    def __init__(self, url: str, model: str) -> None:
        self.url, self.model = url, model
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._crash: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="soak-load", daemon=True)

    def __enter__(self) -> SteadyLoad:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=REQUEST_TIMEOUT_S + 10)
        assert not self._thread.is_alive(), "the load thread did not stop"

    def requests(self) -> list[Request]:
        assert self._crash is None, f"the load thread crashed: {self._crash!r}"
        with self._lock:
            return list(self._requests)

    def _run(self) -> None:
        import openai

        try:
            with openai.OpenAI(
                base_url=self.url, api_key="unused", timeout=REQUEST_TIMEOUT_S, max_retries=0
            ) as client:
                next_at = time.monotonic()
                while not self._stop.wait(max(0.0, next_at - time.monotonic())):
                    next_at = time.monotonic() + REQUEST_EVERY_S
                    request = self._one(client)
                    with self._lock:
                        self._requests.append(request)
        except BaseException as crash:  # seen by the test through requests(), not lost in a thread
            self._crash = crash

    def _one(self, client: Any) -> Request:
        import openai

        started = time.monotonic()
        try:
            reply = client.completions.create(model=self.model, prompt="The group", max_tokens=4)
            tokens = reply.usage.completion_tokens if reply.usage else 0
            error = "" if reply.choices and tokens > 0 else "a reply without tokens"
        except openai.OpenAIError as failure:
            error = f"{type(failure).__name__}: {failure}"[:200]
        return Request(started, time.monotonic(), error)


@dataclass(frozen=True)
class Round:
    fault: str
    at: float  # the fault, time.monotonic()
    restarted_s: float  # fault -> kubelet restarted the head (the group restarts as one)
    ended_by: str  # kubelet's reason for the head's exit: its liveness probe, or an error exit
    ready_s: float  # fault -> both pods Ready again
    first_ok: Request  # the first successful request that started after the head restarted

    @property
    def window(self) -> tuple[float, float]:
        return self.at, self.first_ok.ended

    @property
    def outage_s(self) -> float:
        return self.first_ok.ended - self.at

    def covers(self, request: Request) -> bool:
        """The request started or ended inside this round's outage window."""
        start, end = self.window
        return request.started <= end and request.ended >= start


def _children() -> dict[int, list[int]]:
    """Every process on the host by its parent, from /proc (the pods' PID namespaces nest in it)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # comm may hold spaces and parentheses
        children.setdefault(parent, []).append(int(entry.name))
    return children


def _descendants(root: int) -> list[int]:
    children, found, todo = _children(), [], [root]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _kill_gcs(group: LocalGroup) -> None:
    """SIGKILL the Ray GCS of the head pod, found below the head container's init from the host."""
    init_pid = int(group.pod("head")["containers"][0]["init_pid"])
    gcs = [pid for pid in _descendants(init_pid) if _comm(pid) == "gcs_server"]
    assert len(gcs) == 1, f"expected one gcs_server below the head's init {init_pid}: {gcs}"
    os.kill(gcs[0], signal.SIGKILL)


def _how_the_head_ended(group: LocalGroup) -> tuple[str, str]:
    """Kubelet's reason for the head's last exit, and that exit in a line with the supervisor's
    last "exit 1:" line (it exits on its own when it sees the group lost; a liveness kill stops it
    with SIGTERM, and then it says no such line)."""
    last = group.pod("head")["containers"][0]["last_state"] or {}
    said = [line for line in group.log("head", previous=True).splitlines() if "exit 1:" in line]
    reason = str(last.get("reason"))
    return reason, f"{reason} (code {last.get('exit_code')}): {said[-1] if said else '-'}"


def _restarts(group: LocalGroup) -> dict[str, int]:
    return {role: int(group.pod(role)["restarts"]) for role in ("head", "worker")}


def _first_ok_after(load: SteadyLoad, since: float) -> Request | None:
    return next((r for r in load.requests() if r.ok and r.started >= since), None)


def _clean_run(load: SteadyLoad, since: float) -> int:
    """How many of the latest requests in a row succeeded, counting only those after ``since``."""
    run = 0
    for request in reversed(load.requests()):
        if request.started < since or not request.ok:
            break
        run += 1
    return run


def _await_clean_stretch(group: LocalGroup, load: SteadyLoad, since: float, timeout: float) -> None:
    group.wait(
        lambda: _clean_run(load, since) >= CLEAN_RUN,
        timeout,
        f"{CLEAN_RUN} successful requests in a row",
    )


def _fault_round(
    group: LocalGroup, load: SteadyLoad, fault: str, inject: Callable[[], object]
) -> Round:
    """Inject the fault, then wait, never touching the group, until it serves the load again."""
    before = _restarts(group)
    at = time.monotonic()
    inject()
    deadline = at + RECOVERY_S

    def left() -> float:
        return deadline - time.monotonic()

    # The head's restart marks the outage's far side: a request that succeeds before it may be a
    # straggler served by the dying group, not a sign that it healed.
    group.wait(lambda: _restarts(group)["head"] > before["head"], left(), "the head to restart")
    restarted = time.monotonic()
    ended_by, how = _how_the_head_ended(group)
    group.wait(
        lambda: all(group.pod(role)["ready"] for role in ("head", "worker")),
        left(),
        "both pods to be Ready again",
    )
    ready = time.monotonic()
    group.wait(lambda: _first_ok_after(load, restarted) is not None, left(), "a request to succeed")
    first_ok = _first_ok_after(load, restarted)
    assert first_ok is not None
    _await_clean_stretch(group, load, first_ok.started, left())
    after = _restarts(group)
    print(f"[{SCENARIO}] {fault}: restarts {before} -> {after}; the head ended: {how}")
    # The group restarts as one: a worker whose head is gone (or was itself killed) restarts too.
    assert after["worker"] > before["worker"], f"{fault}: the worker did not restart"
    return Round(fault, at, restarted - at, ended_by, ready - at, first_ok)


def _soak(group: LocalGroup, load: SteadyLoad) -> list[Round]:
    # The group is Ready; the load must see it serve before the first fault, or nothing is tested.
    _await_clean_stretch(group, load, 0.0, 120)
    faults: list[tuple[str, Callable[[], object]]] = [
        ("kill worker", lambda: group.kill("worker")),
        ("kill head", lambda: group.kill("head")),
        ("kill Ray GCS", lambda: _kill_gcs(group)),
    ]
    return [_fault_round(group, load, fault, inject) for fault, inject in faults]


def _report(rounds: list[Round], requests: list[Request]) -> None:
    for number, done in enumerate(rounds, 1):
        inside = [r for r in requests if done.covers(r)]
        errors = sum(not r.ok for r in inside)
        name = f"round {number} {done.fault}"
        record(
            SCENARIO, f"{name}: outage ({errors} of {len(inside)} requests failed)", done.outage_s
        )
        record(SCENARIO, f"{name}: head restarted ({done.ended_by})", done.restarted_s)
        record(SCENARIO, f"{name}: both pods Ready", done.ready_s)


def _check_errors_inside_windows(rounds: list[Round], requests: list[Request]) -> None:
    stray = [r for r in requests if not r.ok and not any(done.covers(r) for done in rounds)]
    windows = [f"{d.fault}: {d.window[0]:.1f}..{d.window[1]:.1f}" for d in rounds]
    assert stray == [], f"errors outside the outage windows {windows}: {stray}"


def _check_served_between_rounds(rounds: list[Round], requests: list[Request]) -> None:
    """Successes between the windows (and before the first): the group was healthy each time."""
    edges = [0.0, *(edge for done in rounds for edge in done.window), float("inf")]
    for start, end in zip(edges[::2], edges[1::2], strict=True):
        served = [r for r in requests if r.ok and start < r.started and r.ended < end]
        assert len(served) >= CLEAN_RUN - 1, f"only {len(served)} successes in {start}..{end}"


def _open_fds() -> int:
    gc.collect()  # anything unreachable that holds a socket closes it now, not at some later time
    return len(os.listdir("/proc/self/fd"))


def _host_shm() -> set[str]:
    return set(os.listdir("/dev/shm"))


@dataclass
class Leaks:
    """What the host had before the soak, to compare with what it has after the group is gone."""

    fds: int
    shm: set[str]

    @classmethod
    def before(cls) -> Leaks:
        import openai  # noqa: F401 - its import opens what it keeps open, before the count

        return cls(_open_fds(), _host_shm())

    def check(self) -> None:
        left = sorted(_host_shm() - self.shm)
        assert left == [], f"/dev/shm files made during the soak are left: {left}"
        fds = _open_fds()
        print(
            f"[{SCENARIO}] open descriptors: {self.fds} before, {fds} after; /dev/shm: no new file"
        )
        assert fds <= self.fds + FD_SLACK, f"open descriptors grew from {self.fds} to {fds}"


def _soak_under_load(group: LocalGroup) -> tuple[list[Round], list[Request]]:
    with SteadyLoad(group.plan.url, group.model) as load:
        rounds = _soak(group, load)
    return rounds, load.requests()


def test_rounds_of_faults_heal_under_load_and_leave_nothing(tiny_model: Path) -> None:
    started = time.monotonic()
    leaks = Leaks.before()
    with local_group(SCENARIO, tiny_model) as group:
        rounds, requests = _soak_under_load(group)
    _report(rounds, requests)
    _check_errors_inside_windows(rounds, requests)
    _check_served_between_rounds(rounds, requests)
    leaks.check()
    record(
        SCENARIO,
        f"soak of {len(rounds)} rounds, {len(requests)} requests",
        time.monotonic() - started,
    )
