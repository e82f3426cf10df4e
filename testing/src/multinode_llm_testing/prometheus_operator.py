"""The Prometheus Operator CRDs a real cluster serves so that the chart's monitors and rules can
be installed on it, from the module release ``testing/go/prometheus-operator/go.mod`` pins
(``example/prometheus-operator-crd``). Schema checks read PROMETHEUS_OPERATOR_CRD_DIR instead."""

from __future__ import annotations

from pathlib import Path

from multinode_llm_testing import gomodules

PIN, MODULE = "prometheus-operator", "github.com/prometheus-operator/prometheus-operator"
# The CRDs of the kinds the chart renders (monitoring.*).
CRDS = (
    "podmonitors.monitoring.coreos.com",
    "servicemonitors.monitoring.coreos.com",
    "prometheusrules.monitoring.coreos.com",
)


def crd_files() -> list[Path]:
    """The pinned release's CRD files of ``CRDS`` (downloaded once per machine)."""
    folder = gomodules.module_dir(PIN, MODULE) / "example" / "prometheus-operator-crd"
    found = [folder / f"monitoring.coreos.com_{crd.split('.')[0]}.yaml" for crd in CRDS]
    assert all(path.is_file() for path in found), folder
    return found
