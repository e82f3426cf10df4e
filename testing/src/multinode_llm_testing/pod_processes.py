"""What runs in a pod's network namespace, as the e2e and cluster suites look at it: its processes,
their command lines, and the check that an mp group runs no Ray."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

# A Ray process, by its command line or name: the raylet, the GCS, `ray start`, Ray's own Python
# processes (dashboard, log monitor, ...: they run from Ray's package) and its workers.
RAY_PROCESS = re.compile(r"raylet|gcs_server|\bray::|(^|[ /])ray start\b|/site-packages/ray/")
# What runs vLLM in an mp pod: rank 0's OpenAI server on the head, the headless entry on workers.
MP_ENGINE = {
    "head": "-m vllm.entrypoints.openai.api_server ",
    "worker": "-m multinode_llm.serving.headless ",
}


def netns_pids(namespace: str) -> list[int]:
    listing = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False
    )
    return [int(pid) for pid in listing.stdout.split()]


def command_of(pid: int) -> str:
    """A process's command line and its name (Ray renames its workers ``ray::...``); "" once
    it is gone."""
    try:
        argv = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
        name = Path(f"/proc/{pid}/comm").read_text(errors="replace").strip()
    except OSError:
        return ""
    return f"[{name}] {argv.strip()}"


def processes_in(namespace: str) -> dict[int, str]:
    """Every process of a network namespace: PID -> command."""
    return {pid: command_of(pid) for pid in netns_pids(namespace)}


def check_no_ray(pod: str, role: str, processes: Mapping[int, str]) -> None:
    """No Ray process in the pod, vLLM's own ranks in it, and no supervisor that imported Ray
    (vLLM's processes may load Ray's library where it is installed: that starts nothing;
    docs/executors.md)."""
    ray = [command for command in processes.values() if RAY_PROCESS.search(command)]
    assert ray == [], f"Ray runs in {pod}: {ray}"
    engine = MP_ENGINE[role]
    assert any(engine in command for command in processes.values()), (pod, processes)
    # A container runs the console script; the runtime suite runs `python -m multinode_llm`.
    launched = re.compile(rf"(multinode-llm|-m multinode_llm) {role}\b")
    [supervisor] = [
        pid for pid, command in processes.items() if launched.search(command.partition("] ")[2])
    ]
    maps = Path(f"/proc/{supervisor}/maps").read_text()
    assert "_raylet" not in maps, f"the supervisor of {pod} imported Ray"
