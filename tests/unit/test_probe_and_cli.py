"""The exec probe against a real status server, and the command line's one-line errors."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from head_facts import SERVING
from multinode_llm.cli import main
from multinode_llm.health.server import StatusServer
from multinode_llm.health.state import HeadFacts, HealthState
from multinode_llm_testing.ports import free_port


@pytest.fixture
def status() -> Iterator[tuple[HealthState, int]]:
    """A real status server on a free port, in its own event loop thread."""
    state, port = HealthState(role="head"), free_port()
    loop = asyncio.new_event_loop()
    server = StatusServer(state, port, host="127.0.0.1")
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=10)
    yield state, port
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)


def test_probe_follows_the_supervisor_state(
    status: tuple[HealthState, int], capsys: pytest.CaptureFixture[str]
) -> None:
    state, port = status
    assert main(["probe", "live", "--port", str(port)]) == 0
    assert main(["probe", "ready", "--port", str(port)]) == 1
    assert "ready: failing: starting" in capsys.readouterr().err
    state.update(SERVING)
    assert main(["probe", "startup", "--port", str(port)]) == 0
    assert main(["probe", "ready", "--port", str(port)]) == 0
    state.update(HeadFacts(ray_running=True, engine_started=True, engine_running=False))
    assert main(["probe", "live", "--port", str(port)]) == 1
    assert "live: failing: vLLM is not running" in capsys.readouterr().err


def test_probe_fails_when_nothing_answers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "live", "--port", str(free_port()), "--timeout", "0.5"]) == 1
    assert "does not answer" in capsys.readouterr().err


def test_probe_imports_neither_ray_nor_vllm_nor_aiohttp() -> None:
    # Nor prometheus_client: about 50 ms of import on every exec probe.
    code = (
        "import sys; from multinode_llm.cli import main;"
        "main(['probe', 'live', '--port', '9', '--timeout', '0.2']);"
        "heavy = ('ray', 'vllm', 'torch', 'aiohttp', 'prometheus_client');"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    ("role", "env", "message"),
    [
        ("head", {}, "multinode-llm head: POD_IP is not set: declare it from the downward API"),
        (
            "head",
            {"POD_IP": "10.0.0.1", "REQUEST_GPU_COUNT": "x"},
            "multinode-llm head: REQUEST_GPU_COUNT='x' is not an integer",
        ),
        (
            "worker",
            {"POD_IP": "10.0.0.1", "REQUEST_GPU_COUNT": "1", "RAY_NODE_COUNT": "2"},
            "multinode-llm worker: HEAD_SVC is not set",
        ),
    ],
)
def test_environment_errors_are_one_line_and_exit_2(
    role: str, env: dict[str, str], message: str
) -> None:
    clean = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME")}
    result = subprocess.run(
        [sys.executable, "-m", "multinode_llm", role],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(message)


def test_head_refuses_a_model_directory_that_does_not_exist(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "POD_IP": "10.0.0.1",
        "REQUEST_GPU_COUNT": "1",
        "RAY_NODE_COUNT": "2",
        "TENSOR_PARALLEL_SIZE": "1",
        "PIPELINE_PARALLEL_SIZE": "2",
        "MODEL_DIR": "/nonexistent/models",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["head"]) == 2
    assert "the model directory /nonexistent/models does not exist" in capsys.readouterr().err
