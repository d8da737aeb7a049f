"""Finding: one keyed row of an analysis (a table entry, a threshold, a dispatch decision, a note).

Every part of the analysis turns its result into Findings so that the store keeps them in one table
(bisect_id, kind, file, name, key, before, after, line, detail) and a report can be rebuilt from those rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

ABSENT_TEXT = "(absent)"
MAX_TEXT = 160  # a condition, launch argument or env read longer than this is cut in rows


def short_text(text: str) -> str:
    """Row text: whitespace collapsed, cut to MAX_TEXT."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def shown_pair(before: str | None, after: str | None) -> tuple[str | None, str | None]:
    """Two condition texts for display: long ones cut to MAX_TEXT around where they first differ."""
    if before is None or after is None:
        return (before and short_text(before)), (after and short_text(after))
    start = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b), 0)
    start = max(0, start - MAX_TEXT // 2) if max(len(before), len(after)) > MAX_TEXT else 0
    return (short_text(("..." if start else "") + before[start:]), short_text(("..." if start else "") + after[start:]))


class FindingKind(StrEnum):
    # static diff of a commit against its parent
    TABLE_ENTRY = "table_entry"  # one entry of a literal table (dict key, list index), Python
    CONSTANT = "constant"  # a module- or class-level scalar constant (a threshold), Python
    AUTOTUNE_CONFIG = "autotune_config"  # a triton.autotune config or argument
    HEURISTIC = "heuristic"  # one entry of a @triton.heuristics dict
    TUNING_FILE = "tuning_file"  # one leaf of a JSON / YAML / TOML tuning file
    NATIVE_ARRAY = "native_array"  # an entry of a constant array in C/C++/CUDA
    NATIVE_THRESHOLD = "native_threshold"  # a constant, #define, or if/switch on the batch size in C/C++/CUDA
    DISPATCH_LOGIC = "dispatch_logic"  # a function that reads the tables or thresholds changed
    LAUNCH_PARAM = "launch_param"  # a grid / keyword argument of a kernel[grid](...) or torch.ops launch
    BRANCH_CONDITION = "branch_condition"  # an if-condition on arch, dtype, shape or env var in a function
    ENV_GATE = "env_gate"  # an environment-variable read added, removed or changed (default, comparison)
    NOTE = "note"  # a file that could not be analysed (parse error, binary, too large), a rename
    KERNEL_CODE = "kernel_code"  # a GPU kernel whose own code differs (a Triton @jit function): no dispatch row
    STATIC_SUMMARY = "static_summary"  # which commit against which parent, how many files (rows may be none)
    # runtime and minimisation
    TRACED_CALL = "traced_call"  # one (function, call arguments) of the call trace: result last good -> first bad
    TRACE_NOTE = "trace_note"  # whether the traced re-runs ran, what they traced, how to ask for them
    DISPATCH = "dispatch"  # one (op, N, K, m) of the dispatch trace: kernel at last good -> first bad
    KERNEL_LAUNCH = "kernel_launch"  # one kernel (or CPU op) of the kernel trace: launch count before -> after
    MINIMAL_CHANGE = "minimal_change"  # one change unit of the culprit that the minimal failing set keeps
    MINIMIZE_SUMMARY = "minimize_summary"  # how many units, how many tests, what was concluded

    @property
    def is_static(self) -> bool:
        """A row of the static diff of a commit (table rows, notes and kernels whose code changed)."""
        return self in _STATIC_KINDS or self in (FindingKind.NOTE, FindingKind.KERNEL_CODE)

    @property
    def is_dispatch_relevant(self) -> bool:
        """A static row that changes what a dispatcher decides (everything static but notes)."""
        return self in _STATIC_KINDS


_STATIC_KINDS = frozenset(
    {
        FindingKind.TABLE_ENTRY,
        FindingKind.CONSTANT,
        FindingKind.AUTOTUNE_CONFIG,
        FindingKind.HEURISTIC,
        FindingKind.TUNING_FILE,
        FindingKind.NATIVE_ARRAY,
        FindingKind.NATIVE_THRESHOLD,
        FindingKind.DISPATCH_LOGIC,
        FindingKind.LAUNCH_PARAM,
        FindingKind.BRANCH_CONDITION,
        FindingKind.ENV_GATE,
    }
)


@dataclass(frozen=True)
class Finding:
    """One row. before/after are display text; None means absent (the row exists on one side only).

    key is the path after the name: "[(144, 7168)]" for a table entry (so label is name + key), or words
    ("configs[{'BLOCK_M': 16}]") that the label separates from the name with a space.
    """

    kind: FindingKind
    file: str
    name: str
    key: str = ""
    before: str | None = None
    after: str | None = None
    line: int | None = None  # in the version that has the row (the new one when both do)
    detail: str = ""
    rule: str = field(default="", compare=False)  # the rule that made a static row (rules.py); not stored

    @property
    def label(self) -> str:
        if not self.key:
            return self.name
        if self.key.startswith("["):
            return f"{self.name}{self.key}"
        return f"{self.name} {self.key}"

    @property
    def change_text(self) -> str:
        """'before -> after', with '(absent)' for a missing side."""
        return f"{_side(self.before)} -> {_side(self.after)}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "file": self.file,
            "name": self.name,
            "key": self.key,
            "before": self.before,
            "after": self.after,
            "line": self.line,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Finding:
        line = data.get("line")
        return cls(
            kind=FindingKind(str(data["kind"])),
            file=str(data.get("file") or ""),
            name=str(data.get("name") or ""),
            key=str(data.get("key") or ""),
            before=_optional_str(data.get("before")),
            after=_optional_str(data.get("after")),
            line=line if isinstance(line, int) else None,
            detail=str(data.get("detail") or ""),
        )


def _side(value: str | None) -> str:
    return ABSENT_TEXT if value is None else value


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)
