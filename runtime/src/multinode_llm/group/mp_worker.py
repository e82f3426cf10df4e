"""`multinode-llm worker --executor mp`: take a rank from the head, run it headless, keep its lease.

1. Join: ``POST /group/join`` on the head's status port (HEAD_SVC.POD_NAMESPACE.svc...:8081) with
   this run's instance id, retried with capped backoff until the deadline (the head may not run
   yet, or may not hand out ranks yet). The answer is the rank, the epoch, the master address and
   vLLM's arguments for this rank (the head's own command line: KServe gives workers none of it).
2. Run vLLM headless with them (``python -m multinode_llm.serving.headless``).
3. Heartbeat every second. Exit 1 when the head answers 410 (it restarted, or ended the group:
   this rank is void), when its status port refuses connections (the head container is gone),
   when it is silent for the lease, when its name points at a new pod, or when this vLLM exits
   (saying so to the head first, best effort). A new run joins afresh with a new instance id.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from multinode_llm import compile_cache
from multinode_llm.config import WorkerConfig
from multinode_llm.group.network import collective_env
from multinode_llm.group.process import Child
from multinode_llm.group.progress import ProgressLog, backoff
from multinode_llm.group.roster import DEFAULT_LEASE_S, HEARTBEAT_PATH, JOIN_PATH, LEAVE_PATH
from multinode_llm.group.supervisor import Deadline, GroupError, Supervisor, http_ok, resolve
from multinode_llm.health import restarts
from multinode_llm.health.state import WorkerFacts
from multinode_llm.serving.command import headless_command

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("multinode_llm.worker")

HEARTBEAT_S = 1.0  # well inside the head's lease (DEFAULT_LEASE_S)
REQUEST_TIMEOUT_S = 1.0
ENGINE_STOP_GRACE_S = 5.0  # vLLM's headless ranks exit on SIGTERM within a second or two
LOST_HEAD_STOP_GRACE_S = 1.0  # the group is gone: nothing to finish


@dataclass(frozen=True)
class Grant:
    """The head's answer to a join: this run's rank in the head's epoch."""

    epoch: str
    rank: int
    nnodes: int
    master_addr: str
    master_port: int
    engine_args: tuple[str, ...]
    compile_cache_key: compile_cache.EntryKey | None = None  # the head's; None from an old head


class HeadAnswer(Exception):  # noqa: N818 - an answer, raised out of a request
    """The head answered, but not with success: ``status`` and its ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class MpWorkerSupervisor(Supervisor):
    def __init__(self, config: WorkerConfig) -> None:
        super().__init__("worker", config.node.status_port, config.node.restarts_file)
        self.config = config
        self.instance = uuid.uuid4().hex  # this run: a restarted worker is a new instance
        self.grant: Grant | None = None
        self.head_ip: str | None = None
        self.engine: Child | None = None
        self.engine_stop_grace_s = ENGINE_STOP_GRACE_S
        self.head_gone = False  # no leave to send
        self._http: aiohttp.ClientSession | None = None
        self.facts = WorkerFacts(executor="mp", head=self.head_address)

    @property
    def head_address(self) -> str:
        return f"{self.config.head_host}:{self.config.node.status_port}"

    async def main(self) -> int:
        node = self.config.node
        for line in node.derived:
            self.log.info("derived %s", line)
        grant = await self._join(Deadline(node.wait_timeout_s))
        self.state.mark("joined")
        env = {**os.environ, **collective_env(node.pod_ip, os.environ)}
        cache = compile_cache.for_pod(os.environ, grant.compile_cache_key)
        if cache is not None:
            self.background.append(await cache.start(self._head_ready))
            env.update(cache.env)
        argv = headless_command(grant.engine_args)
        self.engine = await Child.start(f"vLLM (headless, rank {grant.rank})", argv, env)
        self.state.mark("engine_started")
        return await self._monitor(grant, self.engine)

    async def cleanup(self) -> None:
        if self.engine is not None:
            await self.engine.stop(self.engine_stop_grace_s)
        if self.grant is not None and not self.head_gone:
            await self._say_leaving(self.grant, "the worker stopped")
        if self._http is not None:
            await self._http.close()

    # Joining ----------------------------------------------------------------------------------

    async def _join(self, deadline: Deadline) -> Grant:
        """This run's rank from the head; GroupError at the deadline, or when no head has ranks."""
        self.state.phase = "waiting for a rank"
        self.state.update(self.facts)
        delays, progress_log = backoff(), ProgressLog()
        while True:
            why = await self._try_join()
            if self.grant is not None:
                grant = self.grant
                log.info(
                    "joined as rank %d of %d (epoch %s, master %s:%d)",
                    grant.rank,
                    grant.nnodes,
                    grant.epoch,
                    grant.master_addr,
                    grant.master_port,
                )
                self.facts = WorkerFacts(
                    executor="mp",
                    head=self.head_address,
                    rank=grant.rank,
                    head_reachable=True,
                    joined=True,
                )
                self.state.update(self.facts)
                return grant
            if deadline.passed():
                raise GroupError(
                    f"the head at {self.head_address} granted no rank within "
                    f"{deadline.seconds:.0f} s (--wait-timeout, GROUP_WAIT_TIMEOUT): {why}; check "
                    "that the head pod runs with MULTINODE_LLM_EXECUTOR=mp and that HEAD_SVC "
                    "names it",
                    cause=restarts.GROUP_TIMEOUT,
                )
            if progress_log.due():
                log.info(
                    "waiting for a rank from the head at %s: %s (%.0f s of %.0f s)",
                    self.head_address,
                    why,
                    deadline.elapsed,
                    deadline.seconds,
                )
            await self.pause(min(next(delays), max(deadline.remaining, 0.05)))

    async def _try_join(self) -> str:
        """One join attempt; sets ``self.grant`` or returns why there is none yet."""
        ip = await resolve(self.config.head_host)
        if ip is None:
            return "its name does not resolve"
        node = self.config.node
        body = {
            "instance": self.instance,
            "pod_ip": node.pod_ip,
            "pod_name": node.pod_name,
            "status_port": self.server.port,
        }
        try:
            answer = await self._post(ip, JOIN_PATH, body)
        except HeadAnswer as refused:
            if refused.status in (404, 405):
                raise GroupError(
                    f"the head at {self.head_address} has no rank roster ({JOIN_PATH} answered "
                    f"{refused.status}): it does not run the mp executor; set "
                    "MULTINODE_LLM_EXECUTOR=mp on the head and the workers (chart value "
                    "group.executor)",
                    cause=None,
                ) from None
            return f"it answered {refused.status}: {refused}"
        except OSError as error:
            return f"{ip}:{node.status_port} does not answer ({error})"
        self.grant, self.head_ip = _grant(answer, self.head_address), ip
        return "joined"

    async def _head_ready(self) -> bool:
        """When to publish the compile cache: the head is Ready only once every rank's vLLM
        compiled and captured its graphs (vLLM's engine waits for all of them), so nothing
        this pod still writes is missed; it asks the status port it heartbeats anyway."""
        return await http_ok(f"http://{self.head_ip}:{self.config.node.status_port}/ready")

    # Serving ----------------------------------------------------------------------------------

    async def _monitor(self, grant: Grant, engine: Child) -> int:
        self.state.phase = "serving"
        last_ok = time.monotonic()
        while True:
            if engine.returncode is not None:
                await self._say_leaving(grant, f"its vLLM exited with code {engine.returncode}")
                raise GroupError(
                    f"vLLM (headless, rank {grant.rank}) exited with code {engine.returncode} "
                    "(its log is above); exiting so that the group restarts",
                    cause=restarts.ENGINE_EXITED,
                )
            if await self._heartbeat(grant):
                last_ok = time.monotonic()
            elif time.monotonic() - last_ok > DEFAULT_LEASE_S:
                self._head_lost(
                    f"lost the head: {self.head_address} has not renewed rank {grant.rank}'s "
                    f"lease for {DEFAULT_LEASE_S:.0f} s"
                )
            self.facts = WorkerFacts(
                executor="mp",
                head=self.head_address,
                rank=grant.rank,
                joined=True,
                head_reachable=time.monotonic() - last_ok <= DEFAULT_LEASE_S,
                engine_started=True,
                engine_running=engine.returncode is None,
            )
            self.state.update(self.facts)
            if self.state.probes.ready.ok:
                self.state.mark("ready")
            await self.pause(HEARTBEAT_S)

    async def _heartbeat(self, grant: Grant) -> bool:
        """Renew the lease: True on success, False when the head did not answer in time.

        Raises GroupError when this rank is void: the head answers 410 (a new epoch: it restarted
        or ended the group), refuses the connection (its container is gone), or moved.
        """
        assert self.head_ip is not None
        moved = await resolve(self.config.head_host)
        if moved is not None and moved != self.head_ip:
            self._head_lost(f"the head moved from {self.head_ip} to {moved} (a new head pod)")
        body = {"epoch": grant.epoch, "rank": grant.rank, "instance": self.instance}
        try:
            await self._post(self.head_ip, HEARTBEAT_PATH, body)
        except HeadAnswer as answer:
            if answer.status == 410:
                self._head_lost(f"the head at {self.head_ip} ended rank {grant.rank}: {answer}")
            log.warning("the head answered a heartbeat with %d: %s", answer.status, answer)
            return False
        except OSError as error:
            if _refused(error):
                self._head_lost(
                    f"the head's status port {self.head_ip}:{self.config.node.status_port} "
                    "refuses connections (the head container is gone)"
                )
            return False
        return True

    def _head_lost(self, what: str) -> NoReturn:
        self.head_gone = True
        self.engine_stop_grace_s = LOST_HEAD_STOP_GRACE_S
        raise GroupError(
            f"{what}; exiting so that this pod restarts and joins the head's new epoch",
            cause=restarts.HEAD_LOST,
        )

    async def _say_leaving(self, grant: Grant, reason: str) -> None:
        """Tell the head this rank is gone, so that it restarts the group now (best effort)."""
        if self.head_ip is None or self.head_gone:
            return
        self.head_gone = True  # once
        body = {"epoch": grant.epoch, "rank": grant.rank, "instance": self.instance}
        try:
            await self._post(self.head_ip, LEAVE_PATH, {**body, "reason": reason})
        except (HeadAnswer, OSError) as error:
            log.info("could not tell the head that rank %d leaves: %s", grant.rank, error)

    async def _post(self, ip: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST JSON to the head's status port: the answer's object, HeadAnswer, or OSError."""
        import aiohttp  # not imported by `multinode-llm probe`, which imports the CLI

        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
            )
        url = f"http://{ip}:{self.config.node.status_port}{path}"
        try:
            async with self._http.post(url, json=body) as answer:
                payload = await answer.json(content_type=None)
                status = answer.status
        except aiohttp.ClientConnectorError as error:
            raise error.os_error from None
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise OSError(f"{type(error).__name__}: {error}") from None
        payload = payload if isinstance(payload, dict) else {}
        if status != 200:
            raise HeadAnswer(status, str(payload.get("error", "")))
        return payload


def _grant(answer: dict[str, Any], head: str) -> Grant:
    """The head's join answer, checked: a worker never starts vLLM on a malformed grant."""
    try:
        grant = Grant(
            epoch=str(answer["epoch"]),
            rank=int(answer["rank"]),
            nnodes=int(answer["nnodes"]),
            master_addr=str(ipaddress.ip_address(answer["master_addr"])),
            master_port=int(answer["master_port"]),
            engine_args=tuple(str(arg) for arg in answer["engine_args"]),
            compile_cache_key=compile_cache.EntryKey.from_dict(answer.get("compile_cache_key")),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise GroupError(
            f"the head at {head} answered a join with a malformed grant ({error!r}): the head "
            "and this worker run different versions of multinode-llm",
            cause=None,
        ) from None
    if not 1 <= grant.rank < grant.nnodes:
        raise GroupError(
            f"the head at {head} granted rank {grant.rank} of {grant.nnodes} nodes: not a worker "
            "rank",
            cause=None,
        )
    return grant


def _refused(error: OSError) -> bool:
    return error.errno == errno.ECONNREFUSED or isinstance(error, ConnectionRefusedError)
