"""Fixtures of the chart suite: the helm binaries, skipped with the fix when they are missing."""

from __future__ import annotations

import pytest
from multinode_llm_testing.chartlib import HELM_MAJORS, helm


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "checkov: runs checkov (tox -e checkov)")


@pytest.fixture(params=HELM_MAJORS)
def major(request: pytest.FixtureRequest) -> str:
    """Each Helm major in turn (Argo CD renders with Helm 3, users run Helm 4)."""
    name: str = request.param
    if not helm(name).exists():
        pytest.skip(f"{helm(name)} missing: run `bash hack/install-tools.sh`")
    return name


@pytest.fixture
def helm4() -> str:
    if not helm("helm4").exists():
        pytest.skip(f"{helm('helm4')} missing: run `bash hack/install-tools.sh`")
    return "helm4"
