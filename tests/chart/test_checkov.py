"""checkov on every scenario's rendered manifests, with the skips of checkov.yaml, each with its
reason."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from multinode_llm_testing.chartlib import scenarios, template

pytestmark = pytest.mark.checkov
CONFIG = Path(__file__).with_name("checkov.yaml")


def test_every_skipped_check_says_why() -> None:
    skips = [line for line in CONFIG.read_text().splitlines() if re.match(r"^\s+- CKV", line)]
    assert skips, "no skip-check entries"
    for line in skips:
        reason = line.partition("#")[2].strip()
        assert len(reason) > 20, f"skipped without a reason: {line.strip()}"


def test_checkov_passes_on_every_rendered_scenario(tmp_path: Path) -> None:
    checkov = shutil.which("checkov")
    if checkov is None:
        pytest.skip("checkov is not installed here: run `tox -e checkov`")
    for name, values in scenarios().items():
        render = template("helm4", [values])
        assert render.returncode == 0, render.stderr
        (tmp_path / f"{name}.yaml").write_text(render.stdout)
    proc = subprocess.run(
        [checkov, "--config-file", str(CONFIG), "-d", str(tmp_path), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads(proc.stdout)
    # checkov writes one report per framework: a dict for one, a list for several.
    reports = report if isinstance(report, list) else [report]
    passed = sum(r["summary"]["passed"] for r in reports)
    failed = [f for r in reports for f in r["results"]["failed_checks"]]
    assert passed > 0, proc.stdout[:2000]
    assert failed == [], [(f["check_id"], f["resource"], f["check_name"]) for f in failed]
