"""helm lint --strict and yamllint on what the chart renders, for every scenario and both Helm
majors."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from multinode_llm_testing.chartlib import CHART, ROOT, run_helm, scenarios, template

SCENARIOS = scenarios()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_helm_lint_strict_passes(major: str, name: str) -> None:
    result = run_helm(major, "lint", "--strict", str(CHART), "-f", str(SCENARIOS[name]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_helm_lint_strict_fails_on_a_typo(major: str) -> None:
    # The schema's refusals fail lint as Helm's own; the chart's are in test_refusals.py's table.
    result = run_helm(
        major, "lint", "--strict", str(CHART), "--set", "model.uri=hf://a/b", "--set", "modle=1"
    )
    assert result.returncode != 0
    assert "modle" in result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_rendered_manifests_pass_yamllint(major: str, name: str, tmp_path: Path) -> None:
    yamllint = shutil.which("yamllint")
    if yamllint is None:
        pytest.skip("yamllint is not installed here (tox -e chart installs it)")
    render = template(major, [SCENARIOS[name]])
    assert render.returncode == 0, render.stderr
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(render.stdout)
    proc = subprocess.run(
        [yamllint, "--strict", "-c", str(ROOT / ".yamllint"), str(manifest)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
