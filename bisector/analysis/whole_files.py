"""The notes of the files a commit adds or removes whole: new or dropped code, whose entries are not rows. One note
per file, or per directory (as deep as keeps the notes few) when there are many."""

from __future__ import annotations

from bisector.analysis.findings import Finding, FindingKind
from bisector.vocab import gitdiff

MAX_WHOLE_FILE_NOTES = 20  # more files added or removed whole than this: one note per directory


def whole_file_notes(changes: list[gitdiff.FileChange]) -> list[Finding]:
    """One note per file added or removed whole, or per directory (as deep as keeps the notes few)."""
    if len(changes) <= MAX_WHOLE_FILE_NOTES:
        return [
            Finding(FindingKind.NOTE, c.path, _whole_name(c), detail="new or dropped code: its entries are not rows")
            for c in changes
        ]
    for depth in (2, 1, 0):
        groups: dict[tuple[str, str], list[str]] = {}
        for change in changes:
            directory = "/".join(change.path.split("/")[:-1][:depth])
            groups.setdefault((_whole_name(change), f"{directory}/" if directory else ""), []).append(change.path)
        if len(groups) <= MAX_WHOLE_FILE_NOTES:
            break
    return [
        Finding(
            FindingKind.NOTE,
            directory,
            f"{len(paths)} files {name}",
            detail=f"new or dropped code: their entries are not rows (first: {', '.join(paths[:3])})",
        )
        for (name, directory), paths in groups.items()
    ]


def _whole_name(change: gitdiff.FileChange) -> str:
    return "added whole" if change.old_path is None else "removed whole"
