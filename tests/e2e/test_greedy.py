"""Greedy equality: a pipeline-parallel group computes what one vLLM server computes.

The real instruct model (SmolLM2-135M-Instruct, ``multinode_llm_local.real_model``) is served
first by one plain vLLM server on loopback, then by PP=2 groups of the chart's pods, one per
executor. At temperature 0 each group's tokens must equal the plain server's, token id for token
id, for every prompt of ``PROMPTS``, and the factual prompt must get its known answer. A control
shows that the comparison can fail: a group whose second stage holds two of its layers swapped
(the mistake of a stage that loads the wrong slice) must answer differently.

Every server computes in float32 (``--dtype=float32``), not the model's bfloat16. Token-for-token
equality holds only where rounding cannot flip an argmax, and bfloat16 does flip one here: for
"What is the capital of France?" the model's first token "The" leads "L" by 0.10 logits
(transformers, float32), and in bfloat16 one plain vLLM server answers "L'Étoile, la
Marseillaise, ..." while the PP=2 groups and transformers (float32 and bfloat16) answer "The
capital of France is Paris.". In float32 the plain server answers as they do.

Tensor parallelism is not checked here: the only real model on this machine has 9 attention heads
and 3 KV heads, so vLLM takes tensor parallel 1 or 3 only, and 3 ranks per pod (6 engines' worth
of processes) on this machine's 2 cores do not start within a test's time.

Not in the e2e env (it starts four servers of the real model: about 10 minutes): tox -e greedy.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from groups import LocalGroup, group_prerequisites, local_group, record
from multinode_llm_local import real_model
from multinode_llm_local.pods import CPU_VLLM_ENV, MP_ENV, make_readable
from multinode_llm_testing.ports import free_port
from multinode_llm_testing.waits import wait_seconds

FACTUAL = ("What is the capital of France?", "Paris")
PROMPTS = (
    FACTUAL[0],
    "Name three colours of the rainbow.",
    "Write one sentence about the sea.",
    "What is 12 plus 30?",
)
MAX_TOKENS = 24
# The local values' engine settings (values-local.yaml) and float32 (see above), for every server.
ENGINE_ARGS = ("--max-model-len=512", "--max-num-seqs=8", "--dtype=float32")
# vLLM splits the 30 layers 15 and 15 over two stages: the worker holds layers 15-29.
SWAPPED = (20, 21)
READY_S = 900


class Answer(NamedTuple):
    ids: list[int]
    text: str


@pytest.fixture(scope="module")
def claim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A claim holding the real model, and a copy whose second stage has two layers swapped."""
    reason = group_prerequisites()
    if reason:
        pytest.skip(reason)
    claim = tmp_path_factory.mktemp("claim-models")
    real_model.copy_into(claim / real_model.NAME)
    _swapped_copy(claim / real_model.NAME, claim / "swapped", *SWAPPED)
    claim.chmod(0o755)
    return claim


@pytest.fixture(scope="module")
def plain(claim: Path) -> dict[str, Answer]:
    """The plain server's greedy answer to every prompt."""
    with _plain_server(claim / real_model.NAME) as url:
        return _answers(url)


@pytest.mark.parametrize("executor", ["ray", "mp"])
def test_a_pp2_group_answers_token_for_token_as_one_server(
    claim: Path, plain: dict[str, Answer], executor: str
) -> None:
    scenario = f"greedy PP=2 {executor}"
    with _real_group(scenario, claim, real_model.NAME, executor) as group:
        answers = _answers(group.plan.url)
    for prompt in PROMPTS:
        assert answers[prompt] == plain[prompt], f"{scenario} differs from one server on {prompt!r}"
    question, known = FACTUAL
    assert known in answers[question].text, f"{question!r} got {answers[question].text!r}"


def test_a_stage_holding_wrong_layers_is_caught(claim: Path, plain: dict[str, Answer]) -> None:
    scenario = "greedy PP=2, stage 2 layers swapped"
    with _real_group(scenario, claim, "swapped", "mp") as group:
        answers = _answers(group.plan.url)
    differing = [prompt for prompt in PROMPTS if answers[prompt].ids != plain[prompt].ids]
    assert differing, f"layers {SWAPPED} swapped in the worker's stage went unnoticed"


@contextlib.contextmanager
def _real_group(scenario: str, claim: Path, folder: str, executor: str) -> Iterator[LocalGroup]:
    sets = [
        f"model.uri=pvc://models/{folder}",
        f"model.name={real_model.NAME}",
        f"group.executor={executor}",
        "vllm.args={" + ",".join(ENGINE_ARGS) + "}",
    ]
    with local_group(scenario, claim, sets=sets, wait_s=READY_S) as group:
        group.model = real_model.NAME
        yield group


def _greedy(base_url: str, prompt: str) -> Answer:
    """The chat completion of ``prompt`` at temperature 0: its token ids (vLLM names each token
    ``token_id:N`` when asked) and its text."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="unused", timeout=300, max_retries=0)
    reply = client.chat.completions.create(
        model=real_model.NAME,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        logprobs=True,
        extra_body={"return_tokens_as_token_ids": True},
    )
    choice = reply.choices[0]
    tokens = choice.logprobs.content if choice.logprobs else None
    assert tokens, f"no tokens for {prompt!r}"
    ids = [int(token.token.removeprefix("token_id:")) for token in tokens]
    return Answer(ids, choice.message.content or "")


def _answers(base_url: str) -> dict[str, Answer]:
    return {prompt: _greedy(base_url, prompt) for prompt in PROMPTS}


@contextlib.contextmanager
def _plain_server(model: Path) -> Iterator[str]:
    """One plain vLLM server of ``model`` on loopback (its OpenAI base URL); stopped after.

    Its threads are set as the groups' ranks run (one OpenMP thread, unbound: MP_ENV; Ray starts
    its workers with one thread too), so that every server does the same arithmetic."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        f"--model={model}",
        f"--served-model-name={real_model.NAME}",
        "--host=127.0.0.1",
        f"--port={port}",
        *ENGINE_ARGS,
    ]
    env = {
        **os.environ,
        **MP_ENV,
        **CPU_VLLM_ENV,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }
    log = model.parent / "plain-vllm.log"
    with log.open("wb") as output:
        server = subprocess.Popen(
            argv, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:

        def lists_model() -> bool:
            assert server.poll() is None, f"plain vLLM exited:\n{log.read_text()[-3000:]}"
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{url}/models", timeout=2) as answer,
            ):
                return real_model.NAME in answer.read().decode()
            return False

        ready_s = wait_seconds(lists_model, READY_S, "the plain vLLM server", interval=1)
        record("greedy plain server", "start -> lists the model", ready_s)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)  # its engine core, if it outlived the server


def _swapped_copy(source: Path, target: Path, first: int, second: int) -> None:
    """``source`` copied to ``target`` with decoder layers ``first`` and ``second`` exchanged."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.safetensors"))
    tensors = load_file(str(source / "model.safetensors"))
    names = {first: f"model.layers.{second}.", second: f"model.layers.{first}."}
    swapped = {}
    for key, value in tensors.items():
        for layer, other in names.items():
            mine = f"model.layers.{layer}."
            if key.startswith(mine):
                key = other + key.removeprefix(mine)
                break
        swapped[key] = value
    assert swapped.keys() == tensors.keys()
    save_file(swapped, str(target / "model.safetensors"), metadata={"format": "pt"})
    make_readable(target)
