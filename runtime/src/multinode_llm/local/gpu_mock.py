"""A FAKE GPU for tests: vLLM's CPU platform, presented to Ray as a GPU platform. Test-only.

vLLM's CPU platform refuses the Ray executor (it has no Ray device key), yet multi-node serving
needs Ray. This vLLM platform plugin (entry point group ``vllm.platform_plugins``, see
runtime/pyproject.toml) is the CPU platform with ``ray_device_key = "GPU"``: with each Ray node
started with ``--num-gpus N``, vLLM places its workers on those fake GPUs and computes on the CPU.

It activates only when ``MULTINODE_LLM_GPU_MOCK=1`` is in the environment (of every node's
`ray start` and of vLLM); otherwise ``register()`` returns None and vLLM never sees it. Only the
local cluster, the runtime tests and the kind CI values set it; a production pod never does.

The platform class is built on first access (module ``__getattr__``), so loading this module to ask
``register()`` imports nothing of vLLM.
"""

from __future__ import annotations

import os
from typing import Any

ENV = "MULTINODE_LLM_GPU_MOCK"
PLATFORM = f"{__name__}.GpuMockPlatform"


def register() -> str | None:
    """vLLM's platform plugin hook: the platform's qualified name when activated, else None."""
    return PLATFORM if os.environ.get(ENV) == "1" else None


def __getattr__(name: str) -> Any:
    if name != "GpuMockPlatform":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from vllm.platforms.cpu import CpuPlatform  # only vLLM, once activated, gets here

    platform = type(
        "GpuMockPlatform",
        (CpuPlatform,),
        {
            "ray_device_key": "GPU",
            "__doc__": "vLLM's CPU platform, with Ray GPUs as its devices (FAKE).",
        },
    )
    globals()[name] = platform
    return platform
