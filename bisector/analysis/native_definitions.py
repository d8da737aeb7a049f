"""Rows from what C / C++ / CUDA code declares rather than what it tests, for the names no other row of the file
gives: numbers passed as template arguments (native_template_args.py), the dtypes of a type-dispatch macro
(native_dtype_dispatch.py), a kernel's launch bounds (native_kernel_bounds.py), a class's marker traits and member
defaults (native_class_members.py), the macro a whole source file is compiled under (native_file_gates.py) and a
call moved to another implementation (native_callees.py)."""

from __future__ import annotations

from collections.abc import Sequence

from bisector.analysis.findings import Finding
from bisector.analysis.gitdiff import Hunk
from bisector.analysis.native_callees import callee_rows
from bisector.analysis.native_class_members import class_member_rows
from bisector.analysis.native_dtype_dispatch import dtype_dispatch_rows
from bisector.analysis.native_file_gates import file_gate_rows
from bisector.analysis.native_kernel_bounds import kernel_bound_rows
from bisector.analysis.native_template_args import template_argument_rows
from bisector.analysis.rules import produce


def definition_rows(
    path: str, old_lines: list[str], new_lines: list[str], hunks: Sequence[Hunk], rows: Sequence[Finding]
) -> list[Finding]:
    named = {row.name for row in rows}
    texts = ("\n".join(old_lines), "\n".join(new_lines))
    found = [
        *produce("native_file_gates", file_gate_rows, path, old_lines, new_lines),
        *produce("native_callees", callee_rows, path, old_lines, new_lines, hunks, texts),
        *produce("native_kernel_bounds", kernel_bound_rows, path, *texts),
        *produce("native_dtype_dispatch", dtype_dispatch_rows, path, old_lines, new_lines, hunks),
        *produce("native_class_members", class_member_rows, path, old_lines, new_lines, hunks),
        *produce("native_template_args", template_argument_rows, path, old_lines, new_lines, hunks),
    ]
    kept: list[Finding] = []
    for row in found:
        if row.name not in named:
            named.add(row.name)
            kept.append(row)
    return kept
