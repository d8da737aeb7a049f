"""A file-scope threshold that is no constant (a tunable global) is a row; documentation's data files are no tuning
files (native.py, file_roles.py), on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import explain

VISITED_CPP = """\
#include "visited.h"

size_t visited_table_hashset_threshold = 500000;
int verbose_level = 0;

std::unique_ptr<VisitedTable> VisitedTable::create(size_t size) {
    size_t local_threshold = 100;
    if (size > visited_table_hashset_threshold) {
        return make_hashset(size, local_threshold);
    }
    return make_array(size);
}
"""

INVENTORY_YAML = "fields:\n  vae_precision: fp32\n"


def test_a_tunable_global_threshold_is_a_row_and_docs_data_is_no_tuning(history: History) -> None:
    history.commit(
        "visited table",
        {"faiss/impl/VisitedTable.cpp": VISITED_CPP, "docs/design/schema_inventory.yaml": INVENTORY_YAML},
    )
    changed = (
        VISITED_CPP.replace("= 500000;", "= 10000000;")
        .replace("verbose_level = 0;", "verbose_level = 1;")
        .replace("local_threshold = 100;", "local_threshold = 200;")
    )
    inventory = INVENTORY_YAML + "  vae_decode_precision: bf16\n"
    sha = history.commit(
        "hash set from 10M entries",
        {"faiss/impl/VisitedTable.cpp": changed, "docs/design/schema_inventory.yaml": inventory},
    )

    rows = sorted((f.file, f.name, f.before, f.after) for f in explain(history.path, sha).table_findings)

    # verbose_level names no threshold; local_threshold is a function's local (no const): neither is a row
    assert rows == [("faiss/impl/VisitedTable.cpp", "visited_table_hashset_threshold", "500000", "10000000")]


COMMUNICATE_PY = """\
import os

TIMEOUT_SEC = int(os.environ.get("TUTEL_GLOBAL_TIMEOUT_SEC", 1800))
FAST_A2A = int(os.environ.get("TUTEL_FAST_A2A", 0))
"""


def test_an_env_variable_that_sets_a_timeout_is_no_gate(history: History) -> None:
    history.commit("communicate", {"tutel/__init__.py": "", "tutel/communicate.py": COMMUNICATE_PY})
    changed = COMMUNICATE_PY.replace("1800", "86400").replace('"TUTEL_FAST_A2A", 0', '"TUTEL_FAST_A2A", 1')
    sha = history.commit("longer timeout; fast all-to-all on", {"tutel/communicate.py": changed})

    names = [f.name for f in explain(history.path, sha).table_findings]

    assert names == ["TUTEL_FAST_A2A"]


GEMM_CPP = """\
#include "gemm.h"

constexpr int kSplitKThreshold = 4096;

void gemm(int m, int n, int k) {
    if (k > kSplitKThreshold) {
        launch_split_k(m, n, k);
    } else {
        launch_plain(m, n, k);
    }
}
"""
GEMM_TEST_CPP = """\
#include "gemm.h"

static const int m_list[] = {1, 8, 64};

TEST(Gemm, Shapes) {
    for (int m : m_list) {
        if (m > 16) { check(m); }
    }
}
"""
CONDA_ENV = "name: all\ndependencies:\n  - cuda-version=12.9\n  - cupy>=12.0\n"


def test_c_tests_and_conda_environments_choose_no_dispatch_and_the_library_still_does(history: History) -> None:
    files = {
        "src/gemm.cpp": GEMM_CPP,
        "src/gemm_test.cpp": GEMM_TEST_CPP,
        "src/test_gemm_shapes.cu": GEMM_TEST_CPP,
        "conda/environments/all_cuda-129_arch-x86_64.yaml": CONDA_ENV,
    }
    history.commit("gemm", files)
    tests_changed = GEMM_TEST_CPP.replace("{1, 8, 64}", "{1, 8, 64, 128}").replace("m > 16", "m > 32")
    sha = history.commit(
        "split-k from 8192; more test shapes; CUDA 13",
        {
            "src/gemm.cpp": GEMM_CPP.replace("= 4096;", "= 8192;"),
            "src/gemm_test.cpp": tests_changed,
            "src/test_gemm_shapes.cu": tests_changed,
            "conda/environments/all_cuda-129_arch-x86_64.yaml": CONDA_ENV.replace("12.9", "13.0"),
        },
    )

    rows = sorted((f.file, f.name, f.before, f.after) for f in explain(history.path, sha).table_findings)

    assert rows == [("src/gemm.cpp", "kSplitKThreshold", "4096", "8192")]


QUANTIZED_METAL = """\
#include <metal_stdlib>
using namespace metal;

constant constexpr int QMV_ROWS_PER_SIMDGROUP = 4;

[[kernel]] void qmv(device const float* w [[buffer(0)]], uint tid [[thread_position_in_grid]]) {
}
"""
SOFTMAX_HIP = """\
#include <hip/hip_runtime.h>

constexpr int kOnlineSoftmaxMinCols = 1024;

void softmax(int rows, int cols) {
    if (cols >= kOnlineSoftmaxMinCols) {
        launch_online(rows, cols);
    } else {
        launch_block(rows, cols);
    }
}
"""


def test_metal_and_hip_sources_are_read_as_native_code(history: History) -> None:
    history.commit("kernels", {"backend/metal/quantized.metal": QUANTIZED_METAL, "src/softmax.hip": SOFTMAX_HIP})
    sha = history.commit(
        "8 rows per simdgroup; online softmax from 2048 columns",
        {
            "backend/metal/quantized.metal": QUANTIZED_METAL.replace("= 4;", "= 8;"),
            "src/softmax.hip": SOFTMAX_HIP.replace("= 1024;", "= 2048;"),
        },
    )

    rows = sorted((f.file, f.name, f.before, f.after) for f in explain(history.path, sha).table_findings)

    assert rows == [
        ("backend/metal/quantized.metal", "QMV_ROWS_PER_SIMDGROUP", "4", "8"),
        ("src/softmax.hip", "kOnlineSoftmaxMinCols", "1024", "2048"),
    ]
