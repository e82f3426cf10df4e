"""Group start-up, restarts, recovery and throughput on the local cluster, per executor, against
plain vLLM.

Each executor of ``Options.executors`` (``group.executor``: ``ray``, vLLM's Ray executor on a Ray
cluster; ``mp``, vLLM's own multi-node executor, no Ray) gets the same measurements, in the same
run, beside the same plain vLLM server.

Start-up: the chart's PP=2 group (a head and a worker pod, the built-in local values, plus
``group.executor=mp`` for mp) is started by the local cluster (`multinode_llm_local.cluster`), and
its phases are read from three sources:
- the kubelet's events (each container Started, the head pod Ready), as Kubernetes would record;
- each supervisor's ``multinode_llm_event_seconds`` on ``GET :8081/metrics`` (the timeline its
  ``/status`` also shows: Ray head up (Ray only), engine started, each node joined as the head saw
  it, group complete, engine ready, ready; the worker's own "joined", and with mp its headless vLLM
  started), placed on the wall clock by the supervisor's ``uptime_s`` on ``/status``;
- this benchmark's own polls, every 50 ms, of the head's vLLM (the moment the engine really
  answers and lists the model) and of the head's ``/ready`` (the moment our readiness turns true).
The baseline is one plain `python -m vllm.entrypoints.openai.api_server` on the same model and
engine arguments and the local pods' CPU-build environment, started alone with an empty
``VLLM_CACHE_ROOT``, timed from its start until it lists the model. Plain and group starts
alternate; the last plain server is started once more on the cache root it filled (``plain-warm``:
the floor of a warm restart here).

Faults (``FAULTS``): once Ready, each cold start's group gets one (the last groups, the worker's
last; one per group because the kubelet backs off a container's second restart): every container
killed with the pods kept (``restart``: their emptyDirs, the compile cache among them, stay), the
head's container killed (``head``), the worker's (``worker``), each a SIGKILL to the container's
PID 1 as a node dies. Measured from the kill until each stage (readiness dropping, the kubelet
restarting each container, the engine answering, Ready, a completion through the head's Service
succeeding again), beside the restarted supervisors' phases. Then each executor deploys twice with
``compileCache.shared.enabled`` on the model's claim (``second-deployment``): the first on an empty
shared folder, whose entry its pods publish, the second after ``down``, seeded from it.

Throughput: once each group is Ready (and the plain server lists the model), one fixed load of
completions (``Options.throughput_*``) goes to the head's OpenAI port, and the same load to the
plain server, after an unmeasured warm-up. A PP=2 group on the two cores one plain server has to
itself is not expected to match it: the figure compares the executors with each other, beside it.

KServe's own runtime has no timeline to read; its delays follow from its periods
(docs/kserve-contract.md, "KServe's own multi-node runtime", read from KServe's
config/runtimes/kserve-huggingfaceserver-multinode.yaml): the head polls for registered nodes
every 2 s before it even starts vLLM; the head's startup probe waits 60 s, then runs every 30 s,
and readiness every 5 s after it; each probe is an exec of Python that imports ray (3.7 s wall on
this kind of machine); liveness fails after 2 misses 5 s apart.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from multinode_llm_testing.networks import BENCH_LOCAL
from multinode_llm_testing.ports import free_port
from multinode_llm_testing.waits import wait_until

from bench import loadgen, models
from bench.figures import Figure, Goal, Load, load_average, skipped
from bench.sandbox import http_get, http_post_json, tail

ENGINE_ARGS = ("--max-model-len=512", "--max-num-seqs=8")  # the local values' vllm.args
HTTP_PORT, STATUS_PORT = 8080, 8081  # the head's OpenAI port and every supervisor's status port
LOGS = Path(__file__).resolve().parent / "out" / "group"  # the last group's logs, for a look
POLL_S = 0.05
READY_TIMEOUT_S = 900.0
RECOVERY_TIMEOUT_S = 600.0

# KServe's multi-node runtime, by construction (see the module docstring).
KSERVE_EXEC_PROBE_S = 3.7
KSERVE_NODE_POLL_S = 2.0
KSERVE_STARTUP = {"initial_delay": 60.0, "period": 30.0}
KSERVE_READINESS_PERIOD_S = 5.0
KSERVE_LIVENESS = {"period": 5.0, "failures": 2}

EXECUTORS = ("ray", "mp")  # group.executor
LABELS = {"ray": "Ray", "mp": "mp"}
PROMPT = "The head and the worker of a pipeline parallel group serve one request"

READY_DETECTION_GOAL = Goal("value", "<=", 2.0, "ready detection within 2 s of the engine ready")
GROUP_READY_GOAL = Goal(
    "difference", "<=", 3.0, "a PP=2 group Ready within 3 s of one plain vLLM server's start"
)
MP_RECOVERY_GOAL = Goal("ratio", "<", 1.0, "mp recovers from a killed worker faster than Ray")
# The goals for what follows a cold start (issue 17), each a ratio in the same run.
RECOVERY_GOALS = {
    "worker": Goal("ratio", "<=", 0.6, "a killed worker serving again <= 0.6x a plain cold start"),
    "head": Goal("ratio", "<=", 0.6, "a killed head serving again <= 0.6x a plain cold start"),
    "restart": Goal(
        "ratio", "<=", 0.65, "a restart with a warm cache <= 0.65x the group's cold start"
    ),
}
SECOND_DEPLOYMENT_GOAL = Goal(
    "ratio", "<=", 0.7, "a second deployment of the same model Ready <= 0.7x the first"
)
# Rows of the side-by-side table (bench/report.py): the figures each executor has, against plain.
ROW_STARTUP, ROW_RECOVERY, ROW_THROUGHPUT = (
    "start-up to Ready",
    "recovery after a killed worker",
    "serving throughput",
)
ROWS = {  # the fault scenarios' rows, and the second deployment's
    "worker": ROW_RECOVERY,
    "head": "recovery after a killed head",
    "restart": "restart with a warm cache",
    "second-deployment": "second deployment of the same model",
}

# What one run can measure besides the cold starts (``--scenarios``). A fault is dealt to a cold
# start's group once it is Ready (one fault per group: the kubelet backs off a container's second
# restart by 10 s, as kubelet does); the worker's comes last, as it always did.
FAULTS = ("restart", "head", "worker")
SCENARIOS = (*FAULTS, "second-deployment", "plain-warm")
QUICK_SCENARIOS = ("worker", "plain-warm")  # ``--quick``: one group start per executor
FAULT_TARGETS = {"restart": ("head", "worker"), "head": ("head",), "worker": ("worker",)}
FAULT_WORDS = {  # how each figure names its fault
    "restart": "every container killed (pods kept, warm cache)",
    "head": "head killed",
    "worker": "worker killed",
}
# The shared compile cache of the second deployment: a folder of the model's claim (the chart's
# ``compileCache.shared.path``), emptied before the first deployment.
SHARED_CACHE_PATH = ".multinode-llm/compile-cache"
PUBLISH_TIMEOUT_S = 120.0
PUBLISH_QUIET_S = 3.0  # the shared folder unchanged this long: every pod has published


@dataclass(frozen=True)
class Options:
    repetitions: int = 3  # starts of each executor's group (and as many plain starts), alternating
    executors: tuple[str, ...] = EXECUTORS
    scenarios: tuple[str, ...] = SCENARIOS  # what else to measure (SCENARIOS); cold starts always
    quick: bool = False  # the smoke test's run: says so in the figures it leaves out
    model: models.BenchModel = models.DEFAULT
    # The throughput load, the same for the plain server and each group: completions, ignore_eos.
    throughput_requests: int = 96
    throughput_concurrency: int = 8
    throughput_tokens: int = 32

    def __post_init__(self) -> None:
        unknown = [name for name in self.executors if name not in EXECUTORS]
        if unknown or not self.executors:
            raise ValueError(f"executors {self.executors}: choose from {', '.join(EXECUTORS)}")
        odd = [name for name in self.scenarios if name not in SCENARIOS]
        if odd:
            raise ValueError(f"scenarios {odd}: choose from {', '.join(SCENARIOS)}")
        if len(self.faults) > self.repetitions:
            raise ValueError(
                f"{len(self.faults)} faults ({', '.join(self.faults)}) need as many group starts "
                f"per executor: repetitions {self.repetitions}"
            )

    @property
    def faults(self) -> tuple[str, ...]:
        return tuple(fault for fault in FAULTS if fault in self.scenarios)

    def fault_of(self, repetition: int) -> str | None:
        """The fault dealt to the group of that repetition: the last groups get one each."""
        index = repetition - (self.repetitions - len(self.faults))
        return self.faults[index] if index >= 0 else None

    def left_out(self, scenario: str) -> str:
        """Why a scenario's figures were not measured in this run (``skipped``)."""
        if self.quick:
            return (
                f"the quick run leaves it out: it measures {', '.join(self.scenarios)} only "
                "(each other fault needs a group start of its own); `python -m bench` measures it"
            )
        return f"not in this run's --scenarios ({', '.join(self.scenarios)})"


@dataclass
class GroupStart:
    """Wall-clock times (time.time()) of one group start's events; see ``events``."""

    events: dict[str, float] = field(default_factory=dict)

    def since_start(self) -> dict[str, float]:
        t0 = self.events["first container started"]
        return {name: at - t0 for name, at in sorted(self.events.items(), key=lambda kv: kv[1])}


@dataclass
class Recovery:
    """One fault: seconds from the kill to each stage and phase, and how the head's previous
    container ended (killed by its liveness probe, or exited)."""

    stages: dict[str, float]
    how: str


@dataclass
class Measured:
    """One executor's runs: its group starts, throughput, the faults dealt to its groups, and the
    two deployments on one shared compile cache."""

    starts: list[GroupStart] = field(default_factory=list)
    throughput: list[float] = field(default_factory=list)  # req/s, one per start
    faults: dict[str, Recovery] = field(default_factory=dict)
    deployments: list[GroupStart] = field(default_factory=list)  # first, second
    published: dict[str, float] = field(default_factory=dict)  # what the first one left shared
    failed: dict[str, str] = field(default_factory=dict)  # scenario -> its error


@dataclass
class Plain:
    """The plain server's runs: start-up seconds and throughput (req/s), one per start, and the
    last cold start's restart on the same cache root (``warm``)."""

    seconds: list[float] = field(default_factory=list)
    throughput: list[float] = field(default_factory=list)
    warm: float | None = None


def measure(options: Options, claim: Path, log: Callable[[str], None]) -> list[Figure]:
    """Per repetition one plain start, then one group start per executor (the executors' order
    flips each repetition); the last groups of each executor get one fault each; then each
    executor's two deployments on a shared compile cache."""
    plain = Plain()
    measured = {executor: Measured() for executor in options.executors}
    with load_average() as load:
        for repetition in range(options.repetitions):
            of = f"{repetition + 1}/{options.repetitions}"
            _plain_run(claim, options, plain, repetition == options.repetitions - 1, log, of)
            order = options.executors[:: -1 if repetition % 2 else 1]
            for executor in order:
                fault = options.fault_of(repetition)
                _group_run(options, claim, log, executor, measured[executor], of, fault)
        if "second-deployment" in options.scenarios:
            for executor in options.executors:
                runs = measured[executor]
                deploy = functools.partial(_deployments, claim, log, executor, runs, options.model)
                _attempt(runs, "second-deployment", log, executor, deploy)
    return _figures(options, measured, plain, load)


def _figures(
    options: Options, measured: dict[str, Measured], plain: Plain, load: Load
) -> list[Figure]:
    figures: list[Figure] = []
    for executor, runs in measured.items():
        figures += _startup_figures(executor, runs, plain, options, load)
        figures.append(_throughput_figure(executor, runs, plain, options, load))
        for fault in FAULTS:
            figures += _fault_figures(executor, fault, runs, plain, options, load)
        figures.append(_second_deployment_figure(executor, runs, plain, options, load))
    if all("worker" in runs.faults for runs in measured.values()) and len(measured) == 2:
        figures.append(_recovery_comparison(measured["mp"], measured["ray"], load))
    figures.append(_plain_warm_figure(plain, options, load))
    return figures


def _plain_run(
    claim: Path, options: Options, plain: Plain, last: bool, log: Callable[[str], None], of: str
) -> None:
    """One plain cold start; after the last one, with ``plain-warm``, its restart on the same
    cache root."""
    cache_root = Path(tempfile.mkdtemp(prefix="vllm-cache-", dir=claim.parent))
    try:
        seconds, throughput = _plain_start(claim, options, cache_root)
        plain.seconds.append(seconds)
        plain.throughput.append(throughput)
        log(f"startup {of}: plain vLLM {seconds:.1f} s, {throughput:.1f} req/s")
        if last and "plain-warm" in options.scenarios:
            plain.warm, _ = _plain_start(claim, options, cache_root, throughput=False)
            log(f"startup: plain vLLM again on the same cache root {plain.warm:.1f} s")
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)


def _group_run(
    options: Options,
    claim: Path,
    log: Callable[[str], None],
    executor: str,
    runs: Measured,
    of: str,
    fault: str | None,
) -> None:
    label = LABELS[executor]
    with _LocalGroup(claim, log, executor, options.model) as group:
        runs.starts.append(group.start())
        ready = runs.starts[-1].since_start()["head pod Ready (kubelet)"]
        head = group.pod("head")["ip"]
        runs.throughput.append(_throughput(head, HTTP_PORT, options))
        log(f"startup {of}: {label} group Ready {ready:.1f} s, {runs.throughput[-1]:.1f} req/s")
        if fault is not None:

            def kill() -> None:
                runs.faults[fault] = group.kill(fault)
                again = runs.faults[fault].stages["serving again"]
                log(f"{fault}: {label} group, {FAULT_WORDS[fault]}: serving {again:.1f} s later")

            _attempt(runs, fault, log, executor, kill)


def _attempt(
    runs: Measured, scenario: str, log: Callable[[str], None], executor: str, do: Callable[[], None]
) -> None:
    """Run one scenario; an error is recorded as its figures' ``FAILED`` (the command then exits
    1), and the rest of the run goes on: the cold starts stay measured."""
    try:
        do()
    except Exception as error:
        log(f"{scenario}: {LABELS[executor]} FAILED: {error}")
        traceback.print_exc()
        runs.failed[scenario] = f"FAILED: {error}"


def _throughput(host: str, port: int, options: Options) -> float:
    """Requests per second of the fixed load, after a short unmeasured warm-up."""
    warm = _completions(options, 2 * options.throughput_concurrency)
    loadgen.run(host, port, warm)
    return loadgen.run(host, port, _completions(options, options.throughput_requests)).throughput


def _completions(options: Options, count: int) -> loadgen.Load:
    tokens = options.throughput_tokens
    body = {
        "model": options.model.served,
        "prompt": PROMPT,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    return loadgen.Load(
        "/v1/completions",
        body,
        count,
        options.throughput_concurrency,
        tokens,
        lambda answer: int(answer["usage"]["completion_tokens"]),
    )


def _deployments(
    claim: Path,
    log: Callable[[str], None],
    executor: str,
    runs: Measured,
    model: models.BenchModel,
) -> None:
    """Two deployments of the same model with ``compileCache.shared.enabled``, one after the
    other's ``down``: the first on an empty shared folder, whose entry it publishes, the second
    seeded from it."""
    shared = claim / SHARED_CACHE_PATH  # missing: kubelet makes it, owned by the pods' user
    shutil.rmtree(claim / Path(SHARED_CACHE_PATH).parts[0], ignore_errors=True)
    try:
        for which in ("first", "second"):
            with _LocalGroup(claim, log, executor, model, shared=True) as group:
                group.tag = f"{executor}-shared-{which}"
                runs.deployments.append(group.start())
                ready = runs.deployments[-1].since_start()["head pod Ready (kubelet)"]
                log(f"second-deployment: {LABELS[executor]} {which} deployment Ready {ready:.1f} s")
                if which == "first":
                    runs.published = _wait_published(shared)
                    log(f"second-deployment: published {runs.published}")
    finally:
        shutil.rmtree(claim / Path(SHARED_CACHE_PATH).parts[0], ignore_errors=True)


def _wait_published(shared: Path) -> dict[str, float]:
    """Wait until an entry of the shared cache is marked published and nothing under the folder
    has changed for PUBLISH_QUIET_S (each pod publishes its own ranks' files after its engine is
    ready); what is there then, and how long it took. Nothing published in PUBLISH_TIMEOUT_S is
    not an error here: the second deployment then shows what that costs."""
    began = time.time()
    last: tuple[int, int] = (-1, -1)
    quiet_since = began
    while time.time() - began < PUBLISH_TIMEOUT_S:
        files = [path for path in shared.rglob("*") if path.is_file()]
        now = (len(files), sum(path.stat().st_size for path in files if path.exists()))
        if now != last:
            last, quiet_since = now, time.time()
        published = any(shared.glob("*/.published"))
        if published and time.time() - quiet_since >= PUBLISH_QUIET_S:
            break
        time.sleep(0.5)
    entries = len(list(shared.glob("*/.published")))
    return {"entries": entries, "files": last[0], "bytes": last[1], "waited_s": time.time() - began}


# The baseline ---------------------------------------------------------------------------------


def _plain_start(
    claim: Path, options: Options, cache_root: Path, throughput: bool = True
) -> tuple[float, float]:
    """Seconds from starting one plain vLLM server until it lists the model, and its throughput
    (req/s) under ``options``' load (0 without ``throughput``); it is then stopped."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(claim / options.model.folder),
        "--served-model-name",
        options.model.served,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *ENGINE_ARGS,
    ]
    # A cache root of its own (empty for a cold start): vLLM saves the model's compiled graphs
    # under ~/.cache/vllm and a second start would load them, where each pod of a new group starts
    # with an empty compile cache. HOME and TMPDIR are one folder of it, as a pod's are its /tmp:
    # torch keeps its own caches (torchinductor_<user>: AOTAutograd, FX graphs) in the temp dir,
    # and with VLLM_USE_AOT_COMPILE=0 they are what a warm start reuses (a fresh TMPDIR per start
    # made the warm restart 0.92x its cold start). The CPU build's settings are the local pods'.
    home = cache_root / "home"
    home.mkdir(exist_ok=True)
    env = {
        **os.environ,
        **_plain_env(),
        "VLLM_CACHE_ROOT": str(cache_root),
        "HOME": str(home),
        "TMPDIR": str(home),  # its engine sockets too
    }
    log_path = claim.parent / "plain-vllm.log"
    with log_path.open("wb") as output:
        started = time.time()
        process = subprocess.Popen(
            argv, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"plain vLLM exited:\n{tail(log_path.read_text())}")
            return _lists_model(f"http://127.0.0.1:{port}", options.model)

        wait_until(ready, READY_TIMEOUT_S, "plain vLLM to list the model", POLL_S)
        seconds = time.time() - started
        return seconds, _throughput("127.0.0.1", port, options) if throughput else 0.0
    finally:
        _stop_group(process)
        LOGS.mkdir(parents=True, exist_ok=True)
        name = "plain-vllm.log" if throughput else "plain-vllm-warm.log"
        shutil.copy(log_path, LOGS / name)  # to compare its phases with the group's


def _plain_env() -> dict[str, str]:
    """What the local cluster gives every vLLM of a group on this CPU build, less the fake GPU:
    a small KV cache, no usage stats, and the CPU build's compile setting (CPU_VLLM_ENV: without
    it a warm start compiles again)."""
    from multinode_llm_local.pods import CPU_VLLM_ENV

    return {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", **CPU_VLLM_ENV}


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM vLLM's server (it stops its engine core), SIGKILL its process group after 20 s."""
    process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(20)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _lists_model(base: str, model: models.BenchModel) -> bool:
    status, body = http_get(f"{base}/v1/models", timeout=1.0)
    return status == 200 and model.served.encode() in body


# The group -------------------------------------------------------------------------------------


class _LocalGroup:
    """One local cluster on the bench's prefix; ``down`` on exit, whatever happened."""

    def __init__(
        self,
        claim: Path,
        log: Callable[[str], None],
        executor: str,
        model: models.BenchModel,
        shared: bool = False,
    ) -> None:
        self.claim = claim
        self.log = log
        self.executor = executor
        self.model = model
        self.shared = shared  # compileCache.shared.enabled, on SHARED_CACHE_PATH of the claim
        self.plan: Any = None
        self.tag = executor  # the name its logs are kept under

    def __enter__(self) -> _LocalGroup:
        return self

    def __exit__(self, *_exc: object) -> None:
        from multinode_llm_local import cluster

        self._keep_logs()
        cluster.down(BENCH_LOCAL.prefix)

    def _keep_logs(self) -> None:
        """Copy every container log to bench/out/group/ (the cluster's state goes with down)."""
        LOGS.mkdir(parents=True, exist_ok=True)
        for pod in self.status().get("pods", []):
            for container in pod["containers"]:
                for run in (container.get("last_state") or {}, container):
                    if run.get("log") and Path(run["log"]).exists():
                        name = f"{self.tag}-{pod['role']}-{Path(run['log']).name}"
                        shutil.copy(run["log"], LOGS / name)

    def status(self) -> dict[str, Any]:
        from multinode_llm_local import cluster

        return cluster.status(BENCH_LOCAL.prefix) or {}

    def pod(self, role: str) -> dict[str, Any]:
        return next(p for p in self.status().get("pods", []) if p["role"] == role)

    def events(self, reason: str, role: str | None = None) -> list[dict[str, Any]]:
        names = {p["name"] for p in self.status().get("pods", []) if role in (None, p["role"])}
        return [
            e
            for e in self.status().get("events", [])
            if e["reason"] == reason and e["pod"] in names
        ]

    def start(self) -> GroupStart:
        from multinode_llm_local import cluster

        prefix, subnet = BENCH_LOCAL.at()
        options = cluster.UpOptions(
            values=[cluster.DEFAULT_VALUES, *self._values()],
            volumes={"models": self.claim},
            prefix=prefix,
            subnet=str(subnet),
            port=0,
        )
        self.plan = cluster.start(options, progress=lambda line: self.log(f"  local: {line}"))
        head = next(p for p in self.plan.pods if p.role == "head")
        engine, ready = f"http://{head.ip}:{HTTP_PORT}", f"http://{head.ip}:{STATUS_PORT}/ready"
        watch = _Watch(engine, ready, self.model)
        watch.start()
        try:
            wait_until(
                lambda: self._head_ready_or_failed(),
                READY_TIMEOUT_S,
                "the head pod to be Ready",
                0.2,
            )
        finally:
            watch.stop()
        return self._timeline(head.ip, watch)

    def _values(self) -> list[Path]:
        """The model and executor beside the built-in local values; none for the tiny model with
        Ray and without the shared cache, the chart's default (its group renders exactly as
        without them)."""
        values: dict[str, Any] = {}
        if self.model != models.TINY:  # the built-in local values serve the tiny model
            values["model"] = {
                "uri": f"pvc://models/{self.model.folder}",
                "name": self.model.served,
            }
        if self.executor != "ray":
            values["group"] = {"executor": self.executor}
        if self.shared:
            values["compileCache"] = {"shared": {"enabled": True, "path": SHARED_CACHE_PATH}}
        if not values:
            return []
        path = self.claim.parent / f"values-{self.tag}.yaml"
        path.write_text(json.dumps(values))  # JSON is YAML
        return [path]

    def _head_ready_or_failed(self) -> bool:
        head = self.pod("head")
        if head["restarts"]:
            raise RuntimeError(
                f"the head restarted during start-up: see {head['containers'][0]['log']}"
            )
        return bool(head["ready"])

    def _timeline(self, head_ip: str, watch: _Watch) -> GroupStart:
        start = GroupStart()
        started = self.events("Started")
        start.events["first container started"] = min(e["time"] for e in started)
        start.events["head pod Ready (kubelet)"] = min(
            e["time"] for e in self.events("Ready", "head")
        )
        if watch.engine_at is None or watch.ready_at is None:
            raise RuntimeError("the polls never saw the engine answer or /ready turn 200")
        start.events["engine answers (bench poll)"] = watch.engine_at
        start.events["/ready 200 (bench poll)"] = watch.ready_at
        start.events.update(self._phases(head_ip, since=0.0))
        return start

    def _phases(self, head_ip: str, since: float) -> dict[str, float]:
        """Each container's start (the kubelet's events) and each supervisor's events, at or after
        ``since`` (wall clock), under the phase names both executors share."""
        phases: dict[str, float] = {}
        head_name = self.pod("head")["name"]
        for started in self.events("Started"):
            if started["time"] >= since:
                role = "head" if started["pod"] == head_name else "worker"
                phases[f"{role} container started"] = started["time"]
        for event, at in _supervisor_timeline(f"http://{head_ip}:{STATUS_PORT}").items():
            if at < since:
                continue
            if event.startswith("node_joined:") and event != f"node_joined:{head_ip}":
                phases[f"head saw worker {event.split(':', 1)[1]}"] = at
            elif event in HEAD_PHASES:
                phases[HEAD_PHASES[event]] = at
        for worker in (p for p in self.status()["pods"] if p["role"] == "worker"):
            events = _supervisor_timeline(f"http://{worker['ip']}:{STATUS_PORT}")
            for event, phase in WORKER_PHASES.items():
                if events.get(event, -1.0) >= since:
                    phases[f"worker {worker['ip']} {phase}"] = events[event]
        return phases

    def kill(self, fault: str) -> Recovery:
        """SIGKILL the PID 1 of each container of the fault's pods (FAULT_TARGETS; the pods stay,
        so do their emptyDirs); seconds from then until each stage of the recovery and each phase
        of the restarted containers."""
        head_ip = self.pod("head")["ip"]
        before = {pod["role"]: pod["restarts"] for pod in self.status()["pods"]}
        stages: dict[str, float] = {}
        required, optional = self._recovery_checks(fault, head_ip, before, stages)
        killed = time.time()
        for pod in self.status()["pods"]:
            if pod["role"] in FAULT_TARGETS[fault]:
                for container in pod["containers"]:
                    os.kill(int(container["init_pid"]), signal.SIGKILL)

        def all_seen() -> bool:  # every check each round: the stages may come in any order
            for name, check in {**required, **optional}.items():
                if name not in stages and check():
                    stages[name] = time.time() - killed
            return required.keys() <= stages.keys()

        wait_until(all_seen, RECOVERY_TIMEOUT_S, "the group to serve again", POLL_S)
        phases = self._phases(head_ip, since=killed)
        stages.update({name: at - killed for name, at in phases.items()})
        previous = self.pod("head")["containers"][0].get("last_state") or {}
        return Recovery(stages, str(previous.get("reason", "")))

    def _recovery_checks(
        self, fault: str, head_ip: str, before: dict[str, int], stages: dict[str, float]
    ) -> tuple[dict[str, Callable[[], bool]], dict[str, Callable[[], bool]]]:
        """The stages to wait for after the fault, and those only noted when seen on the way (a
        worker that outlives a killed head, or none of the worker's own after its kill)."""
        ready_url = f"http://{head_ip}:{STATUS_PORT}/ready"
        engine_url = f"http://{head_ip}:{HTTP_PORT}"

        def restarted(role: str) -> Callable[[], bool]:
            return lambda: self.pod(role)["restarts"] > before[role]

        def after_restart(check: Callable[[], bool]) -> Callable[[], bool]:
            return lambda: "head restarted" in stages and check()

        required: dict[str, Callable[[], bool]] = {
            "head pod NotReady (kubelet)": lambda: not self.pod("head")["ready"],
            "head restarted": restarted("head"),
            "engine answers (bench poll)": after_restart(
                lambda: _lists_model(engine_url, self.model)
            ),
            "/ready 200 (bench poll)": after_restart(lambda: http_get(ready_url, 1.0)[0] == 200),
            "head pod Ready again (kubelet)": after_restart(
                lambda: bool(self.pod("head")["ready"])
            ),
            "serving again": lambda: "head pod Ready again (kubelet)" in stages and self._serves(),
        }
        optional: dict[str, Callable[[], bool]] = {"worker restarted": restarted("worker")}
        if fault == "worker":  # the head is alive: how soon it notices
            required = {"head /ready 503": lambda: http_get(ready_url, 1.0)[0] == 503, **required}
        if fault != "head":
            required["worker restarted"] = optional.pop("worker restarted")
        return required, optional

    def _serves(self) -> bool:
        """One completion through the head's Service (the local cluster's forwarded port)."""
        body = {"model": self.model.served, "prompt": "The group", "max_tokens": 4}
        return http_post_json(f"{self.plan.url}/completions", body) == 200


class _Watch:
    """Polls the head's engine and ``/ready`` every 50 ms in a thread; notes when each answers."""

    def __init__(self, engine: str, ready: str, model: models.BenchModel) -> None:
        self.engine = engine
        self.ready = ready
        self.model = model
        self.engine_at: float | None = None
        self.ready_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set() and (self.engine_at is None or self.ready_at is None):
            if self.engine_at is None and _lists_model(self.engine, self.model):
                self.engine_at = time.time()
            if self.ready_at is None and http_get(self.ready, timeout=1.0)[0] == 200:
                self.ready_at = time.time()
            self._stop.wait(POLL_S)


# A supervisor's events (health/state.py ``mark``) under the phase names both executors share, where
# the phases correspond: "group complete" is every GPU registered with Ray, or every rank held (mp).
HEAD_PHASES = {
    "ray_head_up": "Ray head up",
    "engine_started": "vLLM started",
    "group_complete": "group complete (supervisor)",
    "engine_ready": "engine ready (supervisor)",
    "ready": "ready (supervisor)",
}
WORKER_PHASES = {  # the mp worker joins before it starts vLLM (headless) with what it was given
    "joined": "joined (its supervisor)",
    "engine_started": "vLLM started (headless)",
}
EVENT_METRIC = "multinode_llm_event_seconds"


def _supervisor_timeline(base: str) -> dict[str, float]:
    """A supervisor's events (``multinode_llm_event_seconds`` on its /metrics, seconds since its
    start) in wall-clock seconds, placed by the ``uptime_s`` its /status answers."""
    from prometheus_client.parser import text_string_to_metric_families

    asked = time.time()
    status, body = http_get(f"{base}/status")
    answered = time.time()
    if status != 200:
        raise RuntimeError(f"{base}/status answered {status}")
    started = (asked + answered) / 2 - float(json.loads(body)["uptime_s"])
    status, body = http_get(f"{base}/metrics")
    if status != 200:
        raise RuntimeError(f"{base}/metrics answered {status}")
    return {
        sample.labels["event"]: started + sample.value
        for family in text_string_to_metric_families(body.decode())
        if family.name == EVENT_METRIC
        for sample in family.samples
    }


# Figures ---------------------------------------------------------------------------------------


def kserve_ready_delay() -> float:
    """Expected seconds from engine ready to Ready with KServe's probes (engine ready after 60 s):
    half a startup period, one exec, half a readiness period, one more exec."""
    return (
        KSERVE_STARTUP["period"] / 2
        + KSERVE_EXEC_PROBE_S
        + KSERVE_READINESS_PERIOD_S / 2
        + KSERVE_EXEC_PROBE_S
    )


def _config(executor: str, plain: Plain, options: Options) -> dict[str, Any]:
    """What every figure of one executor's group carries: the executor, the group, the plain
    server's runs (its baseline)."""
    values = "built-in local values"
    if executor != "ray":
        from multinode_llm_local.pods import MP_ENV

        env = ", ".join(f"{name}={value}" for name, value in MP_ENV.items())
        values += f", group.executor={executor}, the local cluster's mp pod env {env}"
    return {
        "executor": executor,
        "group": f"the chart's PP=2 TP=1 group ({values}: probes every 2 s)",
        "model": options.model.described,
        "engine_args": list(ENGINE_ARGS),
        "plain": "python -m vllm.entrypoints.openai.api_server, default executor, started alone, "
        "with an empty VLLM_CACHE_ROOT, HOME and TMPDIR (no compiled graphs from an earlier "
        "start: torch keeps its own in the temp dir) and the local pods' CPU-build environment",
        "plain_env": _plain_env(),
        "plain_s": plain.seconds,
    }


def _startup_figures(
    executor: str, runs: Measured, plain: Plain, options: Options, load: Load
) -> list[Figure]:
    label = LABELS[executor]
    timelines = [start.since_start() for start in runs.starts]
    config = {
        **_config(executor, plain, options),
        "repetitions": len(timelines),
        "timelines_s": timelines,
    }
    plain_s = statistics.median(plain.seconds)

    def median(pick: Callable[[dict[str, float]], float]) -> float:
        return statistics.median(pick(t) for t in timelines)

    figures = [
        Figure(
            benchmark="startup",
            name=f"PP=2 {label} group: first container started -> head pod Ready",
            unit="s",
            value=median(lambda t: t["head pod Ready (kubelet)"]),
            baseline=plain_s,
            baseline_name="one plain vLLM server: start -> lists the model",
            config={**config, "row": ROW_STARTUP},
            load=load,
            goal=GROUP_READY_GOAL,
            runs=[
                {"group": t["head pod Ready (kubelet)"], "plain": p}
                for t, p in zip(timelines, plain.seconds, strict=True)
            ],
        ),
        Figure(
            benchmark="startup",
            name=f"{label}: our share of it: container start -> vLLM start, plus engine answers "
            "-> pod Ready",
            unit="s",
            value=median(_our_share),
            baseline=median(lambda t: t["head pod Ready (kubelet)"]),
            baseline_name=f"the group's whole start-up (the rest is vLLM's own, {label} executor)",
            config=config,
            load=load,
        ),
        Figure(
            benchmark="startup",
            name=f"{label}: engine answers -> our /ready 200 (supervisor's detection)",
            unit="s",
            value=median(lambda t: t["/ready 200 (bench poll)"] - t["engine answers (bench poll)"]),
            baseline=kserve_ready_delay(),
            baseline_name="KServe's runtime by construction (probe periods, exec probes)",
            config=config,
            load=load,
            goal=READY_DETECTION_GOAL,
        ),
        Figure(
            benchmark="startup",
            name=f"{label}: engine answers -> head pod Ready (kubelet, startup probe every 1 s)",
            unit="s",
            value=median(
                lambda t: t["head pod Ready (kubelet)"] - t["engine answers (bench poll)"]
            ),
            baseline=kserve_ready_delay(),
            baseline_name="KServe's runtime by construction",
            config=config,
            load=load,
        ),
    ]
    if executor == "ray":  # an mp worker's join is the head's grant: there is nothing to notice
        figures.append(_join_figure(timelines, config, load))
    return figures


def _join_figure(timelines: list[dict[str, float]], config: dict[str, Any], load: Load) -> Figure:
    joins = [
        max(
            t[seen] - t[f"worker {seen.split()[-1]} joined (its supervisor)"]
            for seen in t
            if seen.startswith("head saw worker ")
        )
        for t in timelines
    ]
    return Figure(
        benchmark="startup",
        name="Ray: worker joined -> head noticed it",
        unit="s",
        value=statistics.median(joins),
        baseline=KSERVE_NODE_POLL_S / 2,
        baseline_name="KServe's head: registered-nodes poll every 2 s (expected delay)",
        config=config,
        load=load,
    )


def _throughput_figure(
    executor: str, runs: Measured, plain: Plain, options: Options, load: Load
) -> Figure:
    label = LABELS[executor]
    load_text = (
        f"completions c={options.throughput_concurrency} {options.throughput_tokens} tok, "
        f"{options.throughput_requests} requests"
    )
    return Figure(
        benchmark="throughput",
        name=f"PP=2 {label} group: {load_text}",
        unit="req/s",
        value=statistics.median(runs.throughput),
        baseline=statistics.median(plain.throughput),
        baseline_name="one plain vLLM server (the same load)",
        config={
            **_config(executor, plain, options),
            "row": ROW_THROUGHPUT,
            "load": load_text,
            "client": "bench.loadgen on the host; the group's head over the bridge, plain vLLM "
            "on loopback; an unmeasured warm-up first",
        },
        load=load,
        runs=[
            {"group": g, "plain": p} for g, p in zip(runs.throughput, plain.throughput, strict=True)
        ],
        note="the PP=2 group shares the two cores the plain server has to itself",
    )


def _our_share(timeline: dict[str, float]) -> float:
    """What the supervisor adds to a start: before it launches vLLM, and after vLLM answers.
    Everything between is vLLM starting (its Ray workers' imports, model load, warm-up), which
    the wait for the workers overlaps."""
    before = timeline["vLLM started"] - timeline["head container started"]
    after = timeline["head pod Ready (kubelet)"] - timeline["engine answers (bench poll)"]
    return before + after


def kserve_recovery_detection() -> float:
    """KServe's head liveness: two failed probes 5 s apart, each an exec of 3.7 s."""
    return KSERVE_LIVENESS["period"] * KSERVE_LIVENESS["failures"] + KSERVE_EXEC_PROBE_S


def _fault_figures(
    executor: str, fault: str, runs: Measured, plain: Plain, options: Options, load: Load
) -> list[Figure]:
    """The fault's figure against its baseline (a plain cold start, or for a restart the group's
    own cold start), its stages and phases in ``stages_s``; for a killed worker also how soon the
    head noticed."""
    label = LABELS[executor]
    name = f"{label}: {FAULT_WORDS[fault]} -> group serving again"
    baseline_name, baseline = "one plain vLLM server's cold start", statistics.median(plain.seconds)
    if fault == "restart":
        cold = [start.since_start()["head pod Ready (kubelet)"] for start in runs.starts]
        baseline_name, baseline = (
            f"the {label} group's cold start to Ready",
            statistics.median(cold),
        )
    goal, row = RECOVERY_GOALS[fault], ROWS[fault]
    recovery = runs.faults.get(fault)
    if recovery is None:
        why = runs.failed.get(fault) or options.left_out(fault)
        return [replace(skipped("recovery", name, "s", baseline_name, why), goal=goal, load=load)]
    targets = " and ".join(f"the {role} container's" for role in FAULT_TARGETS[fault])
    config = {
        **_config(executor, plain, options),
        "row": row,
        "scenario": fault,
        "fault": f"SIGKILL to {targets} PID 1 (its whole PID namespace dies; the pod and its "
        "emptyDirs stay, the kubelet restarts the container)",
        "stages_s": recovery.stages,
        "stages_title": f"Stages after {FAULT_WORDS[fault]} in the {label} group (seconds after "
        "the kill; the phases are the restarted containers')",
        "head_previous_container_ended": recovery.how,
    }
    if fault == "restart":
        config["cold_starts_s"] = cold
    figures = [
        Figure(
            benchmark="recovery",
            name=name,
            unit="s",
            value=recovery.stages["serving again"],
            baseline=baseline,
            baseline_name=baseline_name,
            config=config,
            load=load,
            goal=goal,
            note="the head restarts the whole group: a new vLLM start, with the compile cache "
            "the pods' emptyDirs kept, is the floor",
        )
    ]
    if fault == "worker":
        detection = {k: v for k, v in config.items() if k not in ("row", "stages_s")}
        figures.append(
            Figure(
                benchmark="recovery",
                name=f"{label}: worker killed -> head unready (our /ready 503)",
                unit="s",
                value=recovery.stages["head /ready 503"],
                baseline=kserve_recovery_detection(),
                baseline_name="KServe's liveness by construction (2 x 5 s + exec)",
                config=detection,
                load=load,
            )
        )
    return figures


def _second_deployment_figure(
    executor: str, runs: Measured, plain: Plain, options: Options, load: Load
) -> Figure:
    label = LABELS[executor]
    name = f"{label}: second deployment of the same model (shared compile cache) -> head pod Ready"
    baseline_name = "the first deployment, on an empty shared compile cache"
    if len(runs.deployments) < 2:
        why = runs.failed.get("second-deployment") or options.left_out("second-deployment")
        figure = skipped("startup", name, "s", baseline_name, why)
        return replace(figure, goal=SECOND_DEPLOYMENT_GOAL, load=load)
    first, second = (start.since_start() for start in runs.deployments)
    return Figure(
        benchmark="startup",
        name=name,
        unit="s",
        value=second["head pod Ready (kubelet)"],
        baseline=first["head pod Ready (kubelet)"],
        baseline_name=baseline_name,
        config={
            **_config(executor, plain, options),
            "row": ROWS["second-deployment"],
            "scenario": "second-deployment",
            "values": f"compileCache.shared.enabled=true, path {SHARED_CACHE_PATH} of the model's "
            "claim; `down` between the two",
            "published": runs.published,
            "deployments_s": {"first": first, "second": second},
        },
        load=load,
        goal=SECOND_DEPLOYMENT_GOAL,
    )


def _plain_warm_figure(plain: Plain, options: Options, load: Load) -> Figure:
    name = "plain vLLM: restart on the same VLLM_CACHE_ROOT -> lists the model"
    baseline_name = "its cold start on that cache root, empty"
    if plain.warm is None:
        figure = skipped("startup", name, "s", baseline_name, options.left_out("plain-warm"))
        return replace(figure, load=load)
    return Figure(
        benchmark="startup",
        name=name,
        unit="s",
        value=plain.warm,
        baseline=plain.seconds[-1],
        baseline_name=baseline_name,
        config={
            "plain": "python -m vllm.entrypoints.openai.api_server, default executor, started "
            "alone, then again with the cache root the first start filled",
            "env": _plain_env(),
            "plain_s": plain.seconds,
        },
        load=load,
        note="a reference: the floor a restart with a warm cache can reach on this machine "
        "(the issue measured 0.60x before it was filed)",
    )


def _recovery_comparison(mp: Measured, ray: Measured, load: Load) -> Figure:
    return Figure(
        benchmark="recovery",
        name="worker killed -> group serving again: mp against Ray",
        unit="s",
        value=mp.faults["worker"].stages["serving again"],
        baseline=ray.faults["worker"].stages["serving again"],
        baseline_name="the Ray group's recovery, same run",
        # A row of the side-by-side table of its own executor: only its goal shows there.
        config={
            "executor": "mp / Ray",
            "row": ROW_RECOVERY,
            "mp_stages_s": mp.faults["worker"].stages,
            "ray_stages_s": ray.faults["worker"].stages,
        },
        load=load,
        goal=MP_RECOVERY_GOAL,
    )
