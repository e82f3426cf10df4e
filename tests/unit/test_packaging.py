"""The product is what runs in a pod: `pip install ./runtime` brings no local cluster and registers
no vLLM plugin; the fake GPU and its plugin come only with the local package (`./local`)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _wheel(project: str, into: Path) -> zipfile.ZipFile:
    """The wheel pip builds from a clean copy of ``project`` (no stale build/ or egg-info)."""
    source = into / "src"
    shutil.copytree(
        ROOT / project,
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".ruff_cache"),
    )
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(into)]
    if importlib.util.find_spec("setuptools"):  # offline where the env has the backend already
        command.append("--no-build-isolation")
    subprocess.run([*command, str(source)], check=True, timeout=300)
    (wheel,) = into.glob("*.whl")
    return zipfile.ZipFile(wheel)


def _entry_points(wheel: zipfile.ZipFile) -> str:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    return wheel.read(name).decode()


def test_the_runtime_wheel_holds_no_local_cluster_and_registers_no_vllm_plugin(
    tmp_path: Path,
) -> None:
    with _wheel("runtime", tmp_path) as wheel:
        names = wheel.namelist()
        entry_points = _entry_points(wheel)
    assert "multinode_llm/cli.py" in names
    assert [
        n for n in names if "local" in n.split("/")[0] or n.startswith("multinode_llm/local")
    ] == []
    assert [n for n in names if "gpu_mock" in n] == []
    assert "vllm.platform_plugins" not in entry_points
    assert "multinode-llm = multinode_llm.cli:main" in entry_points


def test_the_local_wheel_carries_the_fake_gpu_and_its_plugin(tmp_path: Path) -> None:
    with _wheel("local", tmp_path) as wheel:
        names = wheel.namelist()
        entry_points = _entry_points(wheel)
    assert "multinode_llm_local/gpu_mock.py" in names
    assert "multinode_llm_local/values-local.yaml" in names
    assert "multinode_llm_gpu_mock = multinode_llm_local.gpu_mock:register" in entry_points
    assert "multinode-llm-local = multinode_llm_local.cli:main" in entry_points


def test_the_product_command_lists_no_local_cluster() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "multinode_llm", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "head" in result.stdout
    assert "local" not in result.stdout


def test_the_product_imports_nothing_of_the_local_cluster() -> None:
    sources = sorted((ROOT / "runtime" / "src" / "multinode_llm").rglob("*.py"))
    assert sources
    assert [str(s) for s in sources if "multinode_llm_local" in s.read_text()] == []
