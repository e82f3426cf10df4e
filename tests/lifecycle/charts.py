"""The two charts the findings compare, rendered with the real helm binaries
(multinode_llm_testing.chartlib): the chart before the lifecycle fixes (git history,
``OLD_COMMIT``) and the working tree's."""

from __future__ import annotations

import atexit
import copy
import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_llm_testing import chartlib

# The chart before the lifecycle fixes: the model volume a pre-install and PreSync hook, the
# runtime a ClusterServingRuntime named after the release.
OLD_COMMIT = "56efead"
CHARTS = ("old", "new")
MODEL = "hf://Qwen/Qwen2.5-0.5B-Instruct"
BASE: dict[str, Any] = {"model": {"uri": MODEL}, "parallelism": {"tensor": 2, "pipeline": 2}}

Doc = dict[str, Any]


# Renders ``new`` from this commit instead of the working tree: LIFECYCLE_NEW_CHART=56efead makes
# every ``new`` case meet the old chart, and fail (README.md).
NEW_COMMIT = os.environ.get("LIFECYCLE_NEW_CHART", "")


@functools.cache
def chart_dir(which: str) -> Path:
    """The chart folder: the working tree's (``new``) or ``OLD_COMMIT``'s, extracted once."""
    assert which in CHARTS, which
    if which == "new" and not NEW_COMMIT:
        return chartlib.CHART
    return _extracted(NEW_COMMIT if which == "new" else OLD_COMMIT)


@functools.cache
def _extracted(commit: str) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f"mnllm-chart-{commit}-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    archive = subprocess.run(
        ["git", "-C", str(chartlib.ROOT), "archive", commit, "charts/multinode-llm"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        pytest.skip(f"git cannot read {commit} (a shallow clone?): {archive.stderr!r}")
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    return tmp / "charts" / "multinode-llm"


@functools.cache
def _documents(major: str, which: str, release: str, namespace: str, values: str) -> list[Doc]:
    result = _render(major, which, release, namespace, values)
    assert result.returncode == 0, f"{' '.join(result.args)} failed:\n{result.stderr}"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where built: 10x faster
    return [d for d in yaml.load_all(result.stdout, Loader=loader) if d]


@functools.cache
def _render(major: str, which: str, release: str, namespace: str, values: str) -> chartlib.Render:
    args = [
        "template",
        release,
        str(chart_dir(which)),
        "--namespace",
        namespace,
        "--kube-version",
        chartlib.KUBE_HIGHEST,
    ]
    return chartlib.run_with_values(major, args, None, json.loads(values))


def render_result(
    major: str,
    which: str,
    values: dict[str, Any],
    *,
    release: str = "llm",
    namespace: str = "serving",
    base: bool = True,
) -> chartlib.Render:
    """``helm template`` of one chart (what Argo CD runs, too) with ``values`` over ``BASE``, or
    over the chart's defaults alone (``base=False``)."""
    merged = chartlib.deep_merge(BASE, values) if base else values
    return _render(major, which, release, namespace, json.dumps(merged, sort_keys=True))


def render(
    major: str,
    which: str,
    values: dict[str, Any] | None = None,
    *,
    namespace: str = "serving",
    base: bool = True,
    release: str = "llm",
) -> list[Doc]:
    """The documents of a render that must succeed (a fresh copy each call)."""
    given = values or {}
    merged = chartlib.deep_merge(BASE, given) if base else given
    docs = _documents(major, which, release, namespace, json.dumps(merged, sort_keys=True))
    return copy.deepcopy(docs)


def release_record(which: str, values: dict[str, Any], *, namespace: str = "serving") -> Doc:
    """Helm 4's own release record (``install --dry-run=client -o json``): real Helm's split of a
    render into hooks and manifest, which helm_model.sort_manifests must agree with."""
    merged = chartlib.deep_merge(BASE, values)
    args = ["install", "llm", str(chart_dir(which)), "--namespace", namespace]
    args += ["--dry-run=client", "-o", "json"]
    result = chartlib.run_with_values("helm4", args, None, merged)
    assert result.returncode == 0, result.stderr
    record: Doc = json.loads(result.stdout)
    return record


def component(docs: list[Doc], kind: str, name: str) -> Doc:
    """The one ``kind`` whose app.kubernetes.io/component is ``name``."""
    [found] = [
        d
        for d in docs
        if d["kind"] == kind
        and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == name
    ]
    return found
