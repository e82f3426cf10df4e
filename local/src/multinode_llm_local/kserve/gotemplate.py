"""The part of Go's text/template that KServe's ``ReplacePlaceholders`` reaches.

KServe marshals the merged head container to JSON, parses that text as a Go template and executes
it with the InferenceService's ObjectMeta (``controller/v1beta1/inferenceservice/utils/utils.go``,
every release). Runtimes use ``{{.Name}}``; anything else between double braces is Go template
syntax too. This module evaluates what a container can meet: comments, string literals (the chart
escapes ``{{`` as ``{{`{{`}}``) and field chains on the metadata (``.Name``, ``.Labels.app``). Any
other action fails, as it fails in Go (a Jinja ``{{ x }}`` is a call of the undefined function x).
"""

from __future__ import annotations

import json
from typing import Any

# ObjectMeta's Go field names -> the JSON keys of the metadata dict.
_FIELDS = {
    "Name": "name",
    "Namespace": "namespace",
    "Labels": "labels",
    "Annotations": "annotations",
    "GenerateName": "generateName",
    "UID": "uid",
}
_MAPS = {"Labels", "Annotations"}


class TemplateError(ValueError):
    """Go's parse or execution error for the text."""


def execute(text: str, meta: dict[str, Any]) -> str:
    """``template.New(..).Parse(text)``, then ``Execute(.., meta)``: the text, actions replaced."""
    out: list[str] = []
    position = 0
    while True:
        start = text.find("{{", position)
        if start < 0:
            out.append(text[position:])
            return "".join(out)
        end, action = _action(text, start)
        before = text[position:start]
        if action.startswith("-") and action[1:2] in (" ", "\t", "\n", "\r"):
            before, action = before.rstrip(), action[1:]
        trim_after = action.endswith("-") and action[-2:-1] in (" ", "\t", "\n", "\r")
        if trim_after:
            action = action[:-1]
        out += [before, _evaluate(action.strip(), meta)]
        position = end
        if trim_after:
            position = len(text) - len(text[position:].lstrip())


def _action(text: str, start: int) -> tuple[int, str]:
    """(index after the closing braces, the action's inside); quotes may hold braces."""
    index = start + 2
    quote = ""
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\" and quote == '"':
                index += 2
                continue
            if char == quote:
                quote = ""
        elif char in '"`':
            quote = char
        elif text.startswith("}}", index):
            return index + 2, text[start + 2 : index]
        index += 1
    raise TemplateError("unclosed action" if not quote else "unterminated quoted string")


def _evaluate(action: str, meta: dict[str, Any]) -> str:
    if action.startswith("/*") and action.endswith("*/"):
        return ""
    if len(action) >= 2 and action[0] == action[-1] == "`":
        return action[1:-1]
    if len(action) >= 2 and action[0] == action[-1] == '"':
        try:
            return str(json.loads(action))
        except json.JSONDecodeError:
            raise TemplateError(f"invalid syntax: {action}") from None
    if action.startswith("."):
        return _field(action, meta)
    word = action.split()[0] if action.split() else ""
    if not word:
        raise TemplateError("missing value for command")
    if word.isidentifier():
        raise TemplateError(f'function "{word}" not defined')
    raise TemplateError(f"unexpected {word!r} in command")


def _field(chain: str, meta: dict[str, Any]) -> str:
    parts = chain[1:].split(".") if chain != "." else []
    if any(not part.isidentifier() for part in parts) or " " in chain:
        raise TemplateError(f"unexpected {chain!r} in command")
    if not parts:
        return str(meta)
    head, rest = parts[0], parts[1:]
    if head not in _FIELDS:
        raise TemplateError(f"can't evaluate field {head} in type v1.ObjectMeta")
    value = meta.get(_FIELDS[head])
    if head in _MAPS:
        if len(rest) > 1:
            raise TemplateError(f"can't evaluate field {rest[1]} in type string")
        if rest:
            found = (value or {}).get(rest[0])
            return "<no value>" if found is None else str(found)
        return "map[" + " ".join(f"{k}:{v}" for k, v in sorted((value or {}).items())) + "]"
    if rest:
        raise TemplateError(f"can't evaluate field {rest[0]} in type string")
    return "" if value is None else str(value)
