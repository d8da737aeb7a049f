"""Native rows of the twelfth round on real git histories: an arch `#if` added around device code whose `#else` only
warns or traps builds the code for some arches and stubs it out on the others (no row), while one whose `#else`
runs another path still picks code by the arch."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import static_diff


def _rows(history: History, sha: str) -> list[tuple[str, str]]:
    return sorted((f.kind.value, f.name) for f in static_diff(history.path, sha).table_findings)


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
