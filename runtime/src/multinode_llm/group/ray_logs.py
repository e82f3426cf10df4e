"""Ray's worker output, relayed into this pod's own log by the supervisor.

Ray runs a log monitor on every node: a Python process that tails the output files of the node's
Ray workers and publishes each line to the driver, so vLLM's workers' lines on every node show in
the head's log. It imports Ray on start, 0.45 CPU s on cores where vLLM is starting (twice in a
PP=2 group; bench/analysis.md, 5 December 2026). `ray start` runs without it
(``--include-log-monitor false``, group/ray_node.py) and the supervisor, which runs anyway, tails
the same files into the pod's log instead: `kubectl logs` of the pod a worker ran on shows its
lines, prefixed as Ray's driver prefixes them, without the ``ip=`` the pod already names.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

RELAY_EVERY_S = 0.5
# What Ray's log monitor forwards to the driver: the workers' output, and the raylet's and GCS's
# stderr (segfaults, out-of-memory kills).
PATTERNS = ("worker-*.out", "worker-*.err", "raylet*.err", "gcs_server*.err")
# Lines Ray writes for its log monitor, not for people: which actor or task the worker runs now
# (the prefix of the lines that follow), the job, and events it reports elsewhere.
ACTOR_NAME, TASK_NAME = ":actor_name:", ":task_name:"
METADATA = (":job_id:", ":event_summary:", ":info_message:")
READ_CHUNK = 1 << 20  # per file and pass: one chatty worker cannot hold up the others
LONGEST_LINE = 64 << 10  # a line without its end past this is sent as it is, not buffered on


@dataclass
class Tail:
    """How far one file has been relayed, and who its next line is from."""

    source: str  # "pid=1234" for a worker's file, else the Ray process ("raylet")
    to_err: bool
    name: str = ""  # the actor or task the worker runs, once it says
    inode: int = -1
    offset: int = 0
    partial: bytes = b""

    @classmethod
    def of(cls, path: Path) -> Tail:
        """A worker's file (``worker-<id>-<job>-<pid>.out``) or a Ray process's ``.err``."""
        stem, _, suffix = path.name.partition(".")
        if stem.startswith("worker-"):
            return cls(f"pid={stem.rpartition('-')[2]}", to_err=suffix == "err")
        return cls(stem, to_err=True)

    def feed(self, data: bytes) -> list[str]:
        """The complete lines of ``data``, prefixed; the unfinished end waits for the next pass."""
        *complete, self.partial = (self.partial + data).split(b"\n")
        if len(self.partial) > LONGEST_LINE:
            complete.append(self.partial)
            self.partial = b""
        lines = (self._line(raw.decode(errors="replace").rstrip("\r")) for raw in complete)
        return [line for line in lines if line is not None]

    def _line(self, text: str) -> str | None:
        """``text`` as the pod's log shows it; None for Ray's own markers (a name sets it)."""
        if text.startswith((ACTOR_NAME, TASK_NAME)):
            self.name = text.split(":", 2)[2].strip()
            return None
        if text.startswith(METADATA):
            return None
        who = f"{self.name} {self.source}" if self.name else self.source
        return f"({who}) {text}\n"


class LogRelay:
    """Tails Ray's log files under ``temp_dir`` into ``out`` and ``err``, a pass at a time.

    Files last written before the relay began belong to an earlier run's Ray (the temp dir can
    outlive a container restart) and are left alone, as is ``session_latest`` before this run's
    `ray start` points it at its own session.
    """

    def __init__(
        self, temp_dir: Path, out: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.logs_dir = temp_dir / "session_latest" / "logs"
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        # Less a second: a file system stamps times coarser than time.time() reads them.
        self.since = time.time() - 1.0
        self.tails: dict[Path, Tail] = {}

    def poll(self) -> None:
        """Relay every complete line written since the last pass."""
        for pattern in PATTERNS:
            for path in self.logs_dir.glob(pattern):
                self._relay(path)
        for stream in (self.out, self.err):
            stream.flush()

    def _relay(self, path: Path) -> None:
        try:
            stat = path.stat()
        except OSError:
            return  # gone between the glob and the stat
        tail = self.tails.get(path)
        if tail is None:
            if stat.st_mtime < self.since:
                return
            tail = self.tails[path] = Tail.of(path)
        if stat.st_ino != tail.inode or stat.st_size < tail.offset:  # new, rotated or truncated
            tail.inode, tail.offset, tail.partial = stat.st_ino, 0, b""
        if stat.st_size == tail.offset:
            return
        try:
            with path.open("rb") as handle:
                handle.seek(tail.offset)
                data = handle.read(READ_CHUNK)
        except OSError:
            return
        tail.offset += len(data)
        (self.err if tail.to_err else self.out).writelines(tail.feed(data))

    async def run(self) -> None:
        """Poll until cancelled, and once more then: a dying worker's last lines are the ones
        that say why."""
        try:
            while True:
                self.poll()
                await asyncio.sleep(RELAY_EVERY_S)
        finally:
            self.poll()


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel a relay's task once its Ray is gone; its last pass relays the last lines."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
