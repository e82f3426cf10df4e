"""What the pod's accelerator means for Ray and the collective library, as the chart tells it.

The chart's table (charts/multinode-llm/accelerators.yaml) is the one place that knows vendors; it
renders the entry of ``gpu.resourceName`` into two variables, so the runtime holds no copy of it
(docs/accelerators.md):

- ``MULTINODE_LLM_RAY_RESOURCE``: the Ray resource the pod's GPUs are given as. ``GPU`` is Ray's
  own (``ray start --num-gpus``, which Ray requires for it); any other name is a custom resource.
- ``MULTINODE_LLM_SOCKET_IFNAME_ENV``: comma-separated names of the collective library's
  interface variables, set to the interface holding the pod IP when the chart sets none.

Unset (the runtime started without the chart), both take the table's default entry's values;
``tests/unit/test_accelerators.py`` checks that they still match it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from multinode_llm.errors import UserError

RAY_RESOURCE_ENV = "MULTINODE_LLM_RAY_RESOURCE"
SOCKET_IFNAME_ENV = "MULTINODE_LLM_SOCKET_IFNAME_ENV"
RAY_GPU = "GPU"  # Ray's built-in accelerator resource, given by --num-gpus only
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Accelerator:
    ray_resource: str = RAY_GPU
    socket_ifname_env: tuple[str, ...] = ("NCCL_SOCKET_IFNAME",)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Accelerator:
        default = cls()
        ray_resource = env.get(RAY_RESOURCE_ENV, default.ray_resource)
        if not ray_resource or ray_resource == "CPU":
            raise UserError(
                f"{RAY_RESOURCE_ENV}={ray_resource!r}: name the Ray resource of the pod's GPUs "
                "(GPU, or a custom one such as HPU); the chart sets it from gpu.resourceName"
            )
        raw = env.get(SOCKET_IFNAME_ENV)
        names = default.socket_ifname_env if raw is None else _names(raw)
        return cls(ray_resource=ray_resource, socket_ifname_env=names)

    def ray_start_arguments(self, count: int) -> list[str]:
        """The ``ray start`` arguments that give this node ``count`` of the pod's GPUs."""
        if self.ray_resource == RAY_GPU:
            return ["--num-gpus", str(count)]
        return ["--resources", json.dumps({self.ray_resource: count})]


def _names(raw: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in raw.split(",") if name.strip())
    for name in names:
        if not _ENV_NAME.match(name):
            raise UserError(
                f"{SOCKET_IFNAME_ENV}={raw!r}: {name!r} is not a variable name; the chart sets it "
                "from gpu.resourceName"
            )
    return names
