"""``multinode-llm-local`` as a user meets it: each error is one clear line, and ``down`` is safe
to repeat. (The serving itself is covered by the group tests.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from groups import group_prerequisites
from multinode_llm_local.cli import main
from multinode_llm_local.netns import namespaces_with_prefix
from multinode_llm_testing.networks import CLI_E2E

CLI = [sys.executable, "-m", "multinode_llm_local"]
PREFIX, SUBNET = CLI_E2E.at()


def _cli(*args: str, user: int | None = None) -> subprocess.CompletedProcess[str]:
    argv = [*CLI, *args]
    if user is not None:
        argv = [
            "setpriv",
            "--reuid",
            str(user),
            "--regid",
            str(user),
            "--clear-groups",
            *argv,
        ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd="/")


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(autouse=True)
def _root_and_helm() -> None:
    reason = group_prerequisites()
    if reason and "vllm" not in reason and "ray" not in reason and "openai" not in reason:
        pytest.skip(reason)


def test_up_without_root_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In process, as if run by uid 1000: this Python may not be reachable for another user here.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["up", "--prefix", PREFIX]) == 2
    assert capsys.readouterr().err == (
        "multinode-llm-local: network namespaces need root: run this command as root "
        "(for example with sudo)\n"
    )


def test_a_taken_port_is_named_and_nothing_is_created() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _one_line(
            _cli(
                "up",
                "--prefix",
                PREFIX,
                "--subnet",
                str(SUBNET),
                "--port",
                str(port),
            )
        )
    assert line.startswith(f"multinode-llm-local: port {port} on 127.0.0.1 is taken")
    assert line.endswith("pass --port with a free port (0 picks one)")
    assert namespaces_with_prefix(PREFIX) == []


def test_bad_values_are_refused_by_the_charts_schema_in_one_line() -> None:
    line = _one_line(_cli("up", "--prefix", PREFIX, "--set", "parallelism.pipeline=1"))
    assert line.startswith("multinode-llm-local: helm refused the values:")
    assert namespaces_with_prefix(PREFIX) == []


def test_a_missing_values_file_is_named() -> None:
    line = _one_line(_cli("up", "--prefix", PREFIX, "-f", "/nonexistent/values.yaml"))
    assert line == (
        "multinode-llm-local: values file /nonexistent/values.yaml does not exist: "
        "pass an existing file to -f"
    )


def test_down_is_safe_to_repeat() -> None:
    for _ in range(2):
        result = _cli("down", "--prefix", PREFIX)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"nothing to remove for prefix {PREFIX}"


def test_status_without_a_cluster_says_so() -> None:
    result = _cli("status", "--prefix", PREFIX)
    assert result.returncode == 1
    assert result.stdout.strip() == f"no local cluster with prefix {PREFIX} is up"


def test_mp_on_a_kserve_release_without_the_mode_names_the_releases_that_have_it() -> None:
    line = _one_line(
        _cli("up", "--prefix", PREFIX, "--set", "group.executor=mp", "--kserve-version", "0.17")
    )
    assert line.startswith("multinode-llm-local: helm refused the values:")
    assert "group.executor=mp needs KServe's Ray-less multi-node mode, which KServe 0.17.1" in line
    assert "set kserve.version to it, or use group.executor=ray" in line
    assert namespaces_with_prefix(PREFIX) == []
