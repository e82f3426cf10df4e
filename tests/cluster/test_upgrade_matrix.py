"""docs/upgrades.md's matrix, from real runs: each change installed and upgraded by real helm 4 on
the real control plane and reconciled by the default KServe release's own manager
(``hack/upgrade-matrix.py --cluster``; no pod starts, each pod is admitted by a server-side dry
run). The doc must be what the real runs give, and the emulation of KServe, which
``hack/upgrade-matrix.py --check`` and tests/chart/test_upgrades.py use, must agree with them row
by row. tests/cluster/test_releases.py compares every other built release with its emulation.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
from multinode_llm_local.kserve import releases
from multinode_llm_testing.chartlib import hack_script
from realcluster import Clusters, RealCluster


@pytest.fixture(scope="module")
def cluster(clusters: Clusters) -> Iterator[RealCluster]:
    running = clusters.get(releases.default().version)
    running.install_prometheus_operator_crds()
    running.install_gateway_api()
    yield running
    running.uninstall_gateway_api()
    running.uninstall_prometheus_operator_crds()


@pytest.fixture(scope="module")
def matrix() -> ModuleType:
    return hack_script("upgrade-matrix")


def test_the_doc_is_what_real_helm_and_kserve_do_and_the_emulation_agrees(
    cluster: RealCluster, matrix: ModuleType
) -> None:
    real = matrix.measure_all_live(matrix.Live(cluster.kubeconfig))
    emulated = matrix.measure_all()
    assert matrix.disagreements(real, emulated) == []
    assert matrix.unwaited(real) == []  # each row's --wait --wait-for-jobs waits for its restart
    doc = matrix.DOC.read_text()
    assert f"{matrix.table(real)}\n\n{matrix.summary(real)}" in doc, (
        "docs/upgrades.md is not what the real runs give: run hack/upgrade-matrix.py --cluster"
    )
