#!/usr/bin/env python3
"""Writes every value's description from values.yaml's `# --` comments, the one place they are kept:
the `description` of each property of values.schema.json and the chart's README.md (helm-docs'
layout: title, description, version lines, install, the `## Values` table); and files/limits.json,
the schema's limits ("x-limits") with those descriptions, which the chart's templates read.

Usage: python3 hack/values-docs.py          rewrite values.schema.json's descriptions and README.md
       python3 hack/values-docs.py --check  exit 1 naming each key whose text has drifted

Comments follow helm-docs: `# -- text` (continued by further `#` lines) documents the key right
below it; `# -- (type) text` overrides the Type column; a following `# @default -- text` replaces
the Default column. A key of values.yaml that values.schema.json lacks, or a property of the schema
(reached through nested `properties`, never through `$ref`, `items` or `definitions`, which describe
types) that has no comment, is an error naming the key. tests/chart/test_docs.py runs --check.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "multinode-llm"
VALUES = CHART / "values.yaml"
SCHEMA = CHART / "values.schema.json"
README = CHART / "README.md"
# The schema's limits where the templates can read them: Helm keeps values.schema.json out of
# .Files, so "multinode-llm.validate" reads this reduction of it (limits, descriptions, structure).
LIMITS = CHART / "files" / "limits.json"
# What the walker of the limits ("multinode-llm.limitRefusals") reads of a schema node.
WALKED = ("description", "x-limits", "properties", "additionalProperties", "items", "$ref")
SCRIPT = "hack/values-docs.py"
DOC = re.compile(r"^\s*# --(?: (?P<text>.*))?$")
DEFAULT = re.compile(r"^\s*# @default -- ?(?P<text>.*)$")
CONTINUED = re.compile(r"^\s*#(?: (?P<text>.*))?$")
TYPE_HINT = re.compile(r"^\((?P<type>[A-Za-z]+)\) +")
# The Default cell of a documented map whose own keys have rows of their own.
SEE_KEYS = "(its keys below)"


class DocsError(Exception):
    """values.yaml and values.schema.json disagree on the keys, or a comment documents none."""


@dataclass(frozen=True)
class Doc:
    key: str
    description: str
    type: str | None = None
    default: str | None = None


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    description: str


def comment_above(lines: list[str], line: int) -> tuple[Doc | None, int | None]:
    """The `# --` comment of the key on ``line`` (0-based), and the line it starts on."""
    start = line
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    block = lines[start:line]
    dash = [i for i, text in enumerate(block) if DOC.match(text)]
    if not dash:
        return None, None
    first = dash[-1]
    parts = [DOC.match(block[first]).group("text") or ""]  # type: ignore[union-attr]
    default = None
    for text in block[first + 1 :]:
        if (annotation := DEFAULT.match(text)) is not None:
            default = annotation.group("text").strip()
        elif default is None and (more := CONTINUED.match(text)) is not None:
            parts.append(more.group("text") or "")
    description = " ".join(p.strip() for p in parts if p.strip())
    type_hint = None
    if (hint := TYPE_HINT.match(description)) is not None:
        type_hint, description = hint.group("type"), description[hint.end() :]
    return Doc("", description, type_hint, default), start + first


def documented(text: str) -> list[Doc]:
    """Every key of values.yaml a `# --` comment documents, with its dotted path, in file order.

    Paths come from the YAML itself (keys inside list items are not values); a `# --` comment
    that documents no key (a blank line or a list item between it and the key) is an error.
    """
    lines = text.splitlines()
    found: list[Doc] = []
    used: set[int] = set()

    def walk(node: yaml.Node, prefix: str) -> None:
        if not isinstance(node, yaml.MappingNode):
            return
        for key_node, value_node in node.value:
            key = f"{prefix}{key_node.value}"
            doc, at = comment_above(lines, key_node.start_mark.line)
            if doc is not None and at is not None:
                used.add(at)
                found.append(Doc(key, doc.description, doc.type, doc.default))
            walk(value_node, f"{key}.")

    root = yaml.compose(text)
    if root is not None:
        walk(root, "")
    stray = [i + 1 for i, line in enumerate(lines) if DOC.match(line) and i not in used]
    if stray:
        raise DocsError(
            f"{VALUES.name}: the `# --` comment on line(s) {', '.join(map(str, stray))} documents"
            " no key: put it right above the key it describes, with no blank line between"
        )
    return found


def leaf_paths(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [p for key, value in node.items() for p in leaf_paths(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


def undocumented(values: dict[str, Any], docs: list[Doc]) -> list[str]:
    """Values with no `# --` comment on themselves or on a map above them."""
    keys = {d.key for d in docs}
    return [
        path
        for path in leaf_paths(values)
        if not any(path == k or path.startswith(k + ".") for k in keys)
    ]


def schema_properties(schema: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Each property of the schema that stands for a value, by dotted path, in schema order."""
    found: dict[str, dict[str, Any]] = {}
    for name, prop in schema.get("properties", {}).items():
        found[f"{prefix}{name}"] = prop
        found.update(schema_properties(prop, f"{prefix}{name}."))
    return found


def mismatches(docs: list[Doc], properties: dict[str, dict[str, Any]]) -> list[str]:
    """What keeps the comments and the schema from describing the same keys, one line per key."""
    commented = {d.key for d in docs}
    errors = [
        f"`{key}`: values.schema.json has the property but values.yaml no `# --` comment on it;"
        f" add one above `{key.rsplit('.', 1)[-1]}:` (set the key in values.yaml if it has none)"
        for key in properties
        if key not in commented
    ]
    errors += [
        f"`{key}`: values.yaml documents it but values.schema.json has no property for it; add"
        " one (its type and limits) under the parent's `properties`"
        for key in (d.key for d in docs)
        if key not in properties
    ]
    return errors


def with_description(prop: dict[str, Any], description: str) -> dict[str, Any]:
    """``prop`` with its description set, kept in place or put right after `type`/`$ref`."""
    if "description" in prop:
        return {k: (description if k == "description" else v) for k, v in prop.items()}
    items = list(prop.items())
    at = next((i + 1 for i, (k, _) in enumerate(items) if k in ("type", "$ref")), 0)
    return dict([*items[:at], ("description", description), *items[at:]])


def described(schema: dict[str, Any], docs: dict[str, Doc], prefix: str = "") -> dict[str, Any]:
    """``schema`` with the description of each value's property taken from its comment."""
    if "properties" not in schema:
        return schema
    props = {}
    for name, prop in schema["properties"].items():
        key = f"{prefix}{name}"
        props[name] = with_description(described(prop, docs, f"{key}."), docs[key].description)
    return {k: (props if k == "properties" else v) for k, v in schema.items()}


def type_of(value: Any) -> str:
    for python_type, name in (
        (bool, "bool"),
        (int, "int"),
        (float, "float"),
        (str, "string"),
        (list, "list"),
        (dict, "object"),
    ):
        if isinstance(value, python_type):
            return name
    return "null"


def lookup(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        node = node[part]
    return node


def rows(docs: list[Doc], values: dict[str, Any]) -> list[Row]:
    """One row per documented key; a map whose keys have rows says so instead of its default."""
    keys = [d.key for d in docs]
    table = []
    for doc in docs:
        value = lookup(values, doc.key)
        default = doc.default
        if default is None and any(k.startswith(doc.key + ".") for k in keys):
            default = SEE_KEYS
        if default is None:
            default = f"`{json.dumps(value, separators=(',', ':'))}`"
        table.append(Row(doc.key, doc.type or type_of(value), default, doc.description))
    return table


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def values_table(table: list[Row]) -> str:
    lines = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    lines += [
        f"| `{r.key}` | {r.type} | {cell(r.default)} | {cell(r.description)} |" for r in table
    ]
    return "\n".join(lines)


# ct's version (hack/install-ct.sh builds it) and what helm lint prints on a refused value, the
# README's example; tests/chart/test_docs.py runs the command and compares each line but `  ...`.
CT_VERSION = "v3.13.0"
LINT_SAMPLE = "\n".join(
    [
        "$ helm lint --strict charts/multinode-llm --set model.uri=hf://Qwen/Qwen2.5-0.5B-Instruct"
        " --set kserve.version=0.20",
        "==> Linting charts/multinode-llm",
        "[INFO] Chart.yaml: icon is recommended",
        "[ERROR] templates/: multinode-llm/templates/validate/values.yaml:10:4",
        "  ...",
        'template: no template "multinode-llm: 1 value(s) to fix:\\n  - kserve.version=0.20: KServe'
        " 0.20.0 cannot run this chart's group: reconcileCanaryDeployments"
        " (components/predictor.go) ends by deleting every predictor Deployment and Service not"
        " named <isvc>-predictor: the worker Deployment and the headless Services carry the same"
        ' labels, so they are deleted on every reconcile (kserve#6113). Refused; use 0.19.0."'
        ' associated with template "gotpl"',
        "Error: 1 chart(s) linted, 1 chart(s) failed",
        "$ echo $?",
        "1",
    ]
)


def gated_sample(name: str, version: str) -> str:
    """The gated model section's commands; tests/chart/test_docs.py renders them and checks that
    the download Job mounts the Secret they create."""
    return "\n".join(
        [
            'kubectl -n llm create secret generic hf-token --from-literal=token="$HF_TOKEN"',
            f"helm install llama oci://ghcr.io/multinode-llm/charts/{name} --version {version} \\",
            "  --namespace llm \\",
            "  --set model.uri=hf://meta-llama/Llama-3.1-70B-Instruct \\",
            "  --set model.hfTokenSecret.name=hf-token \\",
            "  --set parallelism.tensor=8 --set parallelism.pipeline=2 \\",
            "  --set model.storage.size=300Gi",
        ]
    )


def images_table(table: dict[str, Any], app_version: str) -> str:
    """The serving image of each vendor of accelerators.yaml, or that none is built."""
    lines = [
        "| accelerator | `gpu.resourceName` | serving image | built on |",
        "|---|---|---|---|",
    ]
    for name, entry in table["accelerators"].items():
        image = f"`{entry['image']}:{app_version}`" if entry.get("image") else "none built"
        lines.append(f"| {name} | `{entry['resourceName']}` | {image} | {entry['baseImage']} |")
    return "\n".join(lines)


def kserve_support() -> str:
    """hack/kserve-releases.py's sentence of the supported KServe releases (its name has a dash:
    loaded by path)."""
    spec = importlib.util.spec_from_file_location(
        "kserve_releases", Path(__file__).with_name("kserve-releases.py")
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.support(yaml.safe_load((CHART / "kserve-releases.yaml").read_text()))
    return text


def readme(chart: dict[str, Any], table: list[Row], accelerators: dict[str, Any]) -> str:
    """The chart's README.md, the page `helm show readme` and chart hubs show."""
    name, version, app = chart["name"], chart["version"], chart["appVersion"]
    sources = "\n".join(f"- <{url}>" for url in chart.get("sources", []))
    return f"""# {name}

Version: `{version}` · Type: `{chart["type"]}` · AppVersion: `{chart["appVersion"]}`

{" ".join(chart["description"].split())}

**Homepage:** <{chart["home"]}>

## Installing

Needs Kubernetes `{chart.get("kubeVersion", "")}`, KServe, GPU nodes and, for `hf://` models, a
StorageClass that offers ReadWriteMany. {kserve_support()}

```console
helm install qwen oci://ghcr.io/multinode-llm/charts/{name} --version {version} \\
  --namespace llm --create-namespace \\
  --set model.uri=hf://Qwen/Qwen2.5-0.5B-Instruct \\
  --set parallelism.tensor=2 --set parallelism.pipeline=2 \\
  --wait=legacy --wait-for-jobs --timeout 3h    # Helm 3: --wait --wait-for-jobs
helm test qwen --namespace llm
```

Helm 4 needs `--wait=legacy`: its default `--wait` reads the InferenceService's `Ready`, which
KServe 0.16.0 to 0.19.0 never set for a multi-node group, so it runs into `--timeout` while the
group serves. The readiness Job that `--wait-for-jobs` waits on is the signal on every release.

Settings KServe would reject are refused at install time with a message naming the value and the
fix. The repository's README and docs/ cover the model cache, monitoring, placement and upgrades.

## Gated or private models

A gated model (Llama, Gemma, ...) is staged with a Hugging Face token that may read it, kept in a
Secret of the release's namespace: the download Job mounts it as a file (`HF_TOKEN_PATH`), never as
an environment value, and the token never goes in values. Create the Secret, then name it:

```console
{gated_sample(name, version)}
```

`model.hfTokenSecret.key` names the Secret's key if it is not `token`. A revision staged once needs
no token again. Through the model cache the Job sends its token to the cache, which forwards it to
the Hub for each file and keeps no copy.

## Images

One serving image per accelerator: `image.repository`, when empty, is the image the chart's
`accelerators.yaml` lists for the vendor of `gpu.resourceName`. Images built and published with
this chart (`hack/build-images.sh`, `hack/publish.sh`):

{images_table(accelerators, app)}

A vendor without an image is refused until `image.repository` names one, built from the
repository's Dockerfile on the vendor's vLLM image (its header shows how). The small cache image,
`ghcr.io/multinode-llm/multinode-llm-cache:{app}`, runs the download and readiness Jobs, the
`helm test` pod and the model cache; `ghcr.io/multinode-llm/multinode-llm:{app}-cpu` is a CPU
serving image for kind tests (no GPU, a fake one).

## Chart CI

`helm lint` (Helm 3 and 4) and chart-testing's `ct lint` fail on every value the chart refuses,
with the message `helm template` and `helm install` give, so a pipeline can check values before a
sync. Your values, against the published chart:

```console
helm pull oci://ghcr.io/multinode-llm/charts/{name} --version {version} --untar
helm lint --strict {name} -f my-values.yaml
```

In this repository, chart-testing lints every scenario of `examples/` (`ci/*-values.yaml` links to
each) and `ci/kind-values.yaml`, as `tox -e lint` does; `ct.yaml` holds its settings:

```console
bash hack/install-tools.sh   # helm 3 and 4 in .tools/bin
bash hack/install-ct.sh      # ct {CT_VERSION} from its Go module, its configs in .tools/ct
pip install yamllint yamale  # ct runs both
PATH="$PWD/.tools/bin:$PATH" CT_CONFIG_DIR=.tools/ct ct lint --config ct.yaml
```

`ct install --config ct.yaml` installs each case on the current cluster, which needs KServe and the
GPUs each scenario asks for; on kind (no GPUs) `tox -e kind` installs `ci/kind-values.yaml`.

A refused value fails both. Helm 4 (Helm names the chart's refusal as a template that does not
exist; its INFO line with the same message is left out):

```console
{LINT_SAMPLE}
```

`ct lint --config ct.yaml --helm-lint-extra-args "--strict --set kserve.version=0.20"` prints the
same for its first case, stops there and ends with `Error: failed linting charts: failed processing
charts` (exit status 1).

## Source Code

{sources}

## Values

{values_table(table)}

Generated from values.yaml's `# --` comments by `{SCRIPT}`, which also writes the descriptions of
values.schema.json; edit the comments, not this file.
"""


def generate() -> tuple[list[Doc], str, str]:
    """The comments, and values.schema.json and README.md as they make them."""
    text = VALUES.read_text()
    docs = documented(text)
    values = yaml.safe_load(text) or {}
    schema = json.loads(SCHEMA.read_text())
    errors = [
        f"`{key}`: values.yaml sets it without a `# --` comment on it or a map above it"
        for key in undocumented(values, docs)
    ]
    errors += mismatches(docs, schema_properties(schema))
    if errors:
        raise DocsError("\n".join(errors))
    new_schema = json.dumps(described(schema, {d.key: d for d in docs}), indent=2) + "\n"
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    table = yaml.safe_load((CHART / "accelerators.yaml").read_text())
    return docs, new_schema, readme(chart, rows(docs, values), table)


def reduced(node: Any, limited: set[str]) -> dict[str, Any] | None:
    """A schema node with only what the limits' walker reads, and only where a limit lies below
    it (``limited``: the definitions that hold one); None where none does."""
    if not isinstance(node, dict):
        return None
    kept: dict[str, Any] = {}
    for key in ("properties", "additionalProperties", "items"):
        value = node.get(key)
        if key == "properties":
            props = {name: reduced(prop, limited) for name, prop in (value or {}).items()}
            props = {name: prop for name, prop in props.items() if prop is not None}
            if props:
                kept[key] = props
        elif (child := reduced(value, limited)) is not None:
            kept[key] = child
    ref = node.get("$ref", "")
    if kept or "x-limits" in node or ref.rsplit("/", 1)[-1] in limited:
        kept |= {key: node[key] for key in WALKED if key in node and key not in kept}
        if not isinstance(kept.get("additionalProperties", {}), dict):
            del kept["additionalProperties"]
        return kept
    return None


def limits_file(schema: str) -> str:
    """files/limits.json, from values.schema.json as the comments make it."""
    tree = json.loads(schema)
    definitions: dict[str, Any] = tree.get("definitions", {})
    limited: set[str] = set()
    for _ in definitions:  # a definition may hold a $ref to another: settle in as many rounds
        limited |= {name for name, d in definitions.items() if reduced(d, limited) is not None}
    body = reduced(tree, limited) or {}
    body["definitions"] = {name: reduced(definitions[name], limited) for name in sorted(limited)}
    header = f"generated from values.schema.json by {SCRIPT}; edit the schema, not this file"
    return json.dumps({"$comment": header, **body}, indent=1, sort_keys=True) + "\n"


def schema_drift(docs: list[Doc]) -> list[str]:
    """The keys whose description in values.schema.json is not their comment."""
    properties = schema_properties(json.loads(SCHEMA.read_text()))
    return [d.key for d in docs if properties[d.key].get("description") != d.description]


def readme_drift(new: str) -> list[str]:
    """The keys whose row in README.md is not what the comments make (every key if it is gone)."""
    old = README.read_text() if README.exists() else ""
    changed = set(old.splitlines()) ^ set(new.splitlines())
    row = re.compile(r"^\| `(?P<key>[^`]+)` \|")
    return sorted({m.group("key") for line in changed if (m := row.match(line))})


def drift(docs: list[Doc], schema: str, page: str) -> list[str]:
    """One line per file that differs from what the comments make, naming the keys."""
    found = []
    for path, new, keys in (
        (SCHEMA, schema, schema_drift(docs)),
        (README, page, readme_drift(page)),
    ):
        if not path.exists():
            found.append(f"{path.relative_to(ROOT)} is missing")
        elif path.read_text() != new:
            found.append(f"{path.relative_to(ROOT)} differs from the comments{named(keys)}")
    return found


def named(keys: list[str], most: int = 8) -> str:
    """` at `a`, `b` and 3 more` for the first few keys."""
    if not keys:
        return ""
    shown = ", ".join(f"`{k}`" for k in keys[:most])
    more = f" and {len(keys) - most} more" if len(keys) > most else ""
    return f" at {shown}{more}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when either file has drifted"
    )
    args = parser.parse_args()
    try:
        docs, schema, page = generate()
    except DocsError as error:
        print(f"{SCRIPT}: {error}", file=sys.stderr)
        return 1
    limits = limits_file(schema)
    if not args.check:
        SCHEMA.write_text(schema)
        README.write_text(page)
        LIMITS.write_text(limits)
        return 0
    found = drift(docs, schema, page)
    if not LIMITS.exists() or LIMITS.read_text() != limits:
        found.append(f"{LIMITS.relative_to(ROOT)} differs from values.schema.json's limits")
    for line in found:
        print(f"{line}: run python3 {SCRIPT}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
