"""The chart's cache DaemonSet runs the real `multinode-llm cache serve`: its command line parses,
its settings are what the values say, and the process it starts answers the DaemonSet's own probes
and serves a real `huggingface_hub` download.

Only what would leave this machine is swapped, and nothing else: the store's mount path (a
temporary directory), the port (a free one), the upstream (the fake Hub), the peers' DNS name
(`localhost`) and the pod IP (127.0.0.1, as Kubernetes would expand `$(POD_IP)`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from huggingface_hub import snapshot_download
from multinode_llm.cache import cli as cache_cli
from multinode_llm.cache.store import parse_size
from multinode_llm_testing.cache import assert_same_files, model_files
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.ports import free_port
from multinode_llm_testing.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]
HELM = Path(os.environ.get("TOOLS_DIR", ROOT / ".tools")) / "bin" / "helm4"
VALUES: dict[str, Any] = {"modelCache": {"enabled": True, "store": {"size": "3Gi"}}}


@pytest.fixture(scope="module")
def daemonset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not HELM.exists():
        pytest.skip(f"{HELM} missing: run `bash hack/install-tools.sh`")
    values = tmp_path_factory.mktemp("values") / "values.json"
    values.write_text(json.dumps(VALUES))
    command = [str(HELM), "template", "llm", str(ROOT / "charts" / "multinode-llm")]
    command += ["--namespace", "serving", "--kube-version", "1.37.0", "-f", str(values)]
    env = {**os.environ, "KUBECONFIG": "/nonexistent"}
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=True)
    found: dict[str, Any]
    [found] = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "DaemonSet"]
    return found


def container(daemonset: dict[str, Any]) -> dict[str, Any]:
    cache: dict[str, Any]
    [cache] = daemonset["spec"]["template"]["spec"]["containers"]
    return cache


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' `$(VAR)` expansion of container args from the container's env."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in args]


def swapped(args: list[str], swaps: dict[str, str]) -> list[str]:
    """``args`` with the value after each flag in ``swaps`` replaced; every flag must be there."""
    out = list(args)
    for flag, value in swaps.items():
        assert flag in out, f"{flag} missing from {args}"
        out[out.index(flag) + 1] = value
    return out


def literal_env(cache: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in cache["env"] if "value" in e}


def test_the_rendered_command_line_parses_to_the_settings_the_values_ask_for(
    daemonset: dict[str, Any], tmp_path: Path
) -> None:
    cache = container(daemonset)
    assert cache["command"] == ["multinode-llm"]
    args = expand(cache["args"], {"POD_IP": "10.0.0.7"})
    assert args[:2] == ["cache", "serve"]
    parser = argparse.ArgumentParser()
    cache_cli.add_arguments(parser)
    parsed = parser.parse_args(args[1:])
    mount = next(m["mountPath"] for m in cache["volumeMounts"] if m["name"] == "store")
    assert parsed.store == Path(mount)
    parsed.store = tmp_path / "store"  # the volume's mount path exists only in the pod
    settings = cache_cli.settings_from(parsed)
    assert settings.upstream == "https://huggingface.co"
    assert settings.port == cache["ports"][0]["containerPort"] == 8090
    assert settings.peers_dns == "llm-multinode-llm-cache-peers.serving.svc.cluster.local"
    assert settings.advertise_address == "10.0.0.7"
    assert settings.max_store_bytes == 3 * 2**30


@pytest.fixture
def rendered_cache(
    daemonset: dict[str, Any], fake_hub: FakeHub, tmp_path: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """The DaemonSet's container as a process here: (its URL, the process, its log)."""
    cache = container(daemonset)
    env = {**os.environ, **literal_env(cache), "POD_IP": "127.0.0.1"}
    port = free_port()
    args = swapped(
        expand(cache["args"], env),
        {
            "--store": str(tmp_path / "store"),
            "--port": str(port),
            "--upstream": fake_hub.url,
            "--peers": "localhost",
        },
    )
    log = tmp_path / "cache.log"
    with log.open("wb") as out:
        # `multinode-llm` is this interpreter's entry point; bind loopback only, not every address.
        command = [sys.executable, "-m", "multinode_llm", *args, "--host", "127.0.0.1"]
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield f"http://127.0.0.1:{port}", process, log
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        print(f"--- cache.log ---\n{log.read_text(errors='replace')[-4000:]}")


def answers_200(url: str, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"the rendered cache exited with {process.returncode}")
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_the_rendered_cache_passes_its_own_probes_and_serves_a_download(
    daemonset: dict[str, Any],
    rendered_cache: tuple[str, subprocess.Popen[bytes], Path],
    fake_hub: FakeHub,
    tmp_path: Path,
) -> None:
    url, process, _ = rendered_cache
    cache = container(daemonset)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        path = cache[probe]["httpGet"]["path"]
        wait_until(functools.partial(answers_200, url + path, process), 30, f"{probe} {path}")

    files = model_files(seed=61)
    fake_hub.add(FakeRepo("org/chart", files))
    got = snapshot_download("org/chart", endpoint=url, cache_dir=tmp_path / "client")
    assert_same_files(Path(got), files)

    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        metrics = response.read().decode()
    limit = re.search(r"^multinode_llm_cache_store_limit_bytes (\S+)$", metrics, re.M)
    assert limit, metrics
    assert float(limit.group(1)) == parse_size(VALUES["modelCache"]["store"]["size"])
    assert re.search(r"^multinode_llm_cache_store_blobs \S+$", metrics, re.M), metrics
