"""Where the chart and helm are: a checkout's ``charts/multinode-llm`` and ``.tools/bin/helm``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from multinode_llm.errors import UserError


def find_chart() -> Path:
    """``charts/multinode-llm`` of the checkout this package runs from, or of the current one."""
    candidates = [os.environ.get("MULTINODE_LLM_CHART", "")]
    for start in (Path(__file__).resolve(), Path.cwd().resolve()):
        candidates += [
            str(parent / "charts" / "multinode-llm") for parent in [start, *start.parents]
        ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "Chart.yaml").is_file():
            return Path(candidate)
    raise UserError(
        "the chart charts/multinode-llm was not found: run from a checkout of multinode-llm, "
        "or pass --chart DIR (or set MULTINODE_LLM_CHART)"
    )


def find_helm(chart: Path) -> Path:
    """helm from ``$HELM``, the checkout's ``.tools/bin`` (hack/install-tools.sh) or the PATH."""
    tools = chart.resolve().parent.parent / ".tools" / "bin"
    candidates = [os.environ.get("HELM", ""), str(tools / "helm"), shutil.which("helm") or ""]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise UserError(
        "helm was not found: run `bash hack/install-tools.sh` (it puts helm in .tools/bin), "
        "or pass --helm PATH"
    )
