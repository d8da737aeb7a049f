"""The arch choosing without a branch, and file-scope arch conditions named by what they declare (native.py,
native_conditions.py), on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import explain

COMMON_H = """\
#pragma once
#include <type_traits>

#if MPK_TARGET_CC >= 90
constexpr int MAX_SHARE_MEMORY_SIZE = 224 * 1024;
#else
constexpr int MAX_SHARE_MEMORY_SIZE = 96 * 1024;
#endif

#if TCNN_MIN_GPU_ARCH >= 70
#include "fused_mlp.h"
#endif

using network_precision_t = std::conditional_t<MIN_GPU_ARCH == 61, float, __half>;

template <typename T>
using MMAOp = typename std::conditional<
    std::is_same<T, float>::value,
    OpClassSimt,
    OpClassTensorOp
>::type;
"""

RTC_CU = """\
#include "common.h"

void compile_kernel(const char* source) {
    uint32_t cc = supported_compute_capability();
    auto options = make_options(cc);
    run_nvrtc(source, options);
}
"""


def _rows(history: History, sha: str) -> list[tuple[str, str, str]]:
    return sorted((f.file, f.name, f.key) for f in explain(history.path, sha).table_findings)


def test_arch_choices_without_a_branch_and_at_file_scope(history: History) -> None:
    history.commit("common", {"include/common.h": COMMON_H, "src/rtc.cu": RTC_CU})
    common = (
        COMMON_H.replace("#if MPK_TARGET_CC >= 90", "#if MPK_TARGET_CC >= 100")
        .replace("#if TCNN_MIN_GPU_ARCH >= 70", "#if TCNN_MIN_GPU_ARCH > 70")
        .replace("MIN_GPU_ARCH == 61,", "MIN_GPU_ARCH == 61 || MIN_GPU_ARCH <= 52,")
        .replace("std::is_same<T, float>::value,", "std::is_same<T, float>::value || MIN_GPU_ARCH < 70,")
    )
    rtc = RTC_CU.replace("    auto options", "    cc = min(cc, 90u);\n    auto options")
    sha = history.commit("fp32 below sm53; cap the JIT arch", {"include/common.h": common, "src/rtc.cu": rtc})

    arch = "condition on the arch"
    # the #if that only includes a header chooses nothing here: the code that uses it is compared where it is
    assert _rows(history, sha) == [
        ("include/common.h", "MAX_SHARE_MEMORY_SIZE", arch),
        ("include/common.h", "MMAOp", arch),
        ("include/common.h", "network_precision_t", arch),
        ("src/rtc.cu", "compile_kernel", arch),
    ]


def test_an_arch_test_in_a_function_the_commit_adds_is_new_code(history: History) -> None:
    history.commit("common", {"include/common.h": COMMON_H})
    relu = """
template <>
inline __host__ __device__ __half relu(__half val) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __hmax(val, (__half)0.0f);
#else
    return (__half)relu<float>((float)val);
#endif
}
"""
    sha = history.commit("faster fp16 relu", {"include/common.h": COMMON_H + relu})

    assert _rows(history, sha) == []

    changed = COMMON_H + relu.replace("__CUDA_ARCH__ >= 800", "__CUDA_ARCH__ >= 530")
    sha = history.commit("hmax from sm53", {"include/common.h": changed})

    assert _rows(history, sha) == [("include/common.h", "relu", "condition on the arch")]
