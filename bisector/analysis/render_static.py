"""The static diff's section of the report, in the three formats: each row with what the traced re-runs made of it
(evidence.py), confirmed rows first, and how far a static lead can be trusted."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from bisector.analysis.evidence import CheckedRow, Evidence
from bisector.analysis.explanation import Explanation
from bisector.analysis.findings import ABSENT_TEXT, Finding, FindingKind
from bisector.analysis.kernel_code import launch_evidence
from bisector.analysis.kernel_trace import KernelTraceDiff
from bisector.analysis.static_diff import StaticDiff

# Said where the static rules found nothing: they know tables, thresholds, tuning files, autotune lists, launch
# parameters and gates, and on projects they were not written against miss about a fifth of what a reader finds
# (TRUST_LINE), so "nothing changed" would claim more than they know.
NO_TABLE_CHANGE = "no dispatch change that the static rules recognise; read the diff for others"
# How far to trust a static lead, in one sentence, as measured (docs/benchmarks.md, "Explain": the held-out corpora
# pooled, and the corpus the rules were written on); keep it equal to the latest measurement.
TRUST_LINE = (
    "How far to trust a static lead: on its first run over corpora of projects nobody had read, 0.37-0.67 of its "
    "rows were right and it found 0.37-0.66 of the dispatch changes (0.73 / 0.78 pooled over 19 held-out corpora "
    "now, 0.956 / 1.0 on the corpus its rules were written on)."
)
MAX_ROWS = 60  # in text and Markdown; JSON has every row


def static_lines(
    static: StaticDiff, checked: Sequence[CheckedRow], kernels: KernelTraceDiff | None = None
) -> list[str]:
    """'confirmed at run time: kernels/tiny_gemm.py:34  _TUNED_MMA_MIN_M[(144, 7168)]: (absent) -> 2' per row,
    confirmed rows first, each followed by what the traced re-runs recorded for it; then the notes; then the kernels
    whose code changed, each with whether the traced runs launched it."""
    lines = [line for row in checked for line in _checked_lines(row)]
    if not lines:
        lines.append(NO_TABLE_CHANGE)
    lines += [f"{note.file}  note: {note.name}: {note.detail}" for note in static.notes]
    for row in static.kernel_changes:
        lines.append(f"kernel code changed: {_where(row)}  {row.name} ({row.detail})")
        lines += [f"    {why}" for why in [launch_evidence(row, kernels)] if why]
    return lines


def _where(finding: Finding) -> str:
    return f"{finding.file}:{finding.line}" if finding.line else finding.file


def _checked_lines(row: CheckedRow) -> list[str]:
    return [f"{row.evidence.label}: {_static_line(row.finding)}", *([f"    {row.why}"] if row.why else [])]


def evidence_summary(checked: Sequence[CheckedRow]) -> str:
    """'3 confirmed at run time, 2 static leads, 1 contradicted at run time'."""
    counts = {evidence: sum(1 for row in checked if row.evidence is evidence) for evidence in Evidence}
    words = {Evidence.STATIC: ("static lead", "static leads")}
    return ", ".join(
        f"{count} {words.get(evidence, (evidence.label,) * 2)[count != 1]}"
        for evidence, count in counts.items()
        if count
    )


def _static_line(finding: Finding) -> str:
    where = _where(finding)
    if finding.kind is FindingKind.DISPATCH_LOGIC:
        return f"{where}  dispatch logic changed: {finding.name} ({finding.detail}; {finding.change_text})"
    detail = f"  [{finding.detail}]" if finding.detail else ""
    return (
        f"{where}  {_KIND_WORDS.get(finding.kind, '')}{finding.label or '(whole file)'}: {finding.change_text}{detail}"
    )


_KIND_WORDS = {
    FindingKind.LAUNCH_PARAM: "launch ",
    FindingKind.BRANCH_CONDITION: "branch in ",
    FindingKind.ENV_GATE: "env gate ",
}

EMPTY_TREE = "the empty tree"  # what a root commit is diffed against


def static_renderable(
    static: StaticDiff, checked: Sequence[CheckedRow], kernels: KernelTraceDiff | None = None
) -> RenderableType:
    title = f"static table diff of {static.sha[:12]} against {static.parent[:12] if static.parent else EMPTY_TREE}"
    title += f" ({evidence_summary(checked)})" if checked else ""
    lines = [Text(f"  {line}") for line in _cut(static_lines(static, checked, kernels))]
    return Group(Text(title, style="bold"), *lines, Text(f"  {TRUST_LINE}", style="italic"))


def _cut(lines: list[str]) -> list[str]:
    if len(lines) <= MAX_ROWS:
        return lines
    return [*lines[:MAX_ROWS], f"... {len(lines) - MAX_ROWS} more lines (see the JSON report)"]


def static_markdown(
    static: StaticDiff, rows: Sequence[CheckedRow], kernels: KernelTraceDiff | None = None
) -> list[str]:
    title = f"Static table diff of `{static.sha[:12]}` against " + (
        f"`{static.parent[:12]}`" if static.parent else EMPTY_TREE
    )
    if not rows:
        out = [f"{title}: {NO_TABLE_CHANGE}.", ""]
    else:
        cells = [
            [
                row.evidence.label,
                f"`{f.file}:{f.line}`" if f.line else f"`{f.file}`",
                _KIND_WORDS.get(f.kind, "")
                + f"`{f.label or '(whole file)'}`"
                + (f" ({md_cell(f.detail)})" if f.detail else ""),
                *_sides(f),
                row.why,
            ]
            for row in rows[:MAX_ROWS]
            for f in (row.finding,)
        ]
        out = [f"<details open><summary>{title}: {len(rows)} rows ({evidence_summary(rows)})</summary>", ""]
        out += md_table(["evidence", "file", "row", "before", "after", "traced re-runs"], cells)
        if len(rows) > MAX_ROWS:
            out.append(f"\n{len(rows) - MAX_ROWS} more rows in the JSON report.")
        out += ["", "</details>", ""]
    out += [f"- `{note.file}`: {note.name}: {md_cell(note.detail)}" for note in static.notes]
    out += [
        f"- kernel code changed: `{_where(row)}` `{row.name}` ({row.detail})"
        + (f": {why}" if (why := launch_evidence(row, kernels)) else "")
        for row in static.kernel_changes
    ]
    listed = static.notes or static.kernel_changes
    return [*out, *([""] if listed else []), f"_{TRUST_LINE}_", ""]


def _sides(finding: Finding) -> list[str]:
    if finding.kind is FindingKind.DISPATCH_LOGIC:
        return [f"dispatch logic changed ({finding.detail})", finding.change_text]
    return [finding.before or ABSENT_TEXT, finding.after or ABSENT_TEXT]


def static_json(
    static: StaticDiff, checked: Sequence[CheckedRow], kernels: KernelTraceDiff | None = None
) -> dict[str, object]:
    return {
        **static.to_json(),
        "findings": [
            *({**row.finding.to_json(), "evidence": row.evidence.value, "evidence_detail": row.why} for row in checked),
            *({**note.to_json(), "evidence": None, "evidence_detail": ""} for note in static.notes),
        ],
        "kernel_code": [{**row.to_json(), "launches": launch_evidence(row, kernels)} for row in static.kernel_changes],
        "changes_dispatch": static.changes_dispatch,
        "message": None if static.changes_dispatch else NO_TABLE_CHANGE,
        "trust": TRUST_LINE,
    }


def finding_rows(explanation: Explanation) -> list[dict[str, object]]:
    """Every row of the explanation as one flat dict, for a table of them (the dashboard's): the static rows with
    their evidence (its label, and what the traced re-runs recorded), confirmed first; then the other rows."""
    checked = [
        {**row.finding.to_json(), "evidence": row.evidence.label, "evidence_detail": row.why}
        for row in explanation.checked
    ]
    rest = [
        {**f.to_json(), "evidence": "", "evidence_detail": ""}
        for f in explanation.findings()
        if not f.kind.is_dispatch_relevant and f.kind is not FindingKind.STATIC_SUMMARY
    ]
    return checked + rest


def md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(md_cell(cell) for cell in row) + " |" for row in rows]
    return lines
