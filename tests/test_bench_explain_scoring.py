"""How benchmarks/bench_explain.py scores a row against a corpus item: the native counterparts of the Python kinds
count on C/C++/CUDA files, and only there."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_explain import _matches


def test_a_python_kind_on_a_native_file_accepts_its_native_counterpart():
    item = {"kind": "table_entry|constant|dispatch_logic", "file": "src/database/xgemm.hpp", "name": "*"}

    assert _matches(item, ("native_array", "src/database/xgemm.hpp", "XgemmSingle"))
    assert _matches(item, ("native_threshold", "src/database/xgemm.hpp", "kMinSize"))
    assert not _matches(item, ("native_array", "src/database/xgemm.hpp", "XgemmSingle"), strict=True)
    assert not _matches(item, ("launch_param", "src/database/xgemm.hpp", "kernel[...]"))


def test_on_a_python_file_kinds_are_taken_as_written():
    item = {"kind": "table_entry", "file": "ops/configs.py", "name": "*CONFIGS*"}

    assert _matches(item, ("table_entry", "ops/configs.py", "GEMM_CONFIGS"))
    assert not _matches(item, ("native_array", "ops/configs.py", "GEMM_CONFIGS"))
    assert not _matches(item, ("table_entry", "ops/configs.py", "OTHER"))
