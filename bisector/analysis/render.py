"""The explanation in the report's three formats: rich (terminal), Markdown (a PR comment), JSON (tools)."""

from __future__ import annotations

from io import StringIO

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from bisector.analysis.change_units import ChangeUnit
from bisector.analysis.dispatch_diff import DispatchDiff, DispatchRow
from bisector.analysis.explanation import Explanation
from bisector.analysis.findings import ABSENT_TEXT
from bisector.analysis.kernel_trace import KernelTraceDiff
from bisector.analysis.minimize import MinimizeResult
from bisector.analysis.render_calls import calls_json, calls_markdown, calls_renderables
from bisector.analysis.render_static import MAX_ROWS, md_cell, md_table, static_json, static_markdown, static_renderable
from bisector.analysis.shape_table import ShapeRow, ShapeTable

MAX_NAME = 90  # kernel names are long C++ signatures


# --- plain lines, shared by the text and Markdown forms ------------------------------------------------------


def _change(before: str, after: str) -> str:
    return before if before == after else f"{before} -> {after}"


def _shape_cells(row: ShapeRow) -> list[str]:
    return [
        f"({row.n}, {row.k})",
        _change(row.mma_from_before, row.mma_from_after),
        _change(row.decode_before, row.decode_after),
        _change(row.verify_before, row.verify_after),
        ", ".join(row.ops) or "-",
        row.source,
    ]


def _shape_headers(shapes: ShapeTable) -> list[str]:
    return [
        "(N, K)",
        "MMA from m",
        f"decode m={shapes.decode_m} path",
        f"verify m={shapes.verify_m} path",
        "ops",
        "from",
    ]


def _dispatch_cells(row: DispatchRow) -> list[str]:
    def side(kernel: str | None, reason: str, count: int) -> str:
        if kernel is None:
            return ABSENT_TEXT
        return kernel + (f" ({reason})" if reason else "") + (f" x{count}" if count > 1 else "")

    return [
        row.op,
        f"({row.n}, {row.k})",
        str(row.m),
        side(row.before, row.reason_before, row.count_before),
        side(row.after, row.reason_after, row.count_after),
    ]


def _dispatch_summary(dispatch: DispatchDiff) -> str:
    changed = sum(1 for row in dispatch.rows if row.changed)
    return (
        f"{changed} (op, N, K, m) took another kernel ({len(dispatch.only_before)} ran only at the last good "
        f"commit, {len(dispatch.only_after)} only at the first bad); {dispatch.unchanged_shapes} (op, N, K) kept "
        f"theirs; the traced runs made {dispatch.decisions_before} dispatch decisions at the last good commit and "
        f"{dispatch.decisions_after} at the first bad"
    )


def _dispatch_title(dispatch: DispatchDiff) -> str:
    """The table's title names the batch sizes m its rows show."""
    ms = sorted({row.m for row in dispatch.rows[:MAX_ROWS]})
    return f"runtime dispatch at m = {', '.join(map(str, ms))} (last good -> first bad)" if ms else "runtime dispatch"


def _kernel_summary(kernels: KernelTraceDiff) -> str:
    devices = "/".join(kernels.devices) or "no"
    return (
        f"{len(kernels.only_before)} kernels only at last good, {len(kernels.only_after)} only at first bad, "
        f"{len(kernels.count_changed)} with other launch counts, {kernels.unchanged} unchanged ({devices} trace)"
    )


def _short(name: str) -> str:
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 3] + "..."


def _unit_lines(unit: ChangeUnit) -> list[str]:
    return [*(f"-{line}" for line in unit.removed), *(f"+{line}" for line in unit.added)]


# --- rich text -----------------------------------------------------------------------------------------------


def render_text(explanation: Explanation, width: int = 120) -> str:
    buffer = StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    print_text(console, explanation)
    return buffer.getvalue()


def print_text(console: Console, explanation: Explanation) -> None:
    for renderable in text_renderables(explanation):
        console.print(renderable)


def text_renderables(explanation: Explanation) -> list[RenderableType]:
    """The explanation as rich renderables (no markup is interpreted in the rows)."""
    out: list[RenderableType] = []
    shapes = explanation.shapes
    if shapes.conclusion:
        out.append(Text(shapes.conclusion, style="bold"))
    if shapes.rows:
        table = Table(title="dispatch per shape (last good -> first bad)")
        for header in _shape_headers(shapes):
            table.add_column(header, overflow="fold")
        for row in shapes.rows:
            table.add_row(*(Text(cell) for cell in _shape_cells(row)))
        out.append(table)
    if explanation.static is not None:
        out.append(static_renderable(explanation.static, explanation.checked, explanation.kernels))
    if explanation.dispatch is not None:
        out.append(_dispatch_table(explanation.dispatch))
    if explanation.kernels is not None:
        out.append(_kernel_table(explanation.kernels))
    out += calls_renderables(explanation.calls, explanation.trace_note)
    if explanation.minimized is not None:
        out.append(_minimized_text(explanation.minimized))
    return out


def _dispatch_table(dispatch: DispatchDiff) -> RenderableType:
    table = Table(title=_dispatch_title(dispatch), caption=_dispatch_summary(dispatch))
    for header in ("op", "(N, K)", "m", "last good", "first bad"):
        table.add_column(header, overflow="fold")
    for row in dispatch.rows[:MAX_ROWS]:
        table.add_row(*(Text(cell) for cell in _dispatch_cells(row)), style="bold" if row.changed else "dim")
    return table


def _kernel_table(kernels: KernelTraceDiff) -> RenderableType:
    table = Table(title="kernel launches (last good -> first bad)", caption=_kernel_summary(kernels))
    for header in ("kernel", "last good", "first bad"):
        table.add_column(header, overflow="fold")
    for row in kernels.rows[:MAX_ROWS]:
        table.add_row(Text(_short(row.name)), str(row.before or "-"), str(row.after or "-"))
    return table


def _minimized_text(result: MinimizeResult) -> RenderableType:
    lines = [Text(f"minimised culprit: {result.summary}", style="bold")]
    for index, group in enumerate(result.groups, start=1):
        if len(result.groups) > 1:
            lines.append(Text(f"  cause {index}:"))
        for unit in group:
            lines.append(Text(f"  {unit.label}"))
            lines += [Text(f"    {line}") for line in _unit_lines(unit)]
    if result.minimal_sha:
        lines.append(Text(f"  variant with only these changes: {result.minimal_sha}"))
    return Group(*lines)


# --- Markdown ------------------------------------------------------------------------------------------------


def render_markdown(explanation: Explanation) -> str:
    return "\n".join(markdown_lines(explanation))


def markdown_lines(explanation: Explanation) -> list[str]:
    out: list[str] = ["#### Why this commit is bad", ""]
    shapes = explanation.shapes
    if shapes.conclusion:
        out += [f"**{md_cell(shapes.conclusion)}**", ""]
    if shapes.rows:
        out += [*md_table(_shape_headers(shapes), [_shape_cells(row) for row in shapes.rows]), ""]
    if explanation.static is not None:
        out += static_markdown(explanation.static, explanation.checked, explanation.kernels)
    if explanation.dispatch is not None:
        dispatch = explanation.dispatch
        title = md_cell(_dispatch_title(dispatch))
        out += [
            f"<details><summary>{title[0].upper() + title[1:]}: {md_cell(_dispatch_summary(dispatch))}</summary>",
            "",
        ]
        rows = [_dispatch_cells(row) for row in dispatch.rows[:MAX_ROWS]]
        out += [*md_table(["op", "(N, K)", "m", "last good", "first bad"], rows), "", "</details>", ""]
    if explanation.kernels is not None:
        kernels = explanation.kernels
        out += [f"<details><summary>Kernel launches: {md_cell(_kernel_summary(kernels))}</summary>", ""]
        rows = [[f"`{_short(r.name)}`", str(r.before or "-"), str(r.after or "-")] for r in kernels.rows[:MAX_ROWS]]
        out += [*md_table(["kernel", "last good", "first bad"], rows), "", "</details>", ""]
    out += calls_markdown(explanation.calls, explanation.trace_note)
    if explanation.minimized is not None:
        out += _markdown_minimized(explanation.minimized)
    return out


def _markdown_minimized(result: MinimizeResult) -> list[str]:
    out = [f"**Minimised culprit:** {md_cell(result.summary)}", ""]
    if result.minimal:
        out.append("```diff")
        for index, group in enumerate(result.groups, start=1):
            if len(result.groups) > 1:
                out.append(f"## cause {index}")
            for unit in group:
                out += [f"# {unit.label}", *_unit_lines(unit)]
        out += ["```", ""]
    if result.minimal_sha:
        out += [f"Variant with only these changes: `{result.minimal_sha}`", ""]
    return out


# --- JSON ----------------------------------------------------------------------------------------------------


def explanation_json(explanation: Explanation) -> dict[str, object]:
    shapes = explanation.shapes
    data: dict[str, object] = {
        "conclusion": shapes.conclusion,
        "shapes": {
            "decode_m": shapes.decode_m,
            "verify_m": shapes.verify_m,
            "rows": [
                {
                    "N": r.n,
                    "K": r.k,
                    "ops": list(r.ops),
                    "mma_from": [r.mma_from_before, r.mma_from_after],
                    "decode": [r.decode_before, r.decode_after],
                    "verify": [r.verify_before, r.verify_after],
                    "batch_variant": r.became_batch_variant,
                    "source": r.source,
                }
                for r in shapes.rows
            ],
        },
        "static": None,
        "dispatch": None,
        "kernels": None,
        "minimized": None,
        **calls_json(explanation.calls, explanation.trace_note),
    }
    if explanation.static is not None:
        data["static"] = static_json(explanation.static, explanation.checked, explanation.kernels)
    if explanation.dispatch is not None:
        dispatch = explanation.dispatch
        data["dispatch"] = {
            "rows": [
                {
                    "op": r.op, "N": r.n, "K": r.k, "m": r.m, "before": r.before, "after": r.after,
                    "reason_before": r.reason_before, "reason_after": r.reason_after,
                    "count_before": r.count_before, "count_after": r.count_after, "changed": r.changed,
                }
                for r in dispatch.rows
            ],
            "unchanged_shapes": dispatch.unchanged_shapes,
            "decisions_before": dispatch.decisions_before,
            "decisions_after": dispatch.decisions_after,
        }  # fmt: skip
    if explanation.kernels is not None:
        kernels = explanation.kernels
        data["kernels"] = {
            "rows": [{"name": r.name, "before": r.before, "after": r.after} for r in kernels.rows],
            "unchanged": kernels.unchanged,
            "devices": list(kernels.devices),
        }
    if explanation.minimized is not None:
        result = explanation.minimized
        data["minimized"] = {
            "status": result.status.value,
            "summary": result.summary,
            "culprit": result.culprit,
            "parent": result.parent,
            "unit_count": result.unit_count,
            "test_count": result.test_count,
            "minimal_sha": result.minimal_sha,
            "minimal": [_unit_json(unit) for unit in result.minimal],
            "groups": [[unit.id for unit in group] for group in result.groups],
            "trials": [{"units": list(t.units), "sha": t.sha, "verdict": t.verdict.value} for t in result.trials],
        }
    return data


def _unit_json(unit: ChangeUnit) -> dict[str, object]:
    return {
        "id": unit.id,
        "path": unit.path,
        "kind": unit.kind.value,
        "description": unit.description,
        "line": unit.line,
        "removed": list(unit.removed),
        "added": list(unit.added),
    }
