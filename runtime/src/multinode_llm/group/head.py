"""The head's supervisor (`multinode-llm head`, group/head_command.py): the Ray head and vLLM's
OpenAI server, supervised as one group.

1. Start the Ray head (`ray start --head --block`) on POD_IP, pinned ports, this pod's GPUs.
2. Start vLLM right away, beside Ray (``--early-engine-start``, the default): its imports,
   tokenizer and config loading overlap Ray's start and the wait for the workers; Ray's driver
   waits for the GCS, and vLLM's Ray executor for the GPUs it needs.
3. Wait until RAY_NODE_COUNT nodes and TP x PP GPUs are registered, with a deadline and capped
   backoff, logging progress; at the deadline, stop everything and exit 1 naming what is missing.
4. Watch: exit 1 when Ray or vLLM exits, or at once when a node of the formed group is lost
   (group/head_watch.py); keep the probes' facts fresh (engine answers, nodes alive).

With ``--executor mp`` (``MULTINODE_LLM_EXECUTOR=mp``) there is no Ray: ``group/mp_head.py`` runs
the same steps on vLLM's own multi-node executor, with the rank roster in place of Ray's nodes.
This module keeps what both share: the staged model, the engine's start, the wait for the group
with its deadline, the monitor loop and the children's checks.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from multinode_llm import compile_cache
from multinode_llm.config import HeadConfig
from multinode_llm.group import ray_node
from multinode_llm.group.cluster import ClusterView
from multinode_llm.group.head_watch import GroupWatch
from multinode_llm.group.network import collective_env
from multinode_llm.group.process import Child
from multinode_llm.group.progress import ProgressLog, backoff
from multinode_llm.group.supervisor import TICK_S, Deadline, GroupError, Supervisor, port_open
from multinode_llm.health import restarts
from multinode_llm.serving.command import engine_command, engine_env
from multinode_llm.staging.layout import NotStagedError, read_ref, staged_model

log = logging.getLogger("multinode_llm.head")

ENGINE_STOP_GRACE_S = 10.0  # in-flight requests finish; fits kubelet's default 30 s grace period
FAILED_STOP_GRACE_S = 2.0  # a failed group has nothing to finish; vLLM ignores SIGTERM mid-start
# Until vLLM first answers, the monitor ticks this often: the pod is Ready a fraction of a second
# after the engine, and asking a vLLM that does not listen yet costs a refused connection.
ENGINE_POLL_S = 0.2
MODEL_POLL_S = 2.0  # how often the head looks for the staged model while the download runs


class Progress(Protocol):
    """How far the group is from complete, in words a person can act on."""

    @property
    def complete(self) -> bool: ...

    def line(self) -> str: ...

    def missing(self) -> str: ...


class Watch(Protocol):
    """Refreshes the probes' facts once per tick; raises GroupError when the group is lost."""

    async def refresh(self, engine: Child | None) -> Progress: ...

    async def close(self) -> None: ...


class HeadSupervisor(Supervisor):
    def __init__(self, config: HeadConfig) -> None:
        super().__init__("head", config.node.status_port, config.node.restarts_file)
        self.config = config
        self.state.group_spec = config.group_spec
        self.env: dict[str, str] = {}
        self.ray: Child | None = None
        self.engine: Child | None = None
        self.view: ClusterView | None = None
        self.watch: Watch | None = None

    async def prepare(self) -> Deadline:
        """What both executors do first: the log of derived values, the staged model, the env."""
        node = self.config.node
        for line in node.derived:
            self.log.info("derived %s", line)
        model_root = Path(self.config.model)  # the staged model's root, before its snapshot
        if self.config.model_revision:
            self.config = replace(self.config, model=str(await self._staged_model()))
        deadline = Deadline(node.wait_timeout_s)
        self.env = {**os.environ, **collective_env(node.pod_ip, os.environ)}
        await self._prepare_compile_cache(model_root)
        return deadline

    async def _prepare_compile_cache(self, model_root: Path) -> None:
        """VLLM_CACHE_ROOT for vLLM (and Ray's workers: vLLM's Ray executor copies it to them),
        published once the engine is ready: compiling is done by then (compile_cache.py)."""
        cache = compile_cache.for_pod(os.environ, None, model_root, self.config.model_revision)
        if cache is None:
            return
        self.background.append(await cache.start(self._engine_was_ready))
        self.env.update(cache.env)
        self.state.compile_cache_key = cache.key.to_dict()  # the workers prepare the same entry

    async def _engine_was_ready(self) -> bool:
        return "engine_ready" in self.state.timeline

    async def main(self) -> int:
        node = self.config.node
        deadline = await self.prepare()
        self.state.phase = "starting Ray"
        self.ray = await ray_node.start(node, None, self.env)
        if self.config.early_engine_start:
            # vLLM spends seconds on imports before it connects to Ray, and Ray's driver then
            # waits about 20 s for the GCS: the GCS starts meanwhile, nothing waits for it first.
            await self.start_engine()
        await self._wait_for_port(node.ray_ports.gcs, "the Ray head's GCS", deadline)
        await self._wait_for_port(node.ray_ports.node_manager, "the Ray head's raylet", deadline)
        self.state.mark("ray_head_up")
        self.view = ClusterView(f"{node.pod_ip}:{node.ray_ports.gcs}")
        try:
            await self.view.connect()
        # Ray raises its own types; whatever it is, the head cannot go on.
        except Exception as error:
            raise GroupError(
                f"could not connect to the Ray head at {self.view.address}: {error}",
                cause=restarts.ENGINE_EXITED,
            ) from error
        watch = self.watch = GroupWatch(self.config, self.state, self.view)
        await self.wait_for_group(watch, deadline)
        if self.engine is None:
            await self.start_engine()
        return await self.monitor(watch)

    async def cleanup(self) -> None:
        if self.engine is not None:
            await self.engine.stop(FAILED_STOP_GRACE_S if self.failed else ENGINE_STOP_GRACE_S)
        if self.view is not None and self.ray is not None and self.ray.returncode is None:
            await self.view.close()  # with Ray gone, the driver could only wait for a dead GCS
        if self.ray is not None:
            await self.ray.stop(
                ray_node.FAILED_STOP_GRACE_S if self.failed else ray_node.STOP_GRACE_S
            )
        if self.watch is not None:
            await self.watch.close()

    async def _staged_model(self) -> Path:
        """The snapshot MODEL_REVISION was staged as, once its download is complete.

        The group may start before the download Job ends (Helm creates both at once): the head
        waits, saying what it waits for; kubelet's startup budget bounds the wait. A snapshot whose
        manifest names files that are missing or cut is refused at once, naming them.
        """
        root, revision = Path(self.config.model), self.config.model_revision
        self.state.phase = "waiting for the model"
        progress_log = ProgressLog()
        while True:
            try:
                snapshot = staged_model(root, revision)
            except NotStagedError as waiting:
                if read_ref(root, revision) is not None:
                    raise GroupError(str(waiting), cause=None) from None  # a refused snapshot
                if progress_log.due():
                    log.info("waiting for the model download: %s", waiting)
                await self.pause(MODEL_POLL_S)
                continue
            log.info("serving %s (%s, revision %s)", snapshot, root, revision)
            return snapshot

    async def _wait_for_port(self, port: int, what: str, deadline: Deadline) -> None:
        """Until this pod's ``port`` accepts connections (`ray start` is still starting)."""
        while not await port_open(self.config.node.pod_ip, port):
            self.check_children()
            if deadline.passed():
                raise GroupError(
                    f"{what} did not start within {deadline.seconds:.0f} s",
                    cause=restarts.GROUP_TIMEOUT,
                )
            await self.pause(0.1)

    async def start_engine(self) -> None:
        argv = engine_command(self.config)
        self.engine = await Child.start("vLLM", argv, engine_env(self.config, self.env))
        self.state.mark("engine_started")

    async def wait_for_group(self, watch: Watch, deadline: Deadline) -> None:
        """Wait for every node and GPU; GroupError at the deadline."""
        self.state.phase = "waiting for the group"
        delays = backoff()
        progress_log = ProgressLog()
        while True:
            self.check_children()
            progress = await watch.refresh(self.engine)
            if progress.complete:
                log.info("group complete after %.1f s: %s", deadline.elapsed, progress.line())
                return
            line = progress.line()
            if progress_log.due(line):
                log.info("%s (%.0f s of %.0f s)", line, deadline.elapsed, deadline.seconds)
            if deadline.passed():
                raise GroupError(
                    f"the group did not form within {deadline.seconds:.0f} s "
                    f"(--wait-timeout, GROUP_WAIT_TIMEOUT): {progress.missing()}; "
                    f"{self.where_to_look()}",
                    cause=restarts.GROUP_TIMEOUT,
                )
            await self.pause(min(next(delays), max(deadline.remaining, 0.05)))

    def where_to_look(self) -> str:
        node = self.config.node
        pods = "every worker pod"
        if self.config.isvc_name:  # KServe labels worker pods app=isvc.<name>-predictor-worker
            pods += f" (kubectl get pods -l app=isvc.{self.config.isvc_name}-predictor-worker)"
        gcs = f"{node.pod_ip}:{node.ray_ports.gcs}"
        return f"check that {pods} runs and reaches the head's Ray GCS at {gcs}"

    async def monitor(self, watch: Watch) -> int:
        self.state.phase = "serving"
        while True:
            self.check_children()
            await watch.refresh(self.engine)
            await self.pause(TICK_S if "engine_ready" in self.state.timeline else ENGINE_POLL_S)

    def check_children(self) -> None:
        for child, what in ((self.ray, "the Ray head"), (self.engine, "vLLM's OpenAI server")):
            if child is not None and child.returncode is not None:
                raise GroupError(
                    f"{what} exited with code {child.returncode}; exiting so that the pod restarts "
                    "and the group restarts with it (its log is above)",
                    cause=restarts.ENGINE_EXITED,
                )
