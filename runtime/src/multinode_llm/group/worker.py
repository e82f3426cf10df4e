"""The worker's supervisor (`multinode-llm worker`, group/worker_command.py): join the head's Ray
cluster, and leave loudly when the head is gone.

1. Wait for the head's Ray GCS (HEAD_SVC.POD_NAMESPACE.svc.cluster.local:RAY_PORT) with a deadline
   and capped backoff, logging progress, and for a head run that can still take a node (its
   /status: its group not formed yet, the head not stopping after a failure).
2. Join it with `ray start --address ... --block` and this pod's GPUs.
3. Watch: exit 1 when Ray on this pod exits, when the head's GCS refuses connections (the head's
   container is gone: Ray's raylet would wait a minute for it) or stops answering for
   ``HEAD_LOSS_GRACE_S``, when the head's name points at another address (a new head pod), or when
   the head's supervisor restarted (another boot id on its status port).
   Ray workers cannot rejoin a restarted head's group, so the pod must restart and join afresh.

With ``--executor mp`` (``MULTINODE_LLM_EXECUTOR=mp``) group/mp_worker.py runs instead: a rank
from the head's roster and vLLM headless, no Ray.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from multinode_llm import compile_cache
from multinode_llm.config import WorkerConfig
from multinode_llm.group import ray_node
from multinode_llm.group.network import collective_env
from multinode_llm.group.process import Child
from multinode_llm.group.progress import ProgressLog, backoff
from multinode_llm.group.supervisor import (
    FINAL_PHASES,
    TICK_S,
    Deadline,
    GroupError,
    Reach,
    Supervisor,
    http_ok,
    port_open,
    reach,
    resolve,
)
from multinode_llm.health import restarts
from multinode_llm.health.state import WorkerFacts

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("multinode_llm.worker")

HEAD_LOSS_GRACE_S = 5.0  # a head silent this long is gone: a blip shorter than this is tolerated
LOST_HEAD_STOP_GRACE_S = 1.0


class WorkerSupervisor(Supervisor):
    def __init__(self, config: WorkerConfig) -> None:
        super().__init__("worker", config.node.status_port, config.node.restarts_file)
        self.config = config
        self.ray: Child | None = None
        self.ray_stop_grace_s = ray_node.STOP_GRACE_S
        self.head_boot_id: str | None = None
        self._http: aiohttp.ClientSession | None = None
        self.facts = WorkerFacts(head=config.head_address)

    async def main(self) -> int:
        node = self.config.node
        for line in node.derived:
            self.log.info("derived %s", line)
        head_ip = await self._wait_for_head(Deadline(node.wait_timeout_s))
        self.state.mark("head_reachable")
        env = {**os.environ, **collective_env(node.pod_ip, os.environ)}
        env.update(await self._prepare_compile_cache(head_ip))
        self.state.phase = "joining"
        self.ray = await ray_node.start(node, f"{head_ip}:{node.ray_ports.gcs}", env)
        return await self._monitor(self.ray, head_ip)

    async def _prepare_compile_cache(self, head_ip: str) -> dict[str, str]:
        """The head's compile-cache entry, prepared here before Ray's workers start on this pod.

        vLLM's Ray executor gives its workers the driver's VLLM_* variables, so they compile
        into the head's VLLM_CACHE_ROOT whatever this pod sets: the entry is the head's (its
        /status names the key; its Ray GCS answers only after it prepared it). The head is Ready
        only once every worker compiled: then this pod publishes what it wrote.
        """
        status = await self._head_status(head_ip)
        key = compile_cache.EntryKey.from_dict((status or {}).get("compile_cache_key"))
        cache = compile_cache.for_pod(os.environ, key)
        if cache is None:
            return {}
        ready_url = f"http://{head_ip}:{self.config.node.status_port}/ready"
        self.background.append(await cache.start(lambda: http_ok(ready_url)))
        return cache.env

    async def cleanup(self) -> None:
        if self.ray is not None:
            await self.ray.stop(self.ray_stop_grace_s)
        if self._http is not None:
            await self._http.close()

    async def _wait_for_head(self, deadline: Deadline) -> str:
        """The head's IP once its GCS accepts connections; GroupError at the deadline."""
        config, delays = self.config, backoff()
        self.state.phase = "waiting for the head"
        self.state.update(self.facts)
        progress_log = ProgressLog()
        while True:
            ip = await resolve(config.head_host)
            why = "its name does not resolve" if ip is None else f"{ip} does not accept connections"
            if ip is not None and await port_open(ip, config.node.ray_ports.gcs):
                closed = await self._head_run_closed(ip)
                if closed is None:
                    log.info("the head's Ray GCS answers at %s (%s)", config.head_address, ip)
                    return ip
                why = closed
            if deadline.passed():
                raise GroupError(
                    f"the head's Ray GCS at {config.head_address} did not answer within "
                    f"{deadline.seconds:.0f} s (--wait-timeout, GROUP_WAIT_TIMEOUT): {why}; check "
                    "that the head pod runs and that HEAD_SVC and RAY_PORT name it",
                    cause=restarts.GROUP_TIMEOUT,
                )
            if progress_log.due():
                log.info(
                    "waiting for the head's Ray GCS at %s: %s (%.0f s of %.0f s)",
                    config.head_address,
                    why,
                    deadline.elapsed,
                    deadline.seconds,
                )
            await self.pause(min(next(delays), max(deadline.remaining, 0.05)))

    async def _head_run_closed(self, head_ip: str) -> str | None:
        """Why the head's current run cannot take this pod; None when it can (or does not say).

        A Ray group never takes a node once it formed: a head whose group formed without this pod
        (it lost this pod's previous run and is about to restart) or that is stopping after a
        failure would lose this pod again with its own restart, and kubelet's back-off before
        each restart of this container grows. This pod waits for the head's next run instead.
        """
        status = await self._head_status(head_ip)
        if status is None:
            return None
        phase, facts = status.get("phase"), status.get("facts")
        if phase in FINAL_PHASES:
            return (
                f"the head at {head_ip} is stopping after a failure (phase {phase}); waiting for "
                "its next run"
            )
        if isinstance(facts, dict) and facts.get("group_formed"):
            return (
                f"the head at {head_ip} formed its group without this pod and is about to "
                "restart; waiting for its next run"
            )
        return None

    async def _monitor(self, ray: Child, head_ip: str) -> int:
        node = self.config.node
        silent_since: float | None = None
        while True:
            if ray.returncode is not None:
                raise GroupError(
                    f"Ray on this worker exited with code {ray.returncode} (its log is above)",
                    cause=restarts.ENGINE_EXITED,
                )
            head_ok, joined = await asyncio.gather(
                self._check_head(head_ip), port_open(node.pod_ip, node.ray_ports.node_manager)
            )
            silent_since = None if head_ok else (silent_since or time.monotonic())
            if silent_since is not None and time.monotonic() - silent_since >= HEAD_LOSS_GRACE_S:
                # Ray's graceful stop would try to drain this node through the dead head's GCS.
                self.ray_stop_grace_s = LOST_HEAD_STOP_GRACE_S
                raise GroupError(
                    f"lost the head: its Ray GCS at {head_ip}:{node.ray_ports.gcs} has not "
                    f"answered for {HEAD_LOSS_GRACE_S:.0f} s; exiting so that this pod restarts "
                    "and joins the new head",
                    cause=restarts.HEAD_LOST,
                )
            self.facts = WorkerFacts(
                ray_started=True,
                ray_running=True,
                joined=joined or self.facts.joined,
                head_reachable=head_ok,
                head=self.config.head_address,
            )
            self.state.update(self.facts)
            if self.facts.joined:
                self.state.mark("joined")
                self.state.phase = "joined"
            await self.pause(TICK_S)

    async def _check_head(self, head_ip: str) -> bool:
        """Whether the head this worker joined still answers; GroupError when it is gone or was
        replaced.

        Ray workers cannot join a new head's cluster from the old one, so a new head pod (its name
        resolves elsewhere), a restarted head supervisor (another boot id on its status port) or a
        GCS that refuses connections (the head's Ray is gone for good) means this pod must restart
        at once; only a GCS that does not answer in time gets HEAD_LOSS_GRACE_S.
        """
        moved = await resolve(self.config.head_host)
        if moved is not None and moved != head_ip:
            self.ray_stop_grace_s = LOST_HEAD_STOP_GRACE_S
            raise GroupError(
                f"the head moved from {head_ip} to {moved} (a new head pod): exiting so that "
                "this pod restarts and joins the new head's group",
                cause=restarts.HEAD_LOST,
            )
        boot_id = await self._head_boot_id(head_ip)
        if boot_id is not None:
            self.head_boot_id = self.head_boot_id or boot_id
            if boot_id != self.head_boot_id:
                self.ray_stop_grace_s = LOST_HEAD_STOP_GRACE_S
                raise GroupError(
                    f"the head at {head_ip} restarted (a new Ray cluster): exiting so that this "
                    "pod restarts and joins it",
                    cause=restarts.HEAD_LOST,
                )
        gcs = self.config.node.ray_ports.gcs
        answer = await reach(head_ip, gcs)
        if answer is Reach.REFUSED:  # conclusive at once, as the mp worker's refused heartbeat
            self.ray_stop_grace_s = LOST_HEAD_STOP_GRACE_S
            self.facts = replace(
                self.facts, ray_started=True, ray_running=True, head_reachable=False
            )
            self.state.update(self.facts)  # the probes say so while Ray stops
            raise GroupError(
                f"lost the head: its Ray GCS at {head_ip}:{gcs} refuses connections (the head's "
                "container is gone); exiting so that this pod restarts and joins the new head",
                cause=restarts.HEAD_LOST,
            )
        return answer is Reach.OPEN

    async def _head_boot_id(self, head_ip: str) -> str | None:
        """The head supervisor's boot id from its status port; None when it does not answer."""
        status = await self._head_status(head_ip)
        boot_id = status.get("boot_id") if status is not None else None
        return str(boot_id) if boot_id else None

    async def _head_status(self, head_ip: str) -> dict[str, object] | None:
        """The head supervisor's /status; None when it does not answer with one."""
        import aiohttp  # the worker's status server has it loaded already

        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0))
        url = f"http://{head_ip}:{self.config.node.status_port}/status"
        try:
            async with self._http.get(url) as answer:
                status = await answer.json() if answer.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        return status if isinstance(status, dict) else None
