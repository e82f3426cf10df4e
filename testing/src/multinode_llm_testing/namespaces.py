"""Cleanup by network namespace: every process in it, and the links that outlive it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time


def kill_namespace(namespace: str) -> None:
    """SIGKILL every process in a network namespace until none is left (they may fork meanwhile)."""
    for _ in range(20):
        listing = subprocess.run(
            ["ip", "netns", "pids", namespace],
            capture_output=True,
            text=True,
            check=False,
        )
        pids = [int(pid) for pid in listing.stdout.split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def remove_links(prefix: str) -> None:
    """Delete links the prefix names that outlived their namespace (a veth goes only when its
    namespace is freed, which can lag `ip netns delete` while killed processes exit)."""
    for _ in range(50):
        listing = subprocess.run(
            ["ip", "-o", "link", "show"], capture_output=True, text=True, check=False
        )
        names = [line.split(":")[1].strip().split("@")[0] for line in listing.stdout.splitlines()]
        left = [name for name in names if name.startswith(f"{prefix}-")]
        if not left:
            return
        for name in left:
            subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
        time.sleep(0.1)
