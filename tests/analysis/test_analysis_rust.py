"""Rust sources (bisector/analysis/rust_source.py): cfg gates, environment reads, constants and branch tests, on
real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import Finding, static_diff

CPU_RS = """\
use half::{bf16, f16};

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[cfg(target_feature = "avx")]
pub mod avx;

#[cfg(any(
    target_feature = "neon",
    target_feature = "avx",
    target_feature = "simd128"
))]
#[inline(always)]
pub(crate) unsafe fn vec_dot_f32(a: *const f32, b: *const f32, c: *mut f32, k: usize) {
    *c = 0.0;
}
"""

OPS_RS = """\
const MAX_BLOCK_SIZE: usize = 512;

pub fn softmax_kernel(dtype: DType, dims: usize) -> &'static str {
    match dtype {
        DType::F32 => "softmax_f32",
        DType::F16 => "softmax_f16",
        _ => "softmax_generic",
    }
}
"""


def rows(findings: tuple[Finding, ...]) -> list[tuple[str, str, str | None, str | None]]:
    return [(f.kind.value, f.label, f.before, f.after) for f in findings if f.kind.is_dispatch_relevant]


def test_a_changed_cfg_gate_is_a_branch_condition_of_what_it_gates(history: History) -> None:
    history.commit("cpu", {"src/cpu/mod.rs": CPU_RS})
    sha = history.commit("avx2 only", {"src/cpu/mod.rs": CPU_RS.replace('"avx"', '"avx2"')})
    assert rows(static_diff(history.path, sha).findings) == [
        ("branch_condition", "mod avx cfg gate", '#[cfg(target_feature = "avx")]', '#[cfg(target_feature = "avx2")]'),
        ("branch_condition", "vec_dot_f32 cfg gate", 'target_feature = "avx",', 'target_feature = "avx2",'),
    ]


def test_an_item_added_with_its_gate_is_new_code_not_a_changed_gate(history: History) -> None:
    history.commit("cpu", {"src/cpu/mod.rs": CPU_RS})
    added = CPU_RS + '\n#[cfg(target_feature = "avx512f")]\npub mod avx512;\n'
    assert rows(static_diff(history.path, history.commit("avx512", {"src/cpu/mod.rs": added})).findings) == []


def test_an_env_read_a_constant_and_a_match_arm_in_rust_are_rows(history: History) -> None:
    history.commit("ops", {"src/ops.rs": OPS_RS})
    read = OPS_RS.replace(
        "    match dtype {",
        '    let fast = std::env::var("CANDLE_FAST_SOFTMAX").is_ok();\n    match dtype {',
    ).replace("MAX_BLOCK_SIZE: usize = 512", "MAX_BLOCK_SIZE: usize = 1024")
    assert rows(static_diff(history.path, history.commit("env", {"src/ops.rs": read})).findings) == [
        ("env_gate", "CANDLE_FAST_SOFTMAX read", None, 'let fast = std::env::var("CANDLE_FAST_SOFTMAX").is_ok()'),
        ("native_threshold", "MAX_BLOCK_SIZE", "512", "1024"),
    ]
    arm = read.replace('DType::F16 => "softmax_f16",', 'DType::F16 => "softmax_f32",')
    (row,) = rows(static_diff(history.path, history.commit("f16 on the f32 kernel", {"src/ops.rs": arm})).findings)
    assert row[:2] == ("branch_condition", "softmax_kernel branch test")  # no other rule read the file: last resort
    assert (row[2], row[3]) == ('DType::F16 => "softmax_f16",', 'DType::F16 => "softmax_f32",')


def test_rust_tests_and_benchmarks_are_not_read(history: History) -> None:
    history.commit("ops", {"tests/ops.rs": OPS_RS, "benches/ops.rs": OPS_RS})
    changed = OPS_RS.replace("512", "1024")
    sha = history.commit("tune the tests", {"tests/ops.rs": changed, "benches/ops.rs": changed})
    assert rows(static_diff(history.path, sha).findings) == []
