"""Golden renders: examples/output-<scenario>.yaml must be exactly what the chart renders now; and
each scenario is a chart-testing case too, ci/<scenario>-values.yaml being a link to
examples/values-<scenario>.yaml (one file, no copy to drift).

Regenerate both with `bash hack/render-examples.sh` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from multinode_llm_testing.chartlib import CI_VALUES, EXAMPLES, template

VALUES = sorted(EXAMPLES.glob("values-*.yaml"))
# ci/ files of CI's own (GPU-free, kind): no example stands behind them.
CI_ONLY = {"kind-values.yaml"}


def test_every_example_has_a_golden_render_and_no_golden_is_orphaned() -> None:
    outputs = {p.name.removeprefix("output-") for p in EXAMPLES.glob("output-*.yaml")}
    inputs = {p.name.removeprefix("values-") for p in VALUES}
    assert inputs, "no examples/values-*.yaml"
    assert outputs == inputs, "run `bash hack/render-examples.sh`"


@pytest.mark.parametrize("values", VALUES, ids=lambda p: p.stem.removeprefix("values-"))
def test_the_golden_render_has_not_drifted(helm4: str, values: Path) -> None:
    golden = values.with_name(values.name.replace("values-", "output-", 1))
    render = template(helm4, [values])
    assert render.returncode == 0, render.stderr
    assert golden.exists(), f"{golden.name} missing: run `bash hack/render-examples.sh`"
    assert render.stdout == golden.read_text(), (
        f"{golden.name} drifted from the chart: "
        "run `bash hack/render-examples.sh` and review the diff"
    )


@pytest.mark.parametrize("values", VALUES, ids=lambda p: p.stem.removeprefix("values-"))
def test_every_example_is_a_chart_testing_case_by_a_link_not_a_copy(values: Path) -> None:
    scenario = values.stem.removeprefix("values-")
    case = CI_VALUES / f"{scenario}-values.yaml"
    assert case.is_symlink(), f"ci/{case.name} is not a link: run `bash hack/render-examples.sh`"
    assert os.readlink(case) == f"../examples/{values.name}"


def test_every_ci_file_is_an_example_or_ci_s_own() -> None:
    for case in sorted(CI_VALUES.glob("*")):
        if case.is_symlink():
            target = (CI_VALUES / os.readlink(case)).resolve()
            assert target.parent == EXAMPLES.resolve(), f"ci/{case.name} -> {target}"
            assert target.exists(), f"ci/{case.name}: its example is gone"
            assert case.name == target.name.removeprefix("values-").replace(".yaml", "-values.yaml")
        else:
            assert case.name in CI_ONLY, (
                f"ci/{case.name} is a copy: make the scenario examples/values-NAME.yaml and run"
                " `bash hack/render-examples.sh`, or list it in CI_ONLY if only CI uses it"
            )
