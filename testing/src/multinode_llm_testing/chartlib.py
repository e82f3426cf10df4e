"""Render the chart with the real helm binaries from .tools/bin and read what comes out.

The checkout (ROOT) is ``$MULTINODE_LLM_CHECKOUT`` when set, else the first folder holding
``charts/multinode-llm/Chart.yaml`` above this file (``pip install -e ./testing`` runs it from
``<checkout>/testing/src``), else above the current directory (a wheel in site-packages, run from
a checkout).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

CHART_IN_CHECKOUT = Path("charts") / "multinode-llm"


def find_checkout() -> Path:
    """The multinode-llm checkout whose chart, hack/ and schemas/ the tests read."""
    given = os.environ.get("MULTINODE_LLM_CHECKOUT")
    if given:
        root = Path(given).resolve()
        if not (root / CHART_IN_CHECKOUT / "Chart.yaml").is_file():
            raise RuntimeError(f"MULTINODE_LLM_CHECKOUT={given} holds no {CHART_IN_CHECKOUT}")
        return root
    here, cwd = Path(__file__).resolve(), Path.cwd().resolve()
    for folder in [*here.parents, cwd, *cwd.parents]:
        if (folder / CHART_IN_CHECKOUT / "Chart.yaml").is_file():
            return folder
    raise RuntimeError(
        f"no multinode-llm checkout ({CHART_IN_CHECKOUT}/Chart.yaml) above {here} or {cwd}:"
        " run from a checkout or set MULTINODE_LLM_CHECKOUT"
    )


ROOT = find_checkout()
CHART = ROOT / CHART_IN_CHECKOUT


def hack_script(name: str) -> ModuleType:
    """hack/NAME.py loaded as a module (its name has a dash: it cannot be imported)."""
    spec = importlib.util.spec_from_file_location(
        name.replace("-", "_"), ROOT / "hack" / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


EXAMPLES = CHART / "examples"
CI_VALUES = CHART / "ci"
SCHEMAS = ROOT / "schemas"
TOOLS = Path(os.environ.get("TOOLS_DIR", ROOT / ".tools")) / "bin"

HELM_MAJORS = ("helm3", "helm4")
# The chart's kubeVersion floor and the newest Kubernetes kubernetes-validate knows.
KUBE_LOWEST, KUBE_HIGHEST = "1.25.0", "1.37.0"
# Golden renders: `helm4 template llm charts/multinode-llm -n serving --kube-version 1.37.0 -f ...`
# (hack/render-examples.sh runs the same command).
RELEASE, NAMESPACE = "llm", "serving"
KSERVE_KINDS = (
    "InferenceService",
    "ServingRuntime",
    "ClusterServingRuntime",
    "ClusterStorageContainer",
)
# The Prometheus Operator's kinds (monitoring.*): validated against its CRDs, not Kubernetes'.
MONITORING_KINDS = ("PodMonitor", "ServiceMonitor", "PrometheusRule")
# group.backend=lws (validated against LeaderWorkerSet's own CRD, tests/chart/test_lws.py).
LWS_KINDS = ("LeaderWorkerSet",)


@dataclass(frozen=True)
class Render:
    """One helm run: its exit code and output."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def documents(self) -> list[dict[str, Any]]:
        assert self.returncode == 0, f"{' '.join(self.args)} failed:\n{self.stderr}"
        return [d for d in yaml.safe_load_all(self.stdout) if d]

    def notes(self) -> str:
        """What Helm printed of NOTES.txt (helm install's output after "NOTES:")."""
        assert self.returncode == 0, f"{' '.join(self.args)} failed:\n{self.stderr}"
        return self.stdout.split("NOTES:", 1)[1]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.documents() if d["kind"] == kind]

    def one(self, kind: str, component: str | None = None) -> dict[str, Any]:
        """The one object of ``kind`` (with label app.kubernetes.io/component=``component``)."""
        [doc] = [
            d
            for d in self.of_kind(kind)
            if component is None
            or d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
        ]
        return doc


def helm(major: str) -> Path:
    return TOOLS / major


def run_helm(major: str, *args: str) -> Render:
    cmd = (str(helm(major)), *args)
    # No kubeconfig: nothing here may reach a cluster.
    env = {**os.environ, "KUBECONFIG": "/nonexistent"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    return Render(cmd, proc.returncode, proc.stdout, proc.stderr)


def run_with_values(
    major: str, args: list[str], values_files: list[Path] | None, values: dict[str, Any] | None
) -> Render:
    """Runs helm with -f for each file, then the inline values as one more file (JSON is YAML)."""
    with tempfile.TemporaryDirectory(prefix="mnllm-chart-") as tmp:
        files = list(values_files or [])
        if values is not None:
            inline = Path(tmp) / "values.json"
            inline.write_text(json.dumps(values))
            files.append(inline)
        return run_helm(major, *args, *(arg for f in files for arg in ("-f", str(f))))


def template(
    major: str,
    values_files: list[Path] | None = None,
    values: dict[str, Any] | None = None,
    *,
    kube_version: str = KUBE_HIGHEST,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> Render:
    args = [
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        kube_version,
    ]
    return run_with_values(major, args, values_files, values)


def install_dry_run(
    major: str,
    values_files: list[Path] | None = None,
    values: dict[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> Render:
    """`helm install --dry-run=client`: Helm 4 renders without a cluster; Helm 3 needs one."""
    args = ["install", release, str(CHART), "--namespace", namespace, "--dry-run=client"]
    return run_with_values(major, args, values_files, values)


def kserve_releases() -> dict[str, Any]:
    """The chart's table of KServe releases (kserve-releases.yaml)."""
    table: dict[str, Any] = yaml.safe_load((CHART / "kserve-releases.yaml").read_text())
    return table


def accelerators() -> dict[str, Any]:
    """The chart's accelerator table (accelerators.yaml): the vendors it knows."""
    table: dict[str, Any] = yaml.safe_load((CHART / "accelerators.yaml").read_text())
    return table


def kserve_release(version: str) -> dict[str, Any]:
    """The entry ``kserve.version`` means: exact, MAJOR.MINOR (newest patch), empty (default)."""
    table = kserve_releases()
    text = (version or table["default"]).removeprefix("v")
    if text not in table["releases"]:
        patches = [v for v in table["releases"] if v.startswith(f"{text}.")]
        text = max(patches, key=lambda v: tuple(int(p) for p in v.split(".")))
    return {**table["releases"][text], "version": text}


def scenarios() -> dict[str, Path]:
    """Every values file the chart ships: examples/values-<name>.yaml and ci/<name>-values.yaml,
    each once (a ci/ file that links to an example is that example)."""
    found = {
        p.name[len("values-") : -len(".yaml")]: p for p in sorted(EXAMPLES.glob("values-*.yaml"))
    }
    found |= {
        f"ci-{p.name[: -len('-values.yaml')]}": p
        for p in sorted(CI_VALUES.glob("*-values.yaml"))
        if not p.is_symlink()
    }
    return found


def load_values_file(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
