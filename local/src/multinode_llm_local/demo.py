"""``multinode-llm-local demo``: the README's main command.

Starts the chart's pods with the built-in local values (a head and a worker, pipeline parallel 2),
asks one chat question through the real ``openai`` client, prints the answer and removes the
cluster again, whether the question was answered, failed, or was interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from multinode_llm.errors import UserError

from multinode_llm_local import cluster
from multinode_llm_local.state import ClusterPlan

LOG_LINES_ON_FAILURE = 25


def demo(prefix: str, prompt: str, max_tokens: int) -> int:
    try:
        import openai  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise UserError(
            "the demo needs the openai client: pip install openai (tox -e demo brings it)"
        ) from None
    signal.signal(signal.SIGTERM, _interrupt)
    for client_log in ("httpx", "httpx2"):  # one line per request is noise here
        logging.getLogger(client_log).setLevel(logging.WARNING)
    started = time.monotonic()
    plan: ClusterPlan | None = None
    try:
        plan = cluster.up(cluster.UpOptions(prefix=prefix, port=0), progress=_say)
        ready_s = time.monotonic() - started
        client = openai.OpenAI(base_url=plan.url, api_key="not-needed", timeout=120)
        model = client.models.list().data[0].id
        _say(f"group Ready in {ready_s:.0f}s; asking {model!r} at {plan.url}: {prompt!r}")
        reply = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
        )
        pods = ", ".join(f"{p.role} {p.name} ({p.ip})" for p in plan.pods)
        print(f"served by {len(plan.pods)} pods: {pods}")
        tokens = reply.usage.completion_tokens if reply.usage else "?"
        print(f"answer ({tokens} tokens from a random-weight model):")
        print(reply.choices[0].message.content, flush=True)
        return 0
    except BaseException:
        if plan is not None:
            _print_log_tails(plan)
        raise
    finally:
        _say("removing the local cluster")
        cluster.down(prefix)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    del frame
    raise KeyboardInterrupt(f"signal {signum}")


def _print_log_tails(plan: ClusterPlan) -> None:
    for pod in plan.pods:
        logs = sorted(Path(pod.directory).glob("*.log"), key=lambda p: p.stat().st_mtime)
        if not logs:
            continue
        lines = logs[-1].read_text(errors="replace").splitlines()[-LOG_LINES_ON_FAILURE:]
        print(f"--- last lines of {logs[-1]} ({pod.role}) ---", file=sys.stderr)
        print("\n".join(lines), file=sys.stderr)


def _say(line: str) -> None:
    print(f"demo: {line}", file=sys.stderr, flush=True)
