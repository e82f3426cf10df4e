"""Every value is described once, by the `# --` comment where values.yaml sets it: the schema's
descriptions and the chart's README.md (what `helm show readme` prints) are what
hack/values-docs.py generates from those comments."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from multinode_llm_testing.chartlib import CHART, ROOT, hack_script, helm, run_helm


def values_docs() -> ModuleType:
    return hack_script("values-docs")


def test_every_value_is_documented_by_a_dash_dash_comment_on_itself_or_a_parent() -> None:
    module = values_docs()
    text = (CHART / "values.yaml").read_text()
    assert module.undocumented(yaml.safe_load(text), module.documented(text)) == []


def test_the_schema_describes_every_property() -> None:
    missing: list[str] = []

    def walk(schema: dict[str, Any], where: str) -> None:
        for name, prop in schema.get("properties", {}).items():
            if not prop.get("description"):
                missing.append(f"{where}.{name}")
            walk(prop, f"{where}.{name}")
        for name, definition in schema.get("definitions", {}).items():
            walk(definition, f"definitions.{name}")

    schema = json.loads((CHART / "values.schema.json").read_text())
    walk(schema, "")
    assert schema["additionalProperties"] is False
    assert missing == []


def test_every_schema_description_is_the_comment_on_the_same_key_in_values_yaml() -> None:
    module = values_docs()
    comments = {
        d.key: d.description for d in module.documented((CHART / "values.yaml").read_text())
    }
    properties = module.schema_properties(json.loads((CHART / "values.schema.json").read_text()))
    assert set(properties) == set(comments)
    differing = [k for k, prop in properties.items() if prop["description"] != comments[k]]
    assert differing == []


def test_the_schema_and_the_chart_readme_have_not_drifted_from_the_comments() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "values-docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("major", ["helm3", "helm4"])
def test_helm_show_readme_prints_the_values_table(major: str) -> None:
    shown = run_helm(major, "show", "readme", str(CHART))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("# multinode-llm\n")
    assert "\n## Values\n" in shown.stdout
    assert "| Key | Type | Default | Description |" in shown.stdout
    assert (
        "| `parallelism.tensor` | int | `1` | Tensor parallel size: GPUs per node" in shown.stdout
    )


def test_the_packaged_chart_carries_its_readme_and_schema(tmp_path: Path) -> None:
    packaged = run_helm("helm4", "package", str(CHART), "--destination", str(tmp_path))
    assert packaged.returncode == 0, packaged.stderr
    [archive] = tmp_path.glob("multinode-llm-*.tgz")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert {"multinode-llm/README.md", "multinode-llm/values.schema.json"} <= names


def test_the_root_readme_points_at_the_chart_readme_instead_of_copying_the_table() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "charts/multinode-llm/README.md" in readme
    assert "| Key | Type | Default | Description |" not in readme


def test_the_values_table_lists_the_fixed_values_api() -> None:
    module = values_docs()
    text = (CHART / "values.yaml").read_text()
    keys = {row.key for row in module.rows(module.documented(text), yaml.safe_load(text))}
    fixed = {
        "model.uri",
        "model.name",
        "model.hfTokenSecret.name",
        "model.hfTokenSecret.key",
        "model.storage.size",
        "model.storage.storageClassName",
        "model.storage.accessModes",
        "model.storage.existingClaim",
        "parallelism.tensor",
        "parallelism.pipeline",
        "gpu.resourceName",
        "gpu.customResourceTypes",
        "kserve.version",
        "kserve.deploymentMode",
        "inferenceService.minReplicas",
        "inferenceService.maxReplicas",
        "head.env",
        "head.resources",
        "worker.env",
        "worker.resources",
        "strategy.type",
        "shm.sizeLimit",
        "ray.port",
        "vllm.args",
        "modelCache.enabled",
        "modelCache.endpoint",
        "modelCache.upstream",
        "modelCache.store.type",
        "modelCache.store.size",
        "modelCache.storageContainer.enabled",
    }
    assert fixed <= keys, fixed - keys


def test_the_kserve_releases_doc_has_not_drifted_from_the_table() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "kserve-releases.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_prose_that_names_the_default_kserve_release_names_the_tables() -> None:
    """values.yaml's and the README's words about the default follow kserve-releases.yaml."""
    default = yaml.safe_load((CHART / "kserve-releases.yaml").read_text())["default"]
    values = (CHART / "values.yaml").read_text()
    assert f"Empty: the newest supported release, {default}." in values
    assert f"use {default}" in (CHART / "kserve-releases.yaml").read_text()


def test_the_readme_shows_what_helm_lint_prints_on_a_refused_value(helm4: str) -> None:
    """The chart CI example: its command run from the checkout prints each line the README shows
    (but the elided include chain, `  ...`), and exits as it says."""
    sample = values_docs().LINT_SAMPLE.splitlines()
    assert "\n".join(sample) in (CHART / "README.md").read_text()
    command, shown, code = sample[0], sample[1:-2], sample[-1]
    args = shlex.split(command.removeprefix("$ "))
    assert args[:2] == ["helm", "lint"]
    proc = subprocess.run(
        [str(helm(helm4)), *args[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": "/nonexistent"},
        timeout=120,
        check=False,
    )
    printed = (proc.stdout + proc.stderr).splitlines()
    for line in shown:
        if line != "  ...":
            assert line in printed, proc.stdout + proc.stderr
    assert str(proc.returncode) == code


def kserve_releases_script() -> ModuleType:
    return hack_script("kserve-releases")


def generated_blocks_removed(text: str) -> str:
    """``text`` without the generated sentence of supported releases (it may state the range)."""
    module = kserve_releases_script()
    while module.SUPPORT_START in text:
        head, rest = text.split(module.SUPPORT_START, 1)
        text = head + rest.split(module.SUPPORT_END, 1)[1]
    return text


def test_every_doc_that_says_which_kserve_to_run_takes_the_releases_from_the_table() -> None:
    module = kserve_releases_script()
    sentence = module.support(yaml.safe_load((CHART / "kserve-releases.yaml").read_text()))
    for doc in [*module.SUPPORT_DOCS, CHART / "README.md"]:
        assert sentence in doc.read_text(), f"{doc}: run python3 hack/kserve-releases.py"


def test_no_doc_states_the_supported_range_by_hand() -> None:
    """A range written by hand ("KServe 0.15.0 or later", "0.15.0 to 0.19.0") drifts from the
    table: 0.20.0 was refused while the chart README still said "or later"."""
    table = yaml.safe_load((CHART / "kserve-releases.yaml").read_text())
    supported = [v for v, e in table["releases"].items() if e["status"] == "supported"]
    oldest = supported[0]
    hand = re.compile(
        rf"{re.escape(oldest)}\+|{re.escape(oldest)} (or|and) later|"
        rf"{re.escape(oldest)} (to|through) {re.escape(supported[-1])}"
    )
    docs = [ROOT / "README.md", ROOT / "DEVELOPERS.md", *sorted((ROOT / "docs").glob("*.md"))]
    docs += [CHART / "README.md", CHART / "values.yaml"]
    for doc in docs:
        found = hand.search(generated_blocks_removed(doc.read_text()))
        assert found is None, f"{doc.relative_to(ROOT)} says {found.group()!r} by hand"


def test_chart_yaml_names_the_oldest_supported_release() -> None:
    table = yaml.safe_load((CHART / "kserve-releases.yaml").read_text())
    supported = [v for v, e in table["releases"].items() if e["status"] == "supported"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["annotations"]["multinode-llm/kserve-min-version"] == supported[0]


def test_the_gated_model_section_creates_the_secret_the_download_job_mounts(helm4: str) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    sample = values_docs().gated_sample(chart["name"], chart["version"])
    assert sample in (CHART / "README.md").read_text()
    create, install = sample.split("\n", 1)
    secret = re.fullmatch(
        r"kubectl -n (\S+) create secret generic (\S+) --from-literal=(\w+)=.*", create
    )
    assert secret is not None, create
    namespace, name, key = secret.groups()
    args = shlex.split(install.replace("\\\n", " "))
    assert args[args.index("--namespace") + 1] == namespace
    sets = [args[i + 1] for i, arg in enumerate(args) if arg == "--set"]
    render = run_helm(
        helm4,
        "template",
        "llama",
        str(CHART),
        "-n",
        namespace,
        *(arg for s in sets for arg in ("--set", s)),
    )
    [job] = [
        d for d in render.documents() if d["kind"] == "Job" and "download" in d["metadata"]["name"]
    ]
    pod = job["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == name
    assert [item["key"] for item in volume["secret"]["items"]] == [key]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["HF_TOKEN_PATH"] == "/var/run/secrets/huggingface/token"
