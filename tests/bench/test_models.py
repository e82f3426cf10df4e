"""The benchmarks' model dimension: each figure names the model it served, a rerun on one model
keeps the other's figures, and the report labels every figure with its model (bench/models.py).
Made-up figures; nothing is measured here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from records import ROOT

from bench import models, report
from bench.__main__ import _merged
from bench.figures import Figure, Goal, Load


def _figure(
    source: str, model: str, name: str, value: float, executor: str = "mp"
) -> dict[str, Any]:
    benchmark = {"group": "startup", "serving": "serving"}.get(source, "cache")
    figure = Figure(
        benchmark,
        name,
        "s",
        value,
        50.0,
        "one plain vLLM server",
        {"executor": executor, "row": "start-up to Ready"} if source == "group" else {"x": 1},
        Load(0.1, 0.2),
        goal=Goal("difference", "<=", 3.0, "within 3 s of plain") if source == "group" else None,
        source=source,
        model=model,
    )
    return figure.record()


def _results(*figures: dict[str, Any]) -> dict[str, Any]:
    return {
        "generated": "2026-12-03T12:00:00+0000",
        "command": "python -m bench",
        "quick": False,
        "seconds": 1.0,
        "machine": {"cores": 2, "memory_gib": 24.0, "python": "3.11.7"},
        "figures": list(figures),
    }


def test_a_run_on_the_real_model_keeps_the_tiny_models_figures() -> None:
    old_tiny = _figure("group", "", "PP=2 mp group -> Ready", 55.0)  # written before models
    del old_tiny["model"]
    cache = _figure("cache-warm", "", "warm blob", 1.0)
    new_real = _figure("group", "smollm2", "PP=2 mp group -> Ready", 90.0)
    merged = _merged(_results(old_tiny, cache), _results(new_real))
    assert [(f["source"], models.model_of(f)) for f in merged["figures"]] == [
        ("group", "tiny"),
        ("cache-warm", ""),
        ("group", "smollm2"),
    ]
    rerun_tiny = _figure("group", "tiny", "PP=2 mp group -> Ready", 54.0)
    again = _merged(merged, _results(rerun_tiny))
    assert sorted((models.model_of(f), f["value"]) for f in again["figures"]) == [
        ("", 1.0),
        ("smollm2", 90.0),
        ("tiny", 54.0),
    ]


def test_a_group_run_of_one_executor_keeps_the_other_executors_figures() -> None:
    """``--executors ray --merge`` replaces the Ray figures and plain vLLM's, not mp's."""
    mp = _figure("group", "tiny", "PP=2 mp group -> Ready", 54.0)
    ray = _figure("group", "tiny", "PP=2 Ray group -> Ready", 57.0, executor="ray")
    plain = _figure("group", "tiny", "plain vLLM warm restart", 20.0, executor="")
    new_ray = _figure("group", "tiny", "PP=2 Ray group -> Ready", 56.0, executor="ray")
    new_plain = _figure("group", "tiny", "plain vLLM warm restart", 21.0, executor="")
    merged = _merged(_results(mp, ray, plain), _results(new_ray, new_plain))
    assert sorted((f["config"]["executor"], f["value"]) for f in merged["figures"]) == [
        ("", 21.0),
        ("mp", 54.0),
        ("ray", 56.0),
    ]


def test_the_report_labels_each_figure_with_its_model(tmp_path: Path) -> None:
    figures = [
        _figure("group", "smollm2", "PP=2 mp group -> Ready", 90.0),
        _figure("group", "tiny", "PP=2 mp group -> Ready", 55.0),
        _figure("cache-warm", "", "warm blob", 1.0),
    ]
    report.write(_results(*figures), tmp_path)
    text = (tmp_path / "REPORT.md").read_text()
    assert "### On the SmolLM2-135M: SmolLM2-135M-Instruct" in text
    assert "### On the tiny model: tiny random-weight Llama" in text
    assert "| startup (SmolLM2-135M): PP=2 mp group -> Ready | 90.0 s |" in text
    assert "| startup (tiny model): PP=2 mp group -> Ready | 55.0 s |" in text
    assert "| cache: warm blob |" in text
    side = "\n".join(report.side_by_side(figures))
    assert "| start-up to Ready (SmolLM2-135M) | 90.0 s |" in side
    assert "| start-up to Ready (tiny model) | 55.0 s |" in side
    goals = report.goals_text(figures)
    assert "PP=2 mp group -> Ready (SmolLM2-135M)" in goals
    assert "PP=2 mp group -> Ready (tiny model)" in goals


def test_an_unknown_model_is_refused_naming_the_choices() -> None:
    command = [sys.executable, "-m", "bench", "--only", "group", "--model", "llama"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "--model: invalid choice: 'llama' (choose from 'smollm2', 'tiny')" in run.stderr


def test_the_real_models_folder_is_the_one_real_model_names() -> None:
    from multinode_llm_local import real_model

    assert models.SMOLLM2.folder == models.SMOLLM2.served == real_model.NAME
