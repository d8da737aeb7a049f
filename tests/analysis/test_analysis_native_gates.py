"""C / C++ condition rows (native_conditions.py, native_scope.py): a block that only refuses to build, a gate
rewritten to the same test and a spelling shim are no rows; a condition in an operator, under a long function head,
or spread over lines is named by its function, on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import explain


def _rows(history: History, sha: str) -> list[tuple[str, str]]:
    return sorted((f.kind.value, f.name) for f in explain(history.path, sha).table_findings)


MATX_H = """\
#pragma once
#ifdef __CUDACC__
#include <cuda_runtime_api.h>
#endif
#include "matx/core.h"
"""


def test_a_block_that_refuses_to_build_for_an_old_arch_is_no_row(history: History) -> None:
    history.commit("umbrella header", {"include/matx.h": MATX_H})
    changed = MATX_H.replace(
        "#ifdef __CUDACC__\n",
        '#ifdef __CUDACC__\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 600\n#error "needs sm_60"\n#endif\n',
    )
    sha = history.commit("refuse to build for Maxwell", {"include/matx.h": changed})

    assert _rows(history, sha) == []


SCAN_HPP = """\
inline int scan_impl(int device_id, int size, const hipDeviceProp_t &prop) {
    int asicRevision = get_revision(device_id);
    if (prop.gcnArch == 908 && asicRevision < 2) {
        return scan_with_sleep(size);
    }
    return scan_plain(size);
}

inline bool graphs_enabled(const cuda_info &info) {
    if (info.cc < GGML_CUDA_CC_AMPERE) {
        return false;
    }
    return true;
}

template <typename T>
void all_reduce(size_t elts_total) {
    int kernel_algo = 1;
    if (elts_total <= DEFAULT_AR_SIZE_THRESHOLD) {
        kernel_algo = 0;
    }
    launch_all_reduce(kernel_algo, elts_total);
}
"""


def test_the_same_gate_rewritten_is_no_row_but_another_constant_or_a_scaled_size_is(history: History) -> None:
    history.commit("gates", {"src/device_scan.hpp": SCAN_HPP})
    changed = (
        SCAN_HPP.replace(
            "if (prop.gcnArch == 908 && asicRevision < 2)",
            'if (std::string(prop.gcnArchName).find("908") != std::string::npos && asicRevision < 2)',
        )
        .replace("info.cc < GGML_CUDA_CC_AMPERE", "info.cc < GGML_CUDA_CC_VOLTA")
        .replace("elts_total <= DEFAULT_AR_SIZE_THRESHOLD", "elts_total * sizeof(T) <= DEFAULT_AR_SIZE_THRESHOLD")
    )
    sha = history.commit(
        "gcnArch is deprecated; graphs from Volta; the threshold in bytes", {"src/device_scan.hpp": changed}
    )

    names = [name for _, name in _rows(history, sha)]
    assert "scan_impl" not in names
    assert sorted(set(names)) == ["all_reduce", "graphs_enabled"]


TYPES_H = """\
template <> struct VecTypeSelector<double, 3> { using type = double3; };
template <> struct VecTypeSelector<double, 4> { using type = double4; };

__device__ void mma(float* c, const half* a, const half* b) {
  mma_sm75(c, a, b);
}
"""


def test_a_toolkits_new_spelling_under_a_version_gate_is_no_row_but_an_arch_branch_is(history: History) -> None:
    history.commit("vector types", {"include/type_utils.h": TYPES_H})
    changed = TYPES_H.replace(
        "template <> struct VecTypeSelector<double, 4> { using type = double4; };",
        "#if defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 13\n"
        "template <> struct VecTypeSelector<double, 4> { using type = double4_32a; };\n"
        "#else\n"
        "template <> struct VecTypeSelector<double, 4> { using type = double4; };\n"
        "#endif",
    ).replace(
        "  mma_sm75(c, a, b);\n",
        "#if __CUDA_ARCH__ >= 800\n  mma_sm80(c, a, b);\n#else\n  mma_sm75(c, a, b);\n#endif\n",
    )
    sha = history.commit("CUDA 13 vector types; sm80 MMA", {"include/type_utils.h": changed})

    assert _rows(history, sha) == [("branch_condition", "mma")]


LAUNCH_CU = """\
void launch(Params &params) {
#if CUDA_VERSION >= 12000
    bool on_amd = __HIP_PLATFORM_AMD__ == 1;
    run(params, on_amd);
#else
    run(params, false);
#endif
}
"""


def test_a_platform_test_in_code_is_a_row_though_the_rest_of_its_branch_calls_as_the_else_does(
    history: History,
) -> None:
    history.commit("launch", {"src/launch.cu": LAUNCH_CU})
    changed = LAUNCH_CU.replace("__HIP_PLATFORM_AMD__ == 1;", "__HIP_PLATFORM_AMD__ == 1 || __HIPCC__ == 1;")
    sha = history.commit("AMD under hipcc too", {"src/launch.cu": changed})

    assert _rows(history, sha) == [("branch_condition", "launch")]  # the line opens no #if: no port shim to read


ITERATOR_HPP = """\
template <class T>
class texture_cache_iterator {
public:
    __host__ __device__ inline
    T operator*() const
    {
        T words[4];
        for (int i = 0; i < 4; i++) {
            words[i] = tex1Dfetch(texture_object, offset + i);
        }
        return words[0];
    }
};
"""


def test_an_arch_gate_in_an_operator_is_named_by_the_operator(history: History) -> None:
    history.commit("iterator", {"include/texture_cache_iterator.hpp": ITERATOR_HPP})
    changed = ITERATOR_HPP.replace(
        "        for (int i = 0; i < 4; i++) {\n            words[i] = tex1Dfetch(texture_object, offset + i);\n"
        "        }\n",
        "#if defined(__gfx940__) || defined(__gfx942__)\n        words[0] = T();\n#else\n"
        "        for (int i = 0; i < 4; i++) {\n            words[i] = tex1Dfetch(texture_object, offset + i);\n"
        "        }\n#endif\n",
    )
    sha = history.commit("no texture fetch on gfx94x", {"include/texture_cache_iterator.hpp": changed})

    assert _rows(history, sha) == [("branch_condition", "operator*")]


PARAMETERS = "".join(f"    const int64_t arg{i},\n" for i in range(40))
ATTENTION_CU = f"""\
std::pair<int, attention_config>
attention_prepare(
{PARAMETERS}    const int64_t max_kvlen)
{{
    attention_config config{{0}};
    const int64_t total_blocks = arg0 * arg1;
    const int32_t sm_count = arg2;
    int64_t multi_block = 1;
    if (arg3 > 0 && total_blocks < sm_count && max_kvlen >= 1024) {{
        multi_block = 4;
    }}
    config.multi_block = multi_block;
    return {{0, config}};
}}
"""


def test_a_condition_spread_over_lines_under_a_long_head_is_a_row(history: History) -> None:
    history.commit("attention", {"src/attention.cu": ATTENTION_CU})
    changed = ATTENTION_CU.replace(
        "    if (arg3 > 0 && total_blocks < sm_count && max_kvlen >= 1024) {",
        "    const float threshold = sm_count * std::max(1.0f, logf(max_kvlen / 1024.0f));\n"
        "    if (arg3 > 0 &&\n        total_blocks < threshold &&\n        max_kvlen >= 1024) {",
    )
    sha = history.commit("split-k scaled by the kv length", {"src/attention.cu": changed})

    assert sorted({name for _, name in _rows(history, sha)}) == ["attention_prepare"]


FRONTEND_H = """\
#pragma once
#define CUDNN_FRONTEND_MAJOR_VERSION 1
#define CUDNN_FRONTEND_PATCH_VERSION 2
#define CUDNN_FRONTEND_MIN_BACKEND_VERSION 8900
#define WORKSPACE_LIMIT 4096

std::vector<Tensor>
mha_fwd_block(const Tensor &q,
// batch x seqlen x heads x head_size
              const Tensor &k,
              const bool is_causal)
{
    auto dprops = get_device_properties();
    bool is_sm90 = dprops->major == 9 && dprops->minor == 0;
    return run(q, k, is_sm90);
}
"""


def test_a_release_number_is_no_row_and_a_head_with_comment_lines_names_its_function(history: History) -> None:
    history.commit("frontend", {"include/cudnn_frontend.h": FRONTEND_H})
    changed = (
        FRONTEND_H.replace("PATCH_VERSION 2", "PATCH_VERSION 3")
        .replace("BACKEND_VERSION 8900", "BACKEND_VERSION 90000")
        .replace("LIMIT 4096", "LIMIT 8192")
        .replace("dprops->major == 9 && dprops->minor == 0", "dprops->major >= 9 && dprops->minor >= 0")
    )
    sha = history.commit("1.0.3: Blackwell passes the sm90 checks", {"include/cudnn_frontend.h": changed})

    assert _rows(history, sha) == [
        ("branch_condition", "mha_fwd_block"),
        ("native_threshold", "CUDNN_FRONTEND_MIN_BACKEND_VERSION"),
        ("native_threshold", "WORKSPACE_LIMIT"),
    ]


def test_a_new_spelling_under_a_version_gate_continued_over_lines_is_no_row(history: History) -> None:
    """The gate's continuation line is part of the directive, not of the `#if` branch it opens."""
    history.commit("vector types", {"include/type_utils.h": TYPES_H})
    changed = TYPES_H.replace(
        "template <> struct VecTypeSelector<double, 4> { using type = double4; };",
        "#if defined(__CUDACC_VER_MAJOR__) && \\\n    __CUDACC_VER_MAJOR__ >= 13\n"
        "template <> struct VecTypeSelector<double, 4> { using type = double4_32a; };\n"
        "#else\n"
        "template <> struct VecTypeSelector<double, 4> { using type = double4; };\n"
        "#endif",
    )
    sha = history.commit("CUDA 13 vector types", {"include/type_utils.h": changed})

    assert _rows(history, sha) == []
