"""Machine-wide locks every suite and the benchmarks take, and the /dev/shm cleanup after vLLM.

Fixed paths in /tmp on purpose: every developer's runs on this machine must find the same lock,
and ``flock PATH command`` from a shell takes the same one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from multinode_llm_testing.waits import WaitTimeoutError

VLLM_LOCK = Path("/tmp/multinode-llm-vllm.lock")
BENCH_LOCK = Path("/tmp/multinode-llm-bench.lock")
# How long to wait for a machine-wide lock: other suites hold the vLLM lock for minutes at a time.
LOCK_WAIT_S = 1800.0


@contextlib.contextmanager
def file_lock(path: Path | str, what: str = "", timeout: float | None = None) -> Iterator[None]:
    """Hold flock(2) on ``path`` (what ``flock PATH command`` takes): wait for it without a limit,
    or raise WaitTimeoutError naming ``what`` after ``timeout`` seconds."""
    path = Path(path)
    with path.open("a") as handle:
        if timeout is None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        else:
            _lock_within(handle.fileno(), path, what, timeout)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lock_within(fd: int, path: Path, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise WaitTimeoutError(
                    f"{path} ({what or 'a lock'}) stayed taken for {timeout:.0f} s"
                ) from None
            time.sleep(1.0)


@contextlib.contextmanager
def vllm_lock(timeout: float = LOCK_WAIT_S) -> Iterator[None]:
    """The machine-wide vLLM lock, and removal of the /dev/shm files vLLM left meanwhile."""
    with file_lock(VLLM_LOCK, "one vLLM group on the machine at a time", timeout):
        before = shm_files()
        try:
            yield
        finally:
            remove_new_shm(before)


def shm_files() -> set[str]:
    return set(os.listdir("/dev/shm"))


def remove_new_shm(before: set[str]) -> list[str]:
    """Remove /dev/shm files that appeared since ``before`` and that no live process holds open.

    Called while the vLLM lock is held, so no other vLLM group made them meanwhile.
    """
    held = _open_shm_paths()
    removed = []
    for name in sorted(shm_files() - before):
        path = f"/dev/shm/{name}"
        if path not in held:
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(name)
    return removed


def _open_shm_paths() -> set[str]:
    held: set[str] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("/dev/shm/"):
                        held.add(target)
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
            held.update(line.split()[-1] for line in maps if "/dev/shm/" in line)
    return held
