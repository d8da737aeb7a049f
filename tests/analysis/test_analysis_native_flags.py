"""A C / C++ bool initialised with a literal holds no condition (native.py), on a real git history."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import static_diff

CUBLAS_CU = """\
struct force_compute_type {
    bool fp32 = false;
};

static void mul_mat_cublas(Context & ctx, int cc) {
    bool use_fp32 = cc == CC_VOLTA;
    run_cublas(ctx, use_fp32);
}
"""


def test_a_bool_field_with_a_literal_default_is_no_condition(history: History) -> None:
    history.commit("cublas", {"src/cublas.cu": CUBLAS_CU})
    changed = CUBLAS_CU.replace("    bool fp32 = false;\n", "    bool fp32 = false;\n    bool fp16 = false;\n").replace(
        "bool use_fp32 = cc == CC_VOLTA;", "bool use_fp32 = cc == CC_VOLTA && !ctx.fp16;"
    )
    sha = history.commit("a flag to force fp16 compute", {"src/cublas.cu": changed})

    # the new field names a dtype but tests nothing; the bool that tests the arch changed
    assert [f.label for f in static_diff(history.path, sha).table_findings] == ["mul_mat_cublas condition on the arch"]
