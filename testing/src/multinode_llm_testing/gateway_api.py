"""The Gateway API CRDs the chart's HTTPRoute is checked against, from the module release that
``testing/go/gateway-api/go.mod`` pins (its ``go.sum`` pins the bytes): the standard channel's
``config/crd/standard``, read from Go's module cache after ``go mod download``. Nothing is built.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from multinode_llm_testing.chartlib import ROOT

PIN = ROOT / "testing" / "go" / "gateway-api"
MODULE = "sigs.k8s.io/gateway-api"
# The kinds the chart renders from Gateway API: validated against its CRDs, not Kubernetes'.
GATEWAY_KINDS = ("HTTPRoute",)


class UnavailableError(Exception):
    """The CRDs cannot be had here (no Go, or the module proxy refused): the reason, for a skip."""


def version() -> str:
    """The pinned release, as go.mod's require line gives it (v1.6.3)."""
    found = re.search(rf"^require {re.escape(MODULE)} (v\S+)$", (PIN / "go.mod").read_text(), re.M)
    assert found, f"{PIN / 'go.mod'} requires no {MODULE}"
    return found.group(1)


@cache
def crd_dir() -> Path:
    """The standard channel's CRD folder of the pinned release (downloaded once per machine)."""
    if shutil.which("go") is None:
        raise UnavailableError(
            f"go is not on PATH: the Gateway API CRDs come from {MODULE}'s module"
        )
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version()}"],
        cwd=PIN,
        capture_output=True,
        text=True,
        check=False,
    )
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or "Dir" not in info:
        raise UnavailableError(
            f"go mod download {MODULE}@{version()} failed: {info or result.stderr}"
        )
    found = Path(info["Dir"]) / "config" / "crd" / "standard"
    assert (found / "gateway.networking.k8s.io_httproutes.yaml").is_file(), found
    return found
