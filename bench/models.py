"""The models the vLLM benchmarks (serving, group) run on: the real one, or the tiny one for speed.

``smollm2`` (the default) is the real instruct model, SmolLM2-135M-Instruct
(``multinode_llm_local.real_model``): what a user's model costs per token, layer and byte, at a
small scale. ``tiny`` is the generated random-weight Llama (``multinode_llm_local.model``): its
start-up is mostly vLLM's own and its tokens are almost free, so it isolates our overheads; the
quick run (``--quick``) uses it. Every figure records its model (``Figure.model``), the report
labels each figure with it, and a rerun replaces only the figures of the model it ran on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BenchModel:
    key: str  # ``--model`` and ``Figure.model``
    folder: str  # its folder on a claim
    served: str  # the name vLLM serves it under
    described: str  # what a figure's config says it was
    label: str  # how the report names it beside a figure
    place: Callable[[Path], None]  # puts the model into a folder, made or copied from its cache


def _tiny(folder: Path) -> None:
    from multinode_llm_local.cluster import make_model  # made readable for the pods' user

    make_model(folder)


def _smollm2(folder: Path) -> None:
    from multinode_llm_local import real_model

    real_model.copy_into(folder)


TINY = BenchModel(
    key="tiny",
    folder="tiny-llama",  # what the built-in local values serve: pvc://models/tiny-llama
    served="tiny-llama",
    described="tiny random-weight Llama (multinode_llm_local.model)",
    label="tiny model",
    place=_tiny,
)
SMOLLM2 = BenchModel(
    key="smollm2",
    folder="smollm2-135m-instruct",  # multinode_llm_local.real_model.NAME
    served="smollm2-135m-instruct",
    described="SmolLM2-135M-Instruct, bfloat16 (multinode_llm_local.real_model)",
    label="SmolLM2-135M",
    place=_smollm2,
)
MODELS = {model.key: model for model in (SMOLLM2, TINY)}
DEFAULT, QUICK = SMOLLM2, TINY
# Figures written before the model was recorded were measured on the tiny model.
UNRECORDED = TINY.key
MODEL_BENCHMARKS = ("serving", "group")  # the ``--only`` names whose figures have a model


def model_of(figure: dict[str, object]) -> str:
    """The model key of a results.json figure; "" for a benchmark that serves no model."""
    if figure.get("source") not in MODEL_BENCHMARKS:
        return ""
    return str(figure.get("model") or UNRECORDED)


def placed(model: BenchModel, claim: Path) -> Path:
    """``model``'s folder on ``claim``, put there once per run."""
    folder = claim / model.folder
    if not (folder / "config.json").exists():
        model.place(folder)
    return folder
