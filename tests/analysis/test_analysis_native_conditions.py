"""Native conditions on real git histories: arch, dtype, version and platform tests are branch
conditions (a size compared is a threshold); a `#if` continued over lines and a project's GFX macros name the arch;
environment reads through a project's own readers and NCCL-style parameters; a `.dat` file that holds JSON is read
as a tuning file."""

from __future__ import annotations

import json

from analysis_history import History

from bisector.analysis import explain


def _rows(history: History, sha: str) -> list[tuple[str, str]]:
    return sorted((f.kind.value, f.name) for f in explain(history.path, sha).table_findings)


INIT_CU = """\
void init_common(Model *model) {
    model->recompute = 1;
}

void plan_chunks(Model *model, int nranks) {
    if (nranks > 64) {
        model->chunks = 4;
    }
}
"""


def test_an_arch_test_is_a_branch_condition_and_a_size_compared_stays_a_threshold(history: History) -> None:
    history.commit("init", {"train.cu": INIT_CU})
    changed = INIT_CU.replace(
        "    model->recompute = 1;\n",
        "    model->recompute = 1;\n    model->gelu_fusion = deviceProp.major >= 9 ? 1 : 0;\n",
    ).replace("nranks > 64", "nranks > 128")
    sha = history.commit("gelu fusion on H100", {"train.cu": changed})

    assert _rows(history, sha) == [("branch_condition", "init_common"), ("native_threshold", "plan_chunks")]


MEMORY_H = """\
#pragma once

#if defined(__gfx803__) || defined(__gfx900__) || defined(__gfx906__) \\
    || defined(__gfx90a__) // test device
#define USE_BUFFER_INTRINSIC
#define RESOURCE_DWORD 0x00020000
#endif

#if WMMA_ARCH_GFX1100 || WMMA_ARCH_GFX1101
#define WMMA_WAVE32_MODE 1
#endif

inline int lanes() { return 64; }
"""


def test_a_continued_if_and_a_projects_gfx_macros_name_the_arch(history: History) -> None:
    history.commit("memory", {"include/memory.h": MEMORY_H})
    changed = MEMORY_H.replace(
        "    || defined(__gfx90a__) // test device\n",
        "    || defined(__gfx90a__) || defined(__gfx942__) // test device\n",
    ).replace("WMMA_ARCH_GFX1101\n", "WMMA_ARCH_GFX1101 || WMMA_ARCH_GFX1102\n")
    sha = history.commit("gfx942 buffers, gfx1102 wave32", {"include/memory.h": changed})

    assert _rows(history, sha) == [
        ("branch_condition", "USE_BUFFER_INTRINSIC"),
        ("branch_condition", "WMMA_WAVE32_MODE"),
    ]  # each named by the first macro its block defines


PATHS_CC = """\
#if defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
#endif

int check_gdr(System *system, int gpu) {
    if (system->gdr_level < 2) return 0;
    return read_gdr(system, gpu);
}

void conv_launch(Params &params, cudaStream_t stream) {
#ifndef USE_ROCM
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
#else
    C10_CUDA_CHECK(cudaFuncSetAttribute((void *) kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    std::cerr << "Warning (conv launch): a no-op on AMD GPUs" << std::endl;
#endif
    kernel<<<params.batch, 128, kSmem, stream>>>(params);
}
"""


def test_a_platform_test_in_a_host_function_is_a_branch_condition_and_one_at_file_scope_is_none(
    history: History,
) -> None:
    history.commit("paths", {"src/paths.cc": PATHS_CC})
    changed = PATHS_CC.replace(
        "#if defined(__HIP_PLATFORM_AMD__)\n", "#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)\n"
    ).replace(
        "    return read_gdr(system, gpu);\n",
        "#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)\n    return 1;\n#else\n"
        "    return read_gdr(system, gpu);\n#endif\n",
    )
    changed = changed.replace(
        "#ifndef USE_ROCM\n    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,"
        " kSmem));\n#else\n",
        "",
    ).replace("#endif\n    kernel<<<", "    kernel<<<")
    sha = history.commit("GDR always on under HIP; one attribute call for both", {"src/paths.cc": changed})

    assert _rows(history, sha) == [("branch_condition", "check_gdr")]  # not conv_launch: the same calls on each


ENV_CC = """\
#include "env.h"

NCCL_PARAM(ChunkSize, "CHUNK_SIZE", 64 << 10);
NCCL_PARAM(NumChannels, "NCHANNELS", 2);
NCCL_PARAM(UseLL, "USE_LL", 1);

Env::Env()
    : debug(readEnv<std::string>("LIB_DEBUG", "")),
      disableCache(readEnv<bool>("LIB_DISABLE_CACHE", false)) {}

static std::unique_ptr<Allocator> create_allocator() {
    std::string name = read_string_from_env("LIB_CUDA_ALLOCATOR", "cub_caching");
    logEnv("LIB_CUDA_ALLOCATOR", name);
    return make_allocator(name);
}
"""


def test_reads_through_a_projects_env_helpers_and_declared_parameters_are_env_gates(history: History) -> None:
    history.commit("env", {"src/env.cc": ENV_CC})
    changed = (
        ENV_CC.replace('NCCL_PARAM(ChunkSize, "CHUNK_SIZE", 64 << 10);', 'NCCL_PARAM(ChunkSize, "CHUNK_SIZE", -1);')
        .replace(
            '      disableCache(readEnv<bool>("LIB_DISABLE_CACHE", false)) {}',
            '      disableCache(readEnv<bool>("LIB_DISABLE_CACHE", false)),\n'
            '      useReplica(readEnv<bool>("LIB_USE_REPLICA", false)) {}',
        )
        .replace(
            '    std::string name = read_string_from_env("LIB_CUDA_ALLOCATOR", "cub_caching");',
            '    std::string name = read_string_from_env("LIB_CUDA_ALLOCATOR",\n'
            '                                           async_supported() ? "cuda_malloc_async" : "cub_caching");',
        )
    )
    sha = history.commit("async allocator by default, tail replica switch", {"src/env.cc": changed})

    assert _rows(history, sha) == [
        ("env_gate", "ChunkSize"),
        ("env_gate", "LIB_CUDA_ALLOCATOR"),
        ("env_gate", "LIB_USE_REPLICA"),
    ]  # not LIB_DISABLE_CACHE (only a member after it), not logEnv (a writer), not the parameter list as a table


def _solution_map(half_lds: bool) -> str:
    problems = [
        {"Problem": {"arch": "gfx90a", "token": "kernel_len56"}, "Solutions": [{"half_lds": half_lds, "tpb": 16}]},
        {"Problem": {"arch": "gfx90a", "token": "kernel_len64"}, "Solutions": [{"half_lds": True, "tpb": 32}]},
    ]
    return json.dumps(problems, indent=1)


def test_a_dat_file_holding_json_is_a_tuning_file_and_other_data_is_skipped(history: History) -> None:
    history.commit(
        "maps",
        {"solution_map/gfx90a_solution_map.dat": _solution_map(True), "data/weights.dat": "1 2 3\n4 5 6\n"},
    )
    sha = history.commit(
        "no half lds for len 56",
        {"solution_map/gfx90a_solution_map.dat": _solution_map(False), "data/weights.dat": "1 2 3\n4 5 7\n"},
    )

    found = explain(history.path, sha).findings
    assert [(f.kind.value, f.file, f.key, f.before, f.after) for f in found] == [
        ("tuning_file", "solution_map/gfx90a_solution_map.dat", '[0]["Solutions"][0]["half_lds"]', "true", "false")
    ]  # the plain-text .dat gives neither a row nor a note


ALGO_CC = """\
double MatMulAlgorithm::ExcuteTimer(const Node* node, Options& options) {
    int m_id = dims - 2;
    if (in_num == 1) {
        m_id = dims - 3;
    }
    return 0.0f;
    if (options.quick_select) {
        return 0.0f;
    }
    return select_kernel(node, m_id);
}

void nominate_kernels(Params &params, int channels, bool split_k_only) {
    if (channels <= 32) {
        params.grouped = true;
    }
    params.ready = true;
}

void plan_tiles(Params &params, int n) {
    if (n > 8) {
        params.tiles = 4;
    }
}
"""


def test_a_test_changed_around_a_threshold_is_a_row_among_code_cut_off_by_an_if_0(
    history: History,
) -> None:
    history.commit("algos", {"src/algo_matmul.cc": ALGO_CC})
    changed = (
        ALGO_CC.replace("    if (in_num == 1) {\n", "#if 0\n    if (in_num == 1) {\n")
        .replace("        m_id = dims - 3;\n    }\n", "        m_id = dims - 3;\n    }\n#endif\n")
        .replace("    return 0.0f;\n    if (options", "    if (options")
        .replace("channels <= 32)", "channels <= 32 && !split_k_only)")
        .replace("n > 8", "n > 16")
    )
    sha = history.commit("time the algorithms; no m collapse; split-k nominees", {"src/algo_matmul.cc": changed})

    found = explain(history.path, sha).table_findings
    assert sorted((f.kind.value, f.name, f.key) for f in found) == [
        ("branch_condition", "nominate_kernels", "threshold"),  # the same 32 compared the same way
        ("native_threshold", "plan_tiles", "threshold"),
    ]


GUARDS_CC = """\
int plan(int n) {
    if (n == 0)
        return 0;
    switch (n) {
    case 1:
        return 1;
    default:
        break;
    }
    return n * 2;
}
"""


def test_a_guarded_return_or_one_that_ends_its_block_cuts_nothing_off(history: History) -> None:
    history.commit("plan", {"src/plan.cc": GUARDS_CC})
    changed = GUARDS_CC.replace("        return 0;\n", "        return -1;\n").replace(
        "        return 1;\n", "        return 3;\n"
    )
    sha = history.commit("other results", {"src/plan.cc": changed})

    assert [f for f in explain(history.path, sha).table_findings if f.key.startswith("code ")] == []


QMV_CPP = """\
void qmv(const array& x, int N, int K, int bits, int bn, CommandEncoder& enc) {
    bool fast = N % bn == 0 && K % 512 == 0;
    bool transposed = x.strides()[0] == x.shape(1);
    std::string kname = fast ? "qmv_fast" : "qmv";
    enc.dispatch(kname);
}
"""


def test_a_flag_kept_in_a_bool_whose_number_changes_is_a_threshold_row(history: History) -> None:
    history.commit("qmv", {"mlx/backend/metal/quantized.cpp": QMV_CPP})
    changed = QMV_CPP.replace("K % 512 == 0", "K % k_alignment(bits) == 0").replace(
        "x.strides()[0] == x.shape(1)", "x.strides()[1] == x.shape(0)"
    )
    sha = history.commit("fast path alignment from the bits", {"mlx/backend/metal/quantized.cpp": changed})

    found = explain(history.path, sha).table_findings
    assert [(f.kind.value, f.name, f.key, f.before) for f in found] == [
        ("native_threshold", "qmv", "condition kept in a bool", "bool fast = N % bn == 0 && K % 512 == 0;")
    ]  # not `transposed`: neither version compares a number


QMM_METAL_H = """\
#include <metal_stdlib>
using namespace metal;

template <typename T, const int BM, const int SM>
METAL_FUNC void qmm_impl(const device T* w, device T* y, const constant int& M, uint3 tid) {
  const short sgp_sm = min(SM, short(M - tid.y));
  y[tid.x] = w[tid.x] * sgp_sm;
}

template <typename T>
[[kernel]] void affine_qmm(const device T* w [[buffer(0)]], device T* y [[buffer(1)]],
                           uint3 tid [[thread_position_in_grid]]) {
  const int rows = min(int(tid.y), 64);
  qmm_impl<T, 32, 16>(w, y, rows, tid);
}
"""


def test_metal_kernels_and_their_helpers_are_device_code(history: History) -> None:
    history.commit("qmm", {"mlx/backend/metal/kernels/qmm.h": QMM_METAL_H})
    changed = QMM_METAL_H.replace("min(SM, short(M - tid.y))", "min(int(SM), M - tid.y)").replace(
        "min(int(tid.y), 64)", "min(int(tid.y), 128)"
    )
    sha = history.commit("no short overflow", {"mlx/backend/metal/kernels/qmm.h": changed})

    assert _rows(history, sha) == []  # a kernel's and its helper's computed locals are their bodies


LAYERNORM_CU = """\
void layernorm_backward(int kernel_num, float* dinp, const float* dout, int B, int T, int C, int block_size) {
    switch (kernel_num) {
        case 1:
            layernorm_backward1(dinp, dout, B, T, C, block_size);
            break;
        case 4:
            layernorm_backward4(dinp, dout, B, T, C, block_size);
            break;
        default:
            exit(1);
    }
}
"""


def test_a_builds_dtype_macro_gating_a_kernel_is_a_dtype_condition(history: History) -> None:
    header, utils = "typedef float OpType;\n", "bool use_true_fp16() {\n    return true;\n}\n"
    history.commit(
        "layernorm",
        {"dev/cuda/layernorm_backward.cu": LAYERNORM_CU, "include/declaration.h": header, "src/utils.cc": utils},
    )
    changed = LAYERNORM_CU.replace("        case 4:\n", "#if defined(ENABLE_BF16)\n        case 4:\n").replace(
        "            break;\n        default:", "            break;\n#endif\n        default:"
    )
    header = "#ifdef FP16_MODE\ntypedef __half OpType;\n#else\ntypedef float OpType;\n#endif\n"
    utils = utils.replace(
        "    return true;\n",
        '    static bool on = read_bool_from_env("LIB_TRUE_FP16_GEMM", true);\n    return on;\n',
    )
    sha = history.commit(
        "kernel 4 needs bf16",
        {"dev/cuda/layernorm_backward.cu": changed, "include/declaration.h": header, "src/utils.cc": utils},
    )

    found = explain(history.path, sha).table_findings
    assert [(f.kind.value, f.name, f.key) for f in found if f.kind.value != "env_gate"] == [
        ("branch_condition", "layernorm_backward", "condition on the dtype")
    ]  # not a header's build-wide #ifdef FP16_MODE (its types are compared where used), not FP16 in an env name
