"""KServe's own merge of an LLMInferenceService with its presets, run by KServe's code.

``local/go/llmisvc-v0.19.0/llmisvc-presets`` is a small program over ``MergeSpecs`` and
``ReplaceVariables`` (``pkg/controller/v1alpha2/llmisvc/config_merge.go`` at the KServe release its
module pins): what the llmisvc controller does before it builds a service's LeaderWorkerSet,
without the controller, its webhooks and its gateway stack around it. The same module builds that
release's controller, which ``controlplane/llmisvc.py`` installs on a real cluster.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml
from multinode_llm.errors import UserError

from multinode_llm_local.controlplane import build

Obj = dict[str, Any]
# The chart's default release: the merge's Go API (ReplaceVariables' arguments) differs between
# releases, so one is built; the controller itself runs at every release (test_llmisvc.py).
MODULE = "llmisvc-v0.19.0"
MERGE = "llmisvc-presets"  # its merge program (llmisvc-presets/main.go)


def module() -> build.Module:
    return build.modules()[MODULE]


def release() -> str:
    """The KServe release whose code merges (``0.19.0``)."""
    return module().required("github.com/kserve/kserve").removeprefix("v")


def merge(service: Obj, presets: list[Obj], tls: bool = False, progress: Any = print) -> Obj:
    """``{"config": ..., "groupSize": ...}``: the service merged over ``presets`` with KServe's
    template executed (``tls``: KServe's EnableTLS), and the LeaderWorkerSet's group size."""
    program = build.program(module(), MERGE, progress)
    with tempfile.TemporaryDirectory(prefix="llmisvc-") as tmp:
        paths = []
        for index, doc in enumerate([service, *presets]):
            path = Path(tmp) / f"{index}.yaml"
            path.write_text(yaml.safe_dump(doc))
            paths.append(str(path))
        flags = ["-tls"] if tls else []
        result = subprocess.run(
            [str(program), *flags, *paths], capture_output=True, text=True, check=False
        )
    if result.returncode != 0:
        raise UserError(f"KServe {release()}'s merge refused it: {result.stderr.strip()}")
    merged: Obj = json.loads(result.stdout)
    return merged
