"""Keyed diffs of JSON, YAML and TOML tuning files (per-device, per-shape kernel configs and the like)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Iterable

import yaml

from bisector.analysis.findings import Finding, FindingKind
from bisector.analysis.values import Change, Leaf, Mapping, Node, diff_values, render, sequence
from bisector.analysis.yaml_documents import load_yaml_documents
from bisector.analysis.yaml_regions import diff_large_yaml

TUNING_SUFFIXES = (".json", ".yaml", ".yml", ".toml")
_json_string: Callable[[str], str] = json.encoder.encode_basestring_ascii  # what json.dumps uses
_JSON_CONSTANTS = {None: "null", True: "true", False: "false"}


class TuningFileError(ValueError):
    """The file is not valid JSON / YAML / TOML."""


def load_tuning_file(path: str, text: str) -> Node:
    """The file's tree; raises TuningFileError when it does not parse."""
    loader = _loader(path)
    try:
        data = loader(text)
    except (ValueError, yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise TuningFileError(_one_line(exc)) from None
    return to_node(data)


def diff_tuning_file(path: str, before: Node | None, after: Node | None) -> list[Finding]:
    return _rows(path, diff_values(before, after))


def diff_large_yaml_file(path: str, before: bytes | None, after: bytes | None) -> list[Finding] | None:
    """The rows of two versions of a large YAML tuning file, parsing only the parts that differ (yaml_regions);
    None where that does not apply: the caller parses both whole (load_tuning_file, diff_tuning_file) and says
    why a file it cannot read does not parse."""
    if before is None or after is None or not path.lower().endswith((".yaml", ".yml")):
        return None
    try:
        changes = diff_large_yaml(before.decode("utf-8"), after.decode("utf-8"), parse_yaml_part)
    except UnicodeDecodeError:
        return None
    return None if changes is None else _rows(path, changes)


def parse_yaml_part(text: str) -> Node:
    """One YAML node's text (a part of a file) as its tree in the whole file's."""
    documents = load_yaml_documents(text)
    return to_node(documents[0] if documents else None)


def _rows(path: str, changes: Iterable[Change]) -> list[Finding]:
    return [
        Finding(
            kind=FindingKind.TUNING_FILE,
            file=path,
            name="",
            key=change.key,
            before=None if change.before is None else render(change.before),
            after=None if change.after is None else render(change.after),
        )
        for change in changes
    ]


def to_node(data: object) -> Node:
    """A tree of parsed JSON-like data; keys display as JSON ("1536x128"), scalars too."""
    if isinstance(data, dict):
        result = Mapping()
        for key, value in data.items():
            identity = key if isinstance(key, str | int | float | bool) or key is None else repr(key)
            result.entries[identity] = (_scalar_text(key), to_node(value))
        return result
    if isinstance(data, list | tuple):
        return sequence([to_node(item) for item in data])
    if isinstance(data, str | int | float | bool) or data is None:
        return Leaf(data, _scalar_text(data))
    return Leaf(repr(data), repr(data))  # YAML dates and the like


def _scalar_text(value: object) -> str:
    """The value as JSON writes it (json.dumps, whose cost per call showed on files of 100,000 scalars)."""
    if isinstance(value, str):
        return _json_string(value)
    if value is None or isinstance(value, bool):
        return _JSON_CONSTANTS[value]
    if isinstance(value, int):
        return int.__repr__(value)
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _loader(path: str) -> Callable[[str], object]:
    if path.endswith(".toml"):
        return tomllib.loads
    if path.endswith((".yaml", ".yml")):
        return _load_yaml
    return json.loads


def _load_yaml(text: str) -> object:
    documents = load_yaml_documents(text)
    if len(documents) == 1:
        return documents[0]
    return {f"document {index}": document for index, document in enumerate(documents)}


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
