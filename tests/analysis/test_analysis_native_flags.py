"""Native condition lines: a bool initialised with a literal holds none; a library's version and a threshold's
name are conditions (native.py, native_conditions.py), on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import explain

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
    assert [f.label for f in explain(history.path, sha).table_findings] == ["mul_mat_cublas condition on the arch"]


ALLREDUCE_CU = """\
#define AR_SIZE_THRESHOLD 196608

void invoke_all_reduce(Params & param, cudaStream_t stream) {
    size_t elts_total = param.elts_total;
    if (elts_total <= AR_SIZE_THRESHOLD) {
        one_shot(param, stream);
    } else {
        two_shot(param, stream);
    }
}

void Wrapper::int8_gemm(int m, int n, int k) {
#if (CUBLAS_VERSION) <= 11402
    gemm_old(m, n, k);
#else
    gemm_lt(m, n, k);
#endif
}
"""


def test_a_comparison_with_a_threshold_name_and_a_library_version_test_are_rows(history: History) -> None:
    history.commit("allreduce", {"src/ar.cu": ALLREDUCE_CU})
    changed = ALLREDUCE_CU.replace("elts_total <= AR", "elts_total * sizeof(T) <= AR").replace("<= 11402", "< 11601")
    sha = history.commit("bytes, not elements; cuBLAS 11.6 for the Lt path", {"src/ar.cu": changed})

    assert sorted(f.label for f in explain(history.path, sha).table_findings) == [
        "Wrapper::int8_gemm condition on the version",
        "invoke_all_reduce threshold",
    ]
