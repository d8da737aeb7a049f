"""A module flag that other changed code starts to import (imported_flags.py), on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, static_diff

CONSTANTS_PY = """\
import os

SPCONV_CPP_GEMM = True
SPCONV_FX_TRACE_MODE = os.getenv("SPCONV_FX_TRACE_MODE", "0") == "1"
SPCONV_DIRECT_TABLE_HASH_SIZE_SCALE = 1.1
"""

OPS_PY = """\
from spconv.constants import SPCONV_CPP_GEMM


def implicit_gemm(features, filters, stream):
    if SPCONV_CPP_GEMM:
        return ConvGemmOps.implicit_gemm(features, filters, stream)
    return ConvGemmOps.python_gemm(features, filters, stream)
"""


def _base(history: History) -> None:
    history.commit(
        "ops",
        {"spconv/__init__.py": "", "spconv/constants.py": CONSTANTS_PY, "spconv/ops.py": OPS_PY},
    )


def _constant_rows(history: History, sha: str) -> list[tuple[str, str, str | None, str | None]]:
    found = static_diff(history.path, sha).table_findings
    return [(f.file, f.name, f.before, f.after) for f in found if f.kind is FindingKind.CONSTANT]


def test_a_new_flag_another_changed_module_imports_is_a_constant_row(history: History) -> None:
    _base(history)
    ops = OPS_PY.replace("import SPCONV_CPP_GEMM", "import SPCONV_CPP_GEMM, SPCONV_ALLOW_TF32").replace(
        "(features, filters, stream)\n    return", "(features, filters, stream, use_tf32=SPCONV_ALLOW_TF32)\n    return"
    )
    sha = history.commit(
        "tf32 off by default",
        {"spconv/constants.py": CONSTANTS_PY + "\nSPCONV_ALLOW_TF32 = False\n", "spconv/ops.py": ops},
    )

    assert _constant_rows(history, sha) == [("spconv/constants.py", "SPCONV_ALLOW_TF32", None, "False")]


def test_a_new_flag_nothing_imports_yet_is_new_code(history: History) -> None:
    _base(history)
    sha = history.commit("a flag for later", {"spconv/constants.py": CONSTANTS_PY + "\nSPCONV_ALLOW_TF32 = False\n"})

    assert _constant_rows(history, sha) == []


def test_a_flag_imported_before_the_commit_is_no_new_read(history: History) -> None:
    _base(history)
    constants = CONSTANTS_PY + "\nSPCONV_USE_CUTLASS = True\n"
    ops = OPS_PY.replace("import SPCONV_CPP_GEMM", "import SPCONV_CPP_GEMM, SPCONV_USE_CUTLASS")
    history.commit("cutlass flag", {"spconv/constants.py": constants, "spconv/ops.py": ops})
    sha = history.commit(
        "one more flag, read nowhere",
        {"spconv/constants.py": constants + "\nSPCONV_DEBUG_TABLES = True\n", "spconv/ops.py": ops + "\n# later\n"},
    )

    assert _constant_rows(history, sha) == []
