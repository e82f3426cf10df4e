"""The tiny model: deterministic, and loadable by the tokenizer vLLM uses."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import pytest
from multinode_llm_local.model import HEAD_DIM, HEADS, HIDDEN, LAYERS, make_model


def _digest(directory: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.iterdir())
    }


def test_tiny_model_is_the_same_on_every_run(tiny_model: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="mnrt-model-") as again:
        assert _digest(make_model(again)) == _digest(tiny_model)


def test_tiny_model_has_the_promised_shape(tiny_model: Path) -> None:
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]) == (
        HIDDEN,
        LAYERS,
        HEADS,
    )
    assert config["head_dim"] == HEAD_DIM == 32


def test_tiny_tokenizer_round_trips_and_has_a_chat_template(tiny_model: Path) -> None:
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tiny_model))
    ids = tokenizer("hello world, the model answers")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "hello world, the model answers"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<s><|user|>\nhi</s>\n<|assistant|>\n"
