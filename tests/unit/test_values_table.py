"""hack/values-table.py: which keys a `# --` comment documents, and how rows read."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def values_table() -> ModuleType:
    spec = importlib.util.spec_from_file_location("values_table", ROOT / "hack" / "values-table.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


VALUES = """\
# a file comment, not a value's
# -- Top level value.
top: 1
outer:
  # -- Nested value,
  # continued on a second line.
  inner: x
  undocumented: 2
  # a plain comment breaks nothing
  deeper:
    # -- Deepest.
    leaf: true
# -- After a nested block.
last: []
"""


def test_dash_dash_comments_document_the_key_below_with_its_full_path() -> None:
    keys = values_table().documented_keys(VALUES.splitlines())
    assert keys == [
        ("top", "Top level value."),
        ("outer.inner", "Nested value, continued on a second line."),
        ("outer.deeper.leaf", "Deepest."),
        ("last", "After a nested block."),
    ]


def test_a_plain_comment_or_an_undocumented_key_documents_nothing() -> None:
    keys = dict(values_table().documented_keys(VALUES.splitlines()))
    assert "outer.undocumented" not in keys
    assert "outer" not in keys


def test_types_and_pipes_are_written_for_markdown() -> None:
    module = values_table()
    samples: tuple[object, ...] = (True, 1, 1.5, "s", [], {}, None)
    assert [module.type_of(v) for v in samples] == [
        "bool",
        "int",
        "float",
        "string",
        "list",
        "object",
        "null",
    ]
    assert module.cell("a|b") == "a\\|b"
