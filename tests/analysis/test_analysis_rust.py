"""Rust sources (bisector/analysis/rust_source.py): cfg gates, environment reads, constants and branch tests, on
real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import Finding, explain

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


def test_a_match_arm_in_rust_is_a_row(history: History) -> None:
    history.commit("ops", {"src/ops.rs": OPS_RS})
    read = OPS_RS.replace(
        "    match dtype {",
        '    let fast = std::env::var("CANDLE_FAST_SOFTMAX").is_ok();\n    match dtype {',
    )
    history.commit("env", {"src/ops.rs": read})
    arm = read.replace('DType::F16 => "softmax_f16",', 'DType::F16 => "softmax_f32",')
    (row,) = rows(explain(history.path, history.commit("f16 on the f32 kernel", {"src/ops.rs": arm})).findings)
    assert row[:2] == ("branch_condition", "softmax_kernel branch test")  # no other rule read the file: last resort
    assert (row[2], row[3]) == ('DType::F16 => "softmax_f16",', 'DType::F16 => "softmax_f32",')


def test_rust_tests_and_benchmarks_are_not_read(history: History) -> None:
    history.commit("ops", {"tests/ops.rs": OPS_RS, "benches/ops.rs": OPS_RS, "src/ops/tests.rs": OPS_RS})
    changed = OPS_RS.replace('DType::F16 => "softmax_f16",', 'DType::F16 => "softmax_f32",')
    assert 'DType::F16 => "softmax_f16",' in OPS_RS  # a match arm: a row in a library file (the test above)
    sha = history.commit(
        "tune the tests", {"tests/ops.rs": changed, "benches/ops.rs": changed, "src/ops/tests.rs": changed}
    )
    assert rows(explain(history.path, sha).findings) == []


RUN_RS = """\
fn helper() {}

pub fn run(mode: u32) {
    log::info!("mode {} => {}", mode, 1);
    let brace = '}';
    if mode > 4 {
        fast();
    }
}
"""


def test_strings_and_char_literals_are_no_dispatch_code(history: History) -> None:
    history.commit("run", {"src/run.rs": RUN_RS})
    changed = RUN_RS.replace('"mode {} => {}"', '"mode {} => {} now"')
    assert rows(explain(history.path, history.commit("quiet", {"src/run.rs": changed})).findings) == []
    threshold = changed.replace("if mode > 4 {", "if mode > 8 {")  # after a '}' char literal: still run's own test
    (row,) = rows(explain(history.path, history.commit("threshold", {"src/run.rs": threshold})).findings)
    assert row == ("branch_condition", "run branch test", "if mode > 4 {", "if mode > 8 {")


def test_a_form_feed_in_a_string_keeps_rust_lines_where_git_counts_them(history: History) -> None:
    source = (
        'const SEP: &str = "a\x0cb";\n\npub fn pick(n: usize) -> u32 {\n'
        "    if n > 16 {\n        1\n    } else {\n        2\n    }\n}\n"
    )
    history.commit("pick", {"src/pick.rs": source})
    sha = history.commit("pick", {"src/pick.rs": source.replace("n > 16", "n > 32")})
    assert [row[1] for row in rows(explain(history.path, sha).findings)] == ["pick branch test"]
