"""Where the chart and helm are: a checkout's ``charts/multinode-llm`` and ``.tools/bin/helm``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from multinode_llm.errors import UserError


def find_chart() -> Path:
    """The chart: ``$MULTINODE_LLM_CHART``, else the checkout this package is installed from, else
    ``charts/multinode-llm`` in the current directory or one above it.

    The second is a fixed path, not a search: an editable install (``pip install -e ./local``, as
    tox does) runs from ``<checkout>/local/src/multinode_llm_local``. A wheel in site-packages has
    no checkout beside it; then the current directory decides (or ``--chart``).
    """
    here = Path(__file__).resolve().parents  # .../local/src/multinode_llm_local/chart.py
    checkout = here[3] if len(here) > 3 else here[-1]
    cwd = Path.cwd().resolve()
    candidates = [
        os.environ.get("MULTINODE_LLM_CHART", ""),
        str(checkout / "charts" / "multinode-llm"),
        *(str(parent / "charts" / "multinode-llm") for parent in [cwd, *cwd.parents]),
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
