"""An image's layers as containers/storage keeps them (overlay driver): each layer's own files.

Reads the store's own indexes (``overlay-images/images.json``, ``overlay-layers/layers.json``)
rather than exporting the image: the serving image's layers are gigabytes, and each layer's
``diff`` directory is exactly what that layer adds, deletions included as whiteouts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.image.rootfs import buildah


@dataclass(frozen=True)
class Layer:
    id: str
    diff: Path
    size: int


def graph_root() -> Path:
    return Path(json.loads(buildah("info"))["store"]["GraphRoot"])


def image_id(image: str) -> str:
    return buildah("images", "--no-trunc", "--quiet", image).splitlines()[0].removeprefix("sha256:")


def image_layers(image: str) -> list[Layer]:
    """The image's layers, bottom first."""
    root = graph_root()
    images = json.loads((root / "overlay-images" / "images.json").read_text())
    layers = {
        entry["id"]: entry
        for entry in json.loads((root / "overlay-layers" / "layers.json").read_text())
    }
    wanted = image_id(image)
    [entry] = [i for i in images if i["id"] == wanted]
    chain: list[Layer] = []
    layer_id: str | None = entry["layer"]
    while layer_id:
        layer = layers[layer_id]
        chain.append(
            Layer(layer_id, root / "overlay" / layer_id / "diff", layer.get("diff-size", 0))
        )
        layer_id = layer.get("parent")
    return chain[::-1]


def layer_files(layer: Layer) -> Iterator[str]:
    """Every path the layer adds or deletes, relative to the image root."""
    for directory, subdirectories, files in os.walk(layer.diff):
        relative = os.path.relpath(directory, layer.diff)
        for name in subdirectories + files:
            yield name if relative == "." else f"{relative}/{name}"
