"""The run's table (stdout), ``REPORT.md`` with its PNG plots, and the README's summary table.

Everything here reads the results JSON only, so a report can be rebuilt from a committed
``results.json`` without measuring again: ``python -m bench.report bench/results.json``.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Record = dict[str, Any]
ANALYSIS = Path(__file__).with_name("analysis.md")  # hand-written: why each figure is what it is
README_START = "<!-- bench-table:start (written by python -m bench; do not edit) -->"
README_END = "<!-- bench-table:end -->"
SECTIONS = (
    ("serving", "Serving overhead", "serving.png"),
    ("startup", "Group start-up", "startup.png"),
    ("recovery", "Recovery", "recovery.png"),
    ("cache", "Model cache", "cache.png"),
)


def table(results: Record, figures: Sequence[Record] | None = None) -> str:
    """A plain-text table of every figure (what `python -m bench` prints)."""
    rows = [("figure", "value", "baseline", "ratio (range)", "goal", "load")]
    for figure in figures if figures is not None else results["figures"]:
        rows.append(_row(figure))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def markdown_table(figures: Sequence[Record]) -> str:
    rows = [_row(figure) for figure in figures]
    head = "| figure | value | baseline | ratio (range) | goal | load |\n|---|---|---|---|---|---|"
    return "\n".join([head, *("| " + " | ".join(row) + " |" for row in rows)])


def _row(figure: Record) -> tuple[str, str, str, str, str, str]:
    name = f"{figure['benchmark']}: {figure['name']}"
    if figure["skipped"]:
        return name, "-", "-", "-", f"skipped: {figure['skipped']}", _load(figure)
    value = _amount(figure["value"], figure["unit"])
    baseline = f"{_amount(figure['baseline'], figure['unit'])} ({figure['baseline_name']})"
    ratio = "-" if figure["ratio"] is None else f"{figure['ratio']:.2f}x"
    if figure.get("spread"):
        low, high = figure["spread"]
        ratio += f" ({low:.2f}-{high:.2f})"
    return name, value, baseline, ratio, _goal(figure), _load(figure)


def _amount(number: float | None, unit: str) -> str:
    if number is None:
        return "-"
    digits = 3 if abs(number) < 0.1 else 2 if abs(number) < 10 else 1 if abs(number) < 1000 else 0
    return f"{number:.{digits}f} {unit}".strip()


def _goal(figure: Record) -> str:
    goal = figure.get("goal")
    if not goal:
        return ""
    verdict = {True: "met", False: "MISSED", None: "-"}[figure["met"]]
    return f"{verdict}: {goal['text']}"


def _load(figure: Record) -> str:
    load = figure["load"]
    return f"{load['before']:.1f}->{load['after']:.1f}"


# REPORT.md ---------------------------------------------------------------------------------------


def write(results: Record, directory: Path) -> None:
    """REPORT.md and the plots of the sections that have figures."""
    figures = results["figures"]
    parts = [_header(results)]
    goals = [f for f in figures if f.get("goal")]
    if goals:
        parts += ["## Goals", "", markdown_table(goals), ""]
    for benchmark, title, png in SECTIONS:
        section = [f for f in figures if f["benchmark"] == benchmark]
        if not section:
            continue
        parts += [f"## {title}", ""]
        if _plot(benchmark, section, directory / png):
            parts += [f"![{title}]({png})", ""]
        parts += [markdown_table(section), ""]
        parts += _details(benchmark, section)
    if ANALYSIS.exists() and directory.resolve() == ANALYSIS.parent.resolve():
        parts += [ANALYSIS.read_text().strip(), ""]
    (directory / "REPORT.md").write_text("\n".join(parts))


def _header(results: Record) -> str:
    machine = results["machine"]
    versions = ", ".join(
        f"{k} {machine[k]}" for k in ("vllm", "ray", "huggingface_hub") if k in machine
    )
    return (
        "# Benchmarks\n\n"
        f"`{results['command']}` on {results['generated']}, {results['seconds']:.0f} s: "
        f"{machine['cores']} cores, {machine['memory_gib']} GiB, Python {machine['python']}, "
        f"{versions}. Every figure is measured against a baseline from the same run; the ratio is "
        "value / baseline (for paired runs, the median of the pairs' ratios, with their range). "
        "`load` is the 1-minute load average before -> after the measurement (the machine, shared "
        "with other developers' tests, has 2 cores). Raw numbers, per-run values and the exact "
        "configuration of each figure are in [`results.json`](results.json).\n"
    )


def _details(benchmark: str, figures: Sequence[Record]) -> list[str]:
    """The start-up timeline and the recovery stages, as tables."""
    config: Record = next((f["config"] for f in figures if f.get("config")), {})
    lines: list[str] = []
    if benchmark == "startup" and config.get("timelines_s"):
        events = _median_timeline(config["timelines_s"])
        plain = statistics.median(config["plain_s"])
        lines += [
            "Timeline of a PP=2 group start (median over starts, seconds after the first "
            f"container started; one plain vLLM server lists the model after {plain:.1f} s):",
            "",
        ]
        lines += ["| event | s |", "|---|---|"]
        lines += [f"| {name} | {at:.1f} |" for name, at in events]
        lines.append("")
    if benchmark == "recovery" and config.get("stages_s"):
        lines += [
            "Stages after the worker's container was killed (seconds):",
            "",
            "| stage | s |",
            "|---|---|",
        ]
        lines += [
            f"| {name} | {at:.1f} |"
            for name, at in sorted(config["stages_s"].items(), key=lambda kv: kv[1])
        ]
        how = config.get("head_previous_container_ended")
        if how:
            lines += ["", f"The head's previous container ended with reason `{how}`."]
        lines.append("")
    return lines


def _median_timeline(timelines: Sequence[dict[str, float]]) -> list[tuple[str, float]]:
    """Each event's median time over the starts, under names without addresses (they differ)."""
    merged: dict[str, list[float]] = {}
    for timeline in timelines:
        for name, at in timeline.items():
            merged.setdefault(
                re.sub(r"\d+\.\d+\.\d+\.\d+ ?", "", name).replace("  ", " "), []
            ).append(at)
    medians = {name: statistics.median(times) for name, times in merged.items()}
    return sorted(medians.items(), key=lambda kv: kv[1])


# Plots -------------------------------------------------------------------------------------------


def _plot(benchmark: str, figures: Sequence[Record], path: Path) -> bool:
    measured = [f for f in figures if not f["skipped"]]
    if not measured:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = {
        "serving": _plot_serving,
        "startup": _plot_startup,
        "recovery": _plot_recovery,
        "cache": _plot_cache,
    }[benchmark](plt, measured)
    if drawn is None:
        return False
    drawn.tight_layout()
    drawn.savefig(path, dpi=110)
    plt.close(drawn)
    return True


def _plot_serving(plt: Any, figures: Sequence[Record]) -> Any:
    names = [f["name"].rsplit(": ", 1)[0] for f in figures if f["unit"] not in ("cores", "x plain")]
    scenarios = list(dict.fromkeys(names))  # in the order measured
    metrics = ("throughput", "p50 latency", "p99 latency", "CPU per request")
    figure, axis = plt.subplots(figsize=(9, 0.45 * len(scenarios) * len(metrics) / 2 + 1.5))
    height = 0.2
    for offset, metric in enumerate(metrics):
        ratios: list[float] = []
        errors: list[list[float]] = [[], []]
        for scenario in scenarios:
            record = next(f for f in figures if f["name"] == f"{scenario}: {metric}")
            ratio = record["ratio"]
            low, high = record.get("spread") or (ratio, ratio)
            ratios.append(ratio)
            errors[0].append(ratio - low)
            errors[1].append(high - ratio)
        positions = [i + (offset - 1.5) * height for i in range(len(scenarios))]
        axis.barh(positions, ratios, height, xerr=errors, label=f"{metric} ours / plain", capsize=2)
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.axvline(0.98, color="red", linestyle="--", linewidth=0.8, label="throughput goal 0.98")
    axis.set_yticks(range(len(scenarios)), scenarios)
    axis.invert_yaxis()
    axis.set_xlabel("ratio ours / plain vLLM (median of paired runs, bars: range)")
    axis.set_title("Serving overhead: our runtime's endpoint vs plain vLLM")
    axis.legend(fontsize=8, loc="lower right")
    return figure


def _plot_startup(plt: Any, figures: Sequence[Record]) -> Any:
    config = figures[0]["config"]
    if not config.get("timelines_s"):
        return None
    events = _median_timeline(config["timelines_s"])
    plain = statistics.median(config["plain_s"])
    figure, axis = plt.subplots(figsize=(9, 0.35 * len(events) + 1.5))
    axis.scatter([at for _, at in events], range(len(events)), zorder=3)
    for index, (_name, at) in enumerate(events):
        axis.hlines(index, 0, at, color="lightgray", zorder=1)
    axis.axvline(
        plain, color="green", linestyle="--", label=f"one plain vLLM server ready ({plain:.1f} s)"
    )
    axis.axvline(plain + 5, color="red", linestyle=":", label="goal: plain + 5 s")
    axis.set_yticks(range(len(events)), [name for name, _ in events])
    axis.invert_yaxis()
    axis.set_xlabel("seconds after the first container started (median over starts)")
    times = dict(events)
    if "vLLM started" in times and "engine answers (bench poll)" in times:
        axis.axvspan(
            times["vLLM started"],
            times["engine answers (bench poll)"],
            color="tab:blue",
            alpha=0.08,
            label="vLLM starting (its Ray executor, two pipeline stages)",
        )
    axis.set_title("PP=2 group start-up on the local cluster")
    axis.legend(fontsize=8, loc="upper center")
    return figure


def _plot_recovery(plt: Any, figures: Sequence[Record]) -> Any:
    record = figures[0]
    stages = sorted(record["config"].get("stages_s", {}).items(), key=lambda kv: kv[1])
    if not stages:
        return None
    figure, axis = plt.subplots(figsize=(9, 0.4 * len(stages) + 1.5))
    axis.barh(range(len(stages)), [at for _, at in stages], color="tab:orange")
    axis.axvline(
        record["baseline"],
        color="green",
        linestyle="--",
        label=f"plain vLLM cold start ({record['baseline']:.1f} s)",
    )
    axis.set_yticks(range(len(stages)), [name for name, _ in stages])
    axis.invert_yaxis()
    axis.set_xlabel("seconds after the worker's container was killed")
    axis.set_title("Recovery of a PP=2 group from a killed worker")
    axis.legend(fontsize=8, loc="lower right")
    return figure


def _plot_cache(plt: Any, figures: Sequence[Record]) -> Any:
    panels = [
        ("warm: one large blob", [f for f in figures if f["name"].startswith("warm")]),
        ("cold fan-out: time to all 4 nodes", [f for f in figures if f["unit"] == "s"]),
        ("cold fan-out: upstream bytes", [f for f in figures if f["unit"] == "x model"]),
    ]
    panels = [(title, panel) for title, panel in panels if panel]
    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False)
    for axis, (title, panel) in zip(axes[0], panels, strict=True):
        positions = list(range(len(panel)))
        labels = [f["name"].split(": ")[0].split(", ")[-1] for f in panel]
        axis.bar([p - 0.2 for p in positions], [f["value"] for f in panel], 0.4, label="cache")
        baseline = panel[0]["baseline_name"].split(",")[0]
        axis.bar([p + 0.2 for p in positions], [f["baseline"] for f in panel], 0.4, label=baseline)
        labels = [f"{label}\n{f['ratio']:.2f}x" for label, f in zip(labels, panel, strict=True)]
        axis.set_xticks(positions, labels, fontsize=8)
        axis.set_xlim(-0.7, len(panel) - 0.3)
        axis.set_ylim(0, 1.3 * max(max(f["value"], f["baseline"]) for f in panel))
        axis.set_ylabel(panel[0]["unit"])
        axis.set_title(title, fontsize=10)
        axis.legend(fontsize=7, loc="upper left")
    return figure


# README ------------------------------------------------------------------------------------------


def summary_table(figures: Sequence[Record]) -> str:
    """The headline figures: every figure with a goal (serving throughput pooled per route), the
    join detection, the start-up's share that is ours, and recovery."""
    lines = ["| figure | ours | baseline | ratio (range) | goal |", "|---|---|---|---|---|"]
    for figure in figures:
        if figure["skipped"]:
            lines.append(f"| {_row(figure)[0]} | - | - | - | {_row(figure)[4]} |")
            continue
        wanted = ("noticed", "our share", "group serving again", "until every node")
        if figure.get("goal") or any(word in figure["name"] for word in wanted):
            row = _row(figure)
            lines.append(f"| {row[0]} | {row[1]} | {row[2]} | {row[3]} | {row[4]} |")
    return "\n".join(lines)


def update_readme(results: Record, readme: Path) -> None:
    """Replace the README's benchmark table (between its markers) with this run's goal figures."""
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        return
    block = "\n".join([README_START, "", summary_table(results["figures"]), "", README_END])
    pattern = re.escape(README_START) + ".*?" + re.escape(README_END)
    readme.write_text(re.sub(pattern, lambda _match: block, text, flags=re.DOTALL))


def main(argv: list[str] | None = None) -> int:
    """Rebuild REPORT.md and the plots (and for bench/, the README table) from a results.json."""
    path = Path((argv or sys.argv[1:] or ["bench/results.json"])[0])
    results = json.loads(path.read_text())
    write(results, path.parent)
    if path.parent.resolve() == ANALYSIS.parent.resolve():
        update_readme(results, ANALYSIS.parent.parent / "README.md")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
