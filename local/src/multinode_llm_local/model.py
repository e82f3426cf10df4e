"""A tiny random-weight Llama and a tokenizer trained here: a real model for vLLM, with no Hub.

Hidden size 128, 4 layers, 4 attention heads of size 32, a byte-level BPE tokenizer of 1024 tokens
trained on a built-in text, and a chat template. Everything is deterministic: the same directory
comes out byte for byte on every run, so tests and benchmarks can compare runs. It answers nonsense
quickly, which is all the serving path needs.

Needs ``numpy``, ``safetensors`` and ``tokenizers`` (vLLM brings all three); imported on call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HIDDEN = 128
LAYERS = 4
HEADS = 4
HEAD_DIM = HIDDEN // HEADS  # 32: vLLM's CPU attention wants head sizes of at least 32
INTERMEDIATE = 256
VOCAB = 1024
MAX_POSITIONS = 2048
SEED = 20240611

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

_TEXT = (
    "the a model node group head worker pipeline tensor parallel serve token request answer "
    "cluster ray engine cache volume pod probe ready live start wait join lost restart fast "
    "slow big small one two four eight hello world question chat complete stream text input "
    "output kubernetes helm chart value schema storage shared network address port metric latency"
)
_WORDS = _TEXT.split()


def make_model(directory: str | Path) -> Path:
    """Write the tiny model into ``directory`` (created if needed); return its path."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer()
    tokenizer.save(str(target / "tokenizer.json"))
    vocab_size = tokenizer.get_vocab_size()
    _write_json(target / "config.json", _config(vocab_size, tokenizer))
    _write_json(target / "tokenizer_config.json", _tokenizer_config())
    _write_json(
        target / "special_tokens_map.json", {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    )
    _write_json(
        target / "generation_config.json",
        {"bos_token_id": tokenizer.token_to_id(BOS), "eos_token_id": tokenizer.token_to_id(EOS)},
    )
    _write_weights(target / "model.safetensors", vocab_size)
    return target


def _corpus() -> list[str]:
    """A fixed text to train the tokenizer on: every pair of words, in a fixed order."""
    return [f"{a} {b}. {b.capitalize()} {a}, {len(a) + len(b)}!" for a in _WORDS for b in _WORDS]


def _train_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    return tokenizer


def _config(vocab_size: int, tokenizer: Any) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "vocab_size": vocab_size,
        "bos_token_id": tokenizer.token_to_id(BOS),
        "eos_token_id": tokenizer.token_to_id(EOS),
        "pad_token_id": tokenizer.token_to_id(PAD),
        "torch_dtype": "float32",
    }


def _tokenizer_config() -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def _write_weights(path: Path, vocab_size: int) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(SEED)

    def dense(rows: int, cols: int) -> Any:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    tensors: dict[str, Any] = {"model.embed_tokens.weight": dense(vocab_size, HIDDEN)}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[f"{prefix}.self_attn.{name}.weight"] = dense(HIDDEN, HIDDEN)
        tensors[f"{prefix}.mlp.gate_proj.weight"] = dense(INTERMEDIATE, HIDDEN)
        tensors[f"{prefix}.mlp.up_proj.weight"] = dense(INTERMEDIATE, HIDDEN)
        tensors[f"{prefix}.mlp.down_proj.weight"] = dense(HIDDEN, INTERMEDIATE)
        tensors[f"{prefix}.input_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        tensors[f"{prefix}.post_attention_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    tensors["model.norm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    tensors["lm_head.weight"] = dense(vocab_size, HIDDEN)
    save_file(tensors, str(path), metadata={"format": "pt"})
    path.chmod(0o644)  # safetensors writes for its owner only; the pods run as another user


def _write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
