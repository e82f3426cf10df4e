"""The Gateway API CRDs the chart's HTTPRoute is checked against, from the module release that
``testing/go/gateway-api/go.mod`` pins: the standard channel's ``config/crd/standard``."""

from __future__ import annotations

from pathlib import Path

from multinode_llm_testing import gomodules
from multinode_llm_testing.gomodules import UnavailableError

__all__ = ["GATEWAY_KINDS", "UnavailableError", "crd_dir", "version"]

PIN, MODULE = "gateway-api", "sigs.k8s.io/gateway-api"
# The kinds the chart renders from Gateway API: validated against its CRDs, not Kubernetes'.
GATEWAY_KINDS = ("HTTPRoute",)


def version() -> str:
    """The pinned release (v1.6.3)."""
    return gomodules.version(PIN, MODULE)


def crd_dir() -> Path:
    """The standard channel's CRD folder of the pinned release (downloaded once per machine)."""
    found = gomodules.module_dir(PIN, MODULE) / "config" / "crd" / "standard"
    assert (found / "gateway.networking.k8s.io_httproutes.yaml").is_file(), found
    return found
