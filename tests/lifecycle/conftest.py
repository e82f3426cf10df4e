"""Fixtures of the lifecycle suite: each Helm major, skipped with the fix when it is missing."""

from __future__ import annotations

import pytest
from multinode_llm_testing import chartlib


@pytest.fixture(params=chartlib.HELM_MAJORS)
def major(request: pytest.FixtureRequest) -> str:
    """The helm that renders (Argo CD 3.0 to 3.4 run Helm 3, 3.5 runs Helm 4) and whose release
    semantics helm_model follows."""
    name: str = request.param
    if not chartlib.helm(name).exists():
        pytest.skip(f"{chartlib.helm(name)} missing: run `bash hack/install-tools.sh`")
    return name
