"""hack/values-docs.py: which keys a `# --` comment documents, how rows read, and the errors that
name a key the comments and the schema disagree on."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from multinode_llm_testing.chartlib import hack_script


def values_docs() -> ModuleType:
    return hack_script("values-docs")


VALUES = """\
# a file comment, not a value's
# -- Top level value.
top: 1
# -- The outer map.
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
last:
  - name: item
    # a key inside a list item is no value
    inside: 1
# -- (int) A value without a default.
# @default -- the node count
unset:
"""


def test_dash_dash_comments_document_the_key_below_with_its_full_path() -> None:
    docs = values_docs().documented(VALUES)
    assert [(d.key, d.description) for d in docs] == [
        ("top", "Top level value."),
        ("outer", "The outer map."),
        ("outer.inner", "Nested value, continued on a second line."),
        ("outer.deeper.leaf", "Deepest."),
        ("last", "After a nested block."),
        ("unset", "A value without a default."),
    ]


def test_a_type_hint_and_a_default_annotation_fill_their_columns_not_the_description() -> None:
    module = values_docs()
    docs = module.documented(VALUES)
    unset = next(d for d in docs if d.key == "unset")
    assert (unset.type, unset.default) == ("int", "the node count")
    rows = {r.key: r for r in module.rows(docs, {"unset": None, **_values()})}
    assert (rows["unset"].type, rows["unset"].default) == ("int", "the node count")


def _values() -> dict[str, Any]:
    return {"top": 1, "outer": {"inner": "x", "deeper": {"leaf": True}}, "last": []}


def test_a_map_whose_keys_have_rows_points_at_them_instead_of_repeating_its_default() -> None:
    module = values_docs()
    rows = {r.key: r for r in module.rows(module.documented(VALUES), {"unset": None, **_values()})}
    assert rows["outer"].default == module.SEE_KEYS
    assert rows["top"].default == "`1`"
    assert rows["last"].default == "`[]`"


def test_a_dash_dash_comment_that_documents_no_key_is_an_error_naming_its_line() -> None:
    module = values_docs()
    with pytest.raises(module.DocsError, match="line\\(s\\) 2 "):
        module.documented("a: 1\n# -- Lost above a blank line.\n\nb: 2\n")


def test_keys_the_schema_and_the_comments_disagree_on_are_named() -> None:
    module = values_docs()
    docs = module.documented("# -- Documented only.\nonlyHere: 1\n# -- Both.\nboth: 2\n")
    schema = {"properties": {"both": {"type": "integer"}, "onlyThere": {"type": "string"}}}
    errors = module.mismatches(docs, module.schema_properties(schema))
    assert len(errors) == 2
    assert errors[0].startswith("`onlyThere`: values.schema.json has the property")
    assert errors[1].startswith("`onlyHere`: values.yaml documents it")


def test_descriptions_are_written_in_place_and_refs_items_and_definitions_are_left_alone() -> None:
    module = values_docs()
    docs = {d.key: d for d in module.documented("# -- Outer.\no:\n  # -- Inner.\n  i: []\n")}
    schema = {
        "properties": {
            "o": {
                "type": "object",
                "description": "old",
                "properties": {
                    "i": {"type": "array", "items": {"description": "an item", "type": "string"}}
                },
            }
        },
        "definitions": {"x": {"description": "a type"}},
    }
    new = module.described(schema, docs)
    assert list(new["properties"]["o"]) == ["type", "description", "properties"]
    assert new["properties"]["o"]["description"] == "Outer."
    inner = new["properties"]["o"]["properties"]["i"]
    assert list(inner) == ["type", "description", "items"]
    assert inner["description"] == "Inner."
    assert inner["items"]["description"] == "an item"
    assert new["definitions"] == schema["definitions"]


def test_types_and_pipes_are_written_for_markdown() -> None:
    module = values_docs()
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
