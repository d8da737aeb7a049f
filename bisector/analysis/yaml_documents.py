"""YAML documents read from libyaml's parse events, each distinct plain scalar resolved once.

PyYAML's loaders resolve and construct every scalar in Python, even over libyaml's parser: a 1 MB Tensile logic
file (tens of thousands of `DataType: 7`, `true`, `0`) took seconds. Tuning files repeat a few hundred distinct
scalars, so here the events are folded into dicts and lists directly and each distinct plain scalar goes through
PyYAML's own resolver and safe constructors once. What the fold does not mirror exactly (anchors and aliases,
explicit tags, merge keys, keys that are not scalars) is read by `yaml.load_all` with the safe loader instead, so
the result is always what that loader gives.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml

_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's where PyYAML has it
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _UnmirroredError(Exception):
    """The stream uses something the fold does not mirror: the safe loader reads it instead."""


class _Scalars:
    """Plain scalars resolved and constructed as the safe loader does, once per distinct text."""

    def __init__(self) -> None:
        self._loader: Any = yaml.SafeLoader("")
        self._known: dict[str, object] = {}

    def plain(self, text: str) -> object:
        if text in self._known:
            return self._known[text]
        tag = self._loader.resolve(yaml.ScalarNode, text, (True, False))
        if tag == _MERGE_TAG:
            raise _UnmirroredError
        try:
            value = self._loader.construct_object(yaml.ScalarNode(tag, text), deep=True)
        except yaml.YAMLError:
            raise _UnmirroredError from None  # the safe loader says what is wrong, with its position
        self._known[text] = value
        return value


class _Mapping:
    def __init__(self) -> None:
        self.entries: dict[Any, object] = {}
        self.key: Any = None
        self.has_key = False

    def add(self, value: object, *, is_scalar: bool) -> None:
        if self.has_key:
            self.entries[self.key] = value
            self.has_key = False
        elif is_scalar and isinstance(value, Hashable):
            self.key, self.has_key = value, True
        else:
            raise _UnmirroredError  # a mapping or sequence as a key: the safe loader refuses it


def load_yaml_documents(text: str) -> list[object]:
    """The documents of a YAML stream, equal to `list(yaml.load_all(text, Loader=SafeLoader))`; raises what that
    raises on invalid YAML (a yaml.YAMLError)."""
    try:
        return _fold(text)
    except _UnmirroredError:
        return list(yaml.load_all(text, Loader=_SAFE_LOADER))


def _fold(text: str) -> list[object]:
    scalars = _Scalars()
    documents: list[object] = []
    open_nodes: list[_Mapping | list[object]] = []
    at_document_start = 0

    def attach(value: object, *, is_scalar: bool) -> None:
        if not open_nodes:
            documents.append(value)
        elif isinstance(open_nodes[-1], _Mapping):
            open_nodes[-1].add(value, is_scalar=is_scalar)
        else:
            open_nodes[-1].append(value)

    for event in yaml.parse(text, Loader=_SAFE_LOADER):
        if isinstance(event, yaml.ScalarEvent):
            _refuse_anchors_and_tags(event)
            attach(scalars.plain(event.value) if event.implicit[0] else event.value, is_scalar=True)
        elif isinstance(event, yaml.MappingStartEvent):
            _refuse_anchors_and_tags(event)
            open_nodes.append(_Mapping())
        elif isinstance(event, yaml.SequenceStartEvent):
            _refuse_anchors_and_tags(event)
            open_nodes.append([])
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            closed = open_nodes.pop()
            attach(closed.entries if isinstance(closed, _Mapping) else closed, is_scalar=False)
        elif isinstance(event, yaml.AliasEvent):
            raise _UnmirroredError
        elif isinstance(event, yaml.DocumentStartEvent):
            at_document_start = len(documents)
        elif isinstance(event, yaml.DocumentEndEvent) and len(documents) == at_document_start:
            documents.append(None)  # an empty document
    return documents


def _refuse_anchors_and_tags(event: yaml.NodeEvent) -> None:
    if event.anchor is not None or getattr(event, "tag", None) is not None:
        raise _UnmirroredError
