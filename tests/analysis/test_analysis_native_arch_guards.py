"""Native arch guards on real git histories: an arch `#if` added around device code whose `#else` only
warns or traps builds the code for some arches and stubs it out on the others (no row), while one whose `#else`
runs another path still picks code by the arch; a non-type template parameter's default changed in a head written over
lines is a row; a host if that tests other named values (`path->type == PATH_NVL` -> `... || path->type == PATH_NVB`) is
a branch condition."""

from __future__ import annotations

from analysis_history import History, last_resort_functions, rules_rows

from bisector.analysis import explain


def _rows(history: History, sha: str) -> list[tuple[str, str]]:
    return sorted((f.kind.value, f.name) for f in explain(history.path, sha).table_findings)


COPY_CUH = """\
#pragma once

__device__ __forceinline__ void copy_async(float* dst, const float* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\\n" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ void copy_wait() {
    asm volatile("cp.async.wait_all;\\n" ::);
}
"""

GUARDED_CUH = (
    COPY_CUH.replace(
        '    asm volatile("cp.async.ca',
        '#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n    asm volatile("cp.async.ca',
    )
    .replace(
        '"l"(src));\n',
        '"l"(src));\n#else\n#warning "async copies need Ampere"\n#endif\n',
    )
    .replace(
        '    asm volatile("cp.async.wait_all;\\n" ::);\n',
        '#if __CUDA_ARCH__ >= 800\n    asm volatile("cp.async.wait_all;\\n" ::);\n#else\n    __trap();\n#endif\n',
    )
)


def test_an_arch_guard_whose_else_only_warns_or_traps_is_no_row(history: History) -> None:
    history.commit("copies", {"include/copy.cuh": COPY_CUH})
    sha = history.commit("build the copies on every arch", {"include/copy.cuh": GUARDED_CUH})

    assert _rows(history, sha) == []


def test_an_arch_if_whose_else_runs_another_path_is_still_a_branch_condition(history: History) -> None:
    history.commit("copies", {"include/copy.cuh": COPY_CUH})
    fallback = GUARDED_CUH.replace('#warning "async copies need Ampere"\n', "    *dst = *src;\n")
    sha = history.commit("copy synchronously before Ampere", {"include/copy.cuh": fallback})

    assert _rows(history, sha) == [("branch_condition", "copy_async")]


TRAITS_H = """\
#pragma once

template <uint32_t BlockDim, uint32_t BlockK, typename DataT, uint32_t TestWidth = BlockK>
struct VecTraits
{
    static constexpr uint32_t Width = TestWidth;
};
"""


def test_a_non_type_template_parameters_default_changed_over_lines_is_a_row(history: History) -> None:
    history.commit("traits", {"include/traits.h": TRAITS_H})
    changed = TRAITS_H.replace(
        "template <uint32_t BlockDim, uint32_t BlockK, typename DataT, uint32_t TestWidth = BlockK>\n",
        "template <uint32_t BlockDim,\n"
        "          uint32_t BlockK,\n"
        "          typename DataT = float,\n"
        "          uint32_t TestWidth = LINE_BYTES / sizeof(DataT)>\n",
    )
    sha = history.commit("start the width at a cache line", {"include/traits.h": changed})

    assert _rows(history, sha) == [("native_threshold", "default of TestWidth")]  # not DataT's new type default


CHANNELS_CC = """\
void channels_for(Comm* comm, Path* path, int err) {
    if (err != LIB_SUCCESS) return;
    if (path->type == PATH_NVL) {
        comm->channels = comm->nvlink_channels;
    } else {
        comm->channels = comm->pcie_channels;
    }
}
"""


def test_a_condition_on_named_values_that_tests_other_values_is_a_branch_condition(history: History) -> None:
    history.commit("channels", {"src/paths.cc": CHANNELS_CC})
    nvb = CHANNELS_CC.replace("path->type == PATH_NVL)", "path->type == PATH_NVL || path->type == PATH_NVB)")
    sha = history.commit("NVB links are NVLink too", {"src/paths.cc": nvb})
    assert _rows(history, sha) == [("branch_condition", "channels_for")]

    retried = nvb.replace("err != LIB_SUCCESS)", "err != LIB_SUCCESS && !retry)")
    sha = history.commit("retry", {"src/paths.cc": retried})
    assert rules_rows(history.path, sha) == []  # a status code is no path
    assert last_resort_functions(history.path, sha) == ["channels_for"]  # its changed branch test, no more
