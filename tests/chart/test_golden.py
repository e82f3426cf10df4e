"""Golden renders: examples/output-<scenario>.yaml must be exactly what the chart renders now.

Regenerate with `bash hack/render-examples.sh` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from multinode_llm_testing.chartlib import EXAMPLES, template

VALUES = sorted(EXAMPLES.glob("values-*.yaml"))


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
