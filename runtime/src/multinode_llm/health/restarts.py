"""How often this pod's supervisor started again, and why: a small file on the pod's scratch dir.

Kubelet keeps a pod's emptyDir across restarts of its containers (the chart mounts one at /tmp), so
a file there outlives the supervisor that wrote it and goes with the pod. Each run of a supervisor:

- on start, reads the file. A cause the previous run recorded as it left on purpose counts one
  restart of that cause; a previous run that started but recorded nothing was killed without a word
  (SIGKILL, the OOM killer, a kill it did not see coming) and counts one ``unknown``. No file: the
  pod's first run, every count 0 (each cause is exported from the start, so ``increase()`` works);
- writes the counts back with its own run marked ``running``;
- when it leaves on purpose, records why (``leave``).

Every write is a temporary file renamed over the old one: a kill mid-write leaves the old file. A
file that cannot be read as ours is logged and counting starts again from zero; a file that cannot
be written is logged. Neither ever stops the supervisor: these are metrics, not the group.

Standard library only, like the rest of ``health``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

# Why a supervisor left (the label values of multinode_llm_restarts_total{cause}).
WORKER_LOST = "worker_lost"  # the head: a node of the formed group was lost
HEAD_LOST = "head_lost"  # a worker: its head stopped answering, moved or restarted
ENGINE_EXITED = "engine_exited"  # vLLM, or the Ray node under it, exited
GROUP_TIMEOUT = "group_timeout"  # the group did not form before its start-up deadline
ENGINE_HUNG = "engine_hung"  # vLLM stopped answering (or never answered) and was killed for it
UNKNOWN = "unknown"  # the previous run recorded nothing: killed without a word
CAUSES = (WORKER_LOST, HEAD_LOST, ENGINE_EXITED, GROUP_TIMEOUT, ENGINE_HUNG, UNKNOWN)

_RUNNING = "running"  # the last run's entry while it runs: still there at start = unknown
_VERSION = 1


def zero_counts() -> dict[str, int]:
    return dict.fromkeys(CAUSES, 0)


class CorruptRestartsFileError(ValueError):
    """The restarts file holds something this module did not write."""


@dataclass
class RestartsFile:
    """The restarts file of one pod; ``counts`` as of this run's start."""

    path: Path
    counts: dict[str, int] = field(default_factory=zero_counts)

    @classmethod
    def start(cls, path: Path) -> RestartsFile:
        """Count the previous run's end (if there was one) and mark this run as running."""
        record = cls(path)
        previous = record._read()
        if previous is not None:
            counts, last_run = previous
            cause = UNKNOWN if last_run == _RUNNING else last_run
            record.counts = {**counts, cause: counts[cause] + 1}
            log.info("this pod's supervisor started again: the previous run ended by %s", cause)
        record._write(_RUNNING)
        return record

    def leave(self, cause: str) -> None:
        """Record why this run leaves, for the next run to count."""
        if cause not in CAUSES:
            raise ValueError(f"unknown restart cause {cause!r}: one of {', '.join(CAUSES)}")
        self._write(cause)

    def _read(self) -> tuple[dict[str, int], str] | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            log.warning("cannot read the restarts file %s (%s): counting from 0", self.path, error)
            return None
        try:
            return _parse(raw)
        except CorruptRestartsFileError as error:
            log.warning(
                "the restarts file %s is corrupt (%s): counting restarts from 0 again",
                self.path,
                error,
            )
            return None

    def _write(self, last_run: str) -> None:
        data = {"version": _VERSION, "counts": self.counts, "last_run": last_run}
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(data, sort_keys=True) + "\n", encoding="utf-8")
            os.replace(temporary, self.path)
        except OSError as error:
            log.warning(
                "cannot write the restarts file %s (%s): the next start will not know why "
                "this one ended",
                self.path,
                error,
            )
            with contextlib.suppress(OSError):
                temporary.unlink()


def _parse(raw: bytes) -> tuple[dict[str, int], str]:
    """(counts by cause, the last run's entry) from the file's bytes; CorruptRestartsFileError."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as error:  # UnicodeDecodeError is one too
        raise CorruptRestartsFileError(f"not JSON: {error}") from None
    if not isinstance(data, dict) or data.get("version") != _VERSION:
        raise CorruptRestartsFileError(f"not a version {_VERSION} restarts record")
    counts, last_run = data.get("counts"), data.get("last_run")
    if not isinstance(counts, dict) or set(counts) != set(CAUSES):
        raise CorruptRestartsFileError(f"counts must name exactly {', '.join(CAUSES)}")
    if not all(type(count) is int and count >= 0 for count in counts.values()):
        raise CorruptRestartsFileError("every count must be a whole number >= 0")
    if last_run != _RUNNING and last_run not in CAUSES:
        raise CorruptRestartsFileError(f"last_run {last_run!r} is neither running nor a cause")
    return {cause: counts[cause] for cause in CAUSES}, str(last_run)
