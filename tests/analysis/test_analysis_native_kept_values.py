"""Native rows on real git histories: OpenCL C kernel files are read (a changed `#if` comparing
a tuning macro is a branch condition; a kernel's own locals are its body); an arch `#if` continued over many lines;
an `#else` added to an arch `#if` that undefines a feature macro for the other arches; and changes that keep every
value are no rows: a cast added and a local named for a product, an `if constexpr` written
through a macro, and an arch test moved within its function."""

from __future__ import annotations

from analysis_history import History, last_resort_functions, rules_rows

from bisector.analysis import explain
from bisector.analysis.native_value_forms import value_form


def _rows(history: History, sha: str) -> list[tuple[str, str]]:
    return sorted({(f.kind.value, f.name) for f in explain(history.path, sha).table_findings})


COMMON_OPENCL = """\
R"(
#ifndef GEMMK
  #define GEMMK 0
#endif

#if USE_STAGGERED_INDICES == 1
  INLINE_FUNC int GetGroupIDFlat() {
    return get_group_id(0) + get_num_groups(0) * get_group_id(1);
  }
#endif

__kernel __attribute__((reqd_work_group_size(WGS, 1, 1)))
void Xhad(const int n, const __global realV* restrict xgm, __global realV* zgm) {
  if (get_global_id(0) < n / (VW)) {
    for (int _w = 0; _w < WPT; _w += 1) {
      const int id = _w*get_global_size(0) + get_global_id(0);
      zgm[id] = xgm[id];
    }
  }
}
)"
"""


def test_an_opencl_kernel_files_macro_condition_is_a_branch_condition(history: History) -> None:
    history.commit("kernels", {"src/kernels/common.opencl": COMMON_OPENCL, "src/kernels/xhad.cl": COMMON_OPENCL})
    gated = COMMON_OPENCL.replace("#if USE_STAGGERED_INDICES == 1\n", "#if USE_STAGGERED_INDICES == 1 && GEMMK == 0\n")
    sha = history.commit("no staggered indices for GEMMK == 1", {"src/kernels/common.opencl": gated})

    assert _rows(history, sha) == [("branch_condition", "condition on a macro")]


def test_an_opencl_kernels_own_local_is_its_body(history: History) -> None:
    history.commit("kernels", {"src/kernels/xhad.cl": COMMON_OPENCL})
    fixed = COMMON_OPENCL.replace(
        "const int id = _w*get_global_size(0) + get_global_id(0);",
        "const int id = _w * (n / (VW * WPT)) + get_global_id(0);",
    )
    sha = history.commit("out-of-bounds fix", {"src/kernels/xhad.cl": fixed})

    assert _rows(history, sha) == []


COMMON_H = """\
#pragma once

namespace detail {

#if ( defined(__HIP_PLATFORM_NVCC__) || \\
      defined(__gfx801__) || \\
      defined(__gfx802__) || \\
      defined(__gfx803__) || \\
      defined(__gfx900__) || \\
      defined(__gfx906__) || \\
      defined(__gfx908__) || \\
      defined(__gfx909__) )
  #if !defined(ENABLE_INLINE_ASM)
    #define ENABLE_INLINE_ASM
  #endif
#endif

} // namespace detail
"""


def test_an_arch_added_to_a_long_continued_if_is_a_branch_condition(history: History) -> None:
    history.commit("common", {"include/common.h": COMMON_H})
    more = COMMON_H.replace("defined(__gfx909__) )", "defined(__gfx909__) || \\\n      defined(__gfx1030__) )")
    sha = history.commit("inline asm on gfx1030", {"include/common.h": more})

    assert _rows(history, sha) == [("branch_condition", "condition on the arch")]


def test_an_else_that_undefines_a_feature_macro_for_the_other_arches_is_a_branch_condition(history: History) -> None:
    history.commit("common", {"include/common.h": COMMON_H})
    other_arches = COMMON_H.replace(
        "  #endif\n#endif\n",
        "  #endif\n#else\n  #if defined(__HIP_DEVICE_COMPILE__) && defined(ENABLE_INLINE_ASM)\n"
        "    #undef ENABLE_INLINE_ASM\n  #endif\n#endif\n",
    )
    sha = history.commit("no inline asm on the other arches", {"include/common.h": other_arches})

    assert _rows(history, sha) == [("branch_condition", "condition on the arch")]


XGEMM_CPP = """\
template <typename T>
void Xgemm<T>::DoGemm(const size_t m, const size_t n, const size_t k) {
  TestMatrixA(m, k);

  // Selects which version of GEMM to run
  const auto do_gemm_direct = (m * n * k < db_["XGEMM_MIN_INDIRECT_SIZE"]);
  if (do_gemm_direct) {
    GemmDirect(m, n, k);
  } else {
    GemmIndirect(m, n, k);
  }
}
"""


def test_a_cast_added_and_a_local_named_for_a_product_keep_the_value(history: History) -> None:
    history.commit("gemm", {"src/xgemm.cpp": XGEMM_CPP})
    widened = XGEMM_CPP.replace(
        '  const auto do_gemm_direct = (m * n * k < db_["XGEMM_MIN_INDIRECT_SIZE"]);\n',
        "  const auto m_n_k = static_cast<unsigned long>(m) * static_cast<unsigned long>(n) *\n"
        "                     static_cast<unsigned long>(k);\n"
        '  const auto do_gemm_direct = (m_n_k < static_cast<unsigned long>(db_["XGEMM_MIN_INDIRECT_SIZE"]));\n',
    )
    sha = history.commit("no overflow on 32-bit systems", {"src/xgemm.cpp": widened})
    other = widened.replace('db_["XGEMM_MIN_INDIRECT_SIZE"]))', '2 * db_["XGEMM_MIN_INDIRECT_SIZE"]))')
    changed = history.commit("direct GEMM up to twice the size", {"src/xgemm.cpp": other})

    assert _rows(history, sha) == []
    assert _rows(history, changed) == [("native_threshold", "do_gemm_direct")]


TRAITS_HPP = """\
template<typename T, typename U, typename... Args>
constexpr bool is_any_of() {
    if constexpr (!sizeof...(Args)) {
        return std::is_same_v<T, U>;
    } else {
        return std::is_same_v<T, U> || is_any_of<T, Args...>();
    }
}

template<typename T>
void launch_cast(const T* in, float* out, int n) {
    if constexpr (std::is_same_v<T, half>) {
        cast_half<<<n / 256, 256>>>(in, out, n);
    } else {
        cast_any<<<n / 256, 256>>>(in, out, n);
    }
}
"""


def test_an_if_constexpr_through_a_macro_is_no_row(history: History) -> None:
    history.commit("traits", {"src/traits.hpp": TRAITS_HPP})
    older_toolkit = TRAITS_HPP.replace(
        "    if constexpr (!sizeof...(Args)) {\n"
        "        return std::is_same_v<T, U>;\n"
        "    } else {\n"
        "        return std::is_same_v<T, U> || is_any_of<T, Args...>();\n"
        "    }\n",
        "    AF_IF_CONSTEXPR(!sizeof...(Args)) { return std::is_same_v<T, U>; }\n"
        "    else { return std::is_same_v<T, U> || is_any_of<T, Args...>(); }\n",
    ).replace("if constexpr (std::is_same_v<T, half>) {", "if constexpr ((std::is_same_v<T, half>)) {")
    sha = history.commit("if constexpr for CUDA 10.2", {"src/traits.hpp": older_toolkit})

    assert _rows(history, sha) == []


XORWOW_HPP = """\
__global__ void generate_xorwow(unsigned int* out, const size_t size) {
    size_t index = blockIdx.x * blockDim.x + threadIdx.x;
    while(index < size / 4) {
        out[index] = next4();
        index += gridDim.x * blockDim.x;
    }

    // tail
    if(index == size / 4) {
#if defined(__gfx90a__)
        __builtin_amdgcn_s_waitcnt(0);
#endif
        out[index] = next();
    }
}
"""


def test_an_arch_test_moved_within_its_function_is_no_row(history: History) -> None:
    history.commit("xorwow", {"src/xorwow.hpp": XORWOW_HPP})
    moved = XORWOW_HPP.replace("#if defined(__gfx90a__)\n        __builtin_amdgcn_s_waitcnt(0);\n#endif\n", "").replace(
        "        out[index] = next4();\n",
        "#if defined(__gfx90a__)\n        __builtin_amdgcn_s_waitcnt(0);\n#endif\n        out[index] = next4();\n",
    )
    sha = history.commit("waitcnt in the main loop", {"src/xorwow.hpp": moved})

    assert _rows(history, sha) == []


def test_value_forms_drop_casts_suffixes_and_redundant_parentheses_only() -> None:
    assert value_form("(m * n * k < limit)") == value_form("m*n*k < static_cast<size_t>(limit)")
    assert value_form("mnk < limit", {"mnk": "(size_t)m * n * k"}) == value_form("m * n * k < limit")
    assert value_form("std::is_same_v<T, U> && x") == value_form("std::is_same_v<T, U> && (x)")
    assert value_form("a - (b - c)") != value_form("a - b - c")
    assert value_form("(a + b) * c") != value_form("a + b * c")
    assert value_form("-(a * b)") != value_form("-a * b")
    assert value_form("f((a), (b + c) * d)") == value_form("f(a, (b + c) * d)")
    assert value_form("x < 0.0113f && n > 4u") == value_form("x < 0.0113 && n > 4")
    assert value_form("0x1F") != value_form("0x1")


TRSM_CPP = """\
template <typename T>
void Xtrsm<T>::TrsmColMajor(const size_t m, const size_t n) {
  // Settings
  constexpr auto block_size = size_t{32}; // tuneable

  if ((m == 0) || (n == 0)) { throw BLASError(StatusCode::kInvalidDimension); }
  for (auto i = size_t{0}; i < m; i += block_size) {
    TrsmBlock(i, std::min(block_size, m - i));
  }
}

class Attention {
  static bool check_seqlen_supported(int seqlen) {
    return !(seqlen % 8) && seqlen <= 1024 && seqlen > 128;
  }
};
"""


def test_a_constant_initialised_by_a_typed_brace_and_a_returned_test_are_thresholds(history: History) -> None:
    history.commit("trsm", {"src/xtrsm.cpp": TRSM_CPP})
    smaller = TRSM_CPP.replace("size_t{32}", "size_t{16}").replace("seqlen > 128", "seqlen > 384")
    sha = history.commit("smaller TRSM blocks; unfused attention from 384", {"src/xtrsm.cpp": smaller})
    rewritten = smaller.replace(
        "return !(seqlen % 8) && seqlen <= 1024 && seqlen > 384;",
        "return !(seqlen % 8) && (seqlen <= 1024) && (seqlen > 384);",
    )
    same = history.commit("the same test in parentheses", {"src/xtrsm.cpp": rewritten})

    assert _rows(history, sha) == [("native_threshold", "block_size"), ("native_threshold", "check_seqlen_supported")]
    assert _rows(history, same) == []


CONFIG_TYPES_HPP = """\
enum class target_arch : unsigned int { unknown = 0, gfx900 = 900, gfx906 = 906 };

__device__ constexpr target_arch get_device_arch()
{
#if defined(__gfx900__)
    return target_arch::gfx900;
#elif defined(__gfx906__)
    return target_arch::gfx906;
#else
    return target_arch::unknown;
#endif
}
"""


def test_an_arch_if_that_becomes_an_elif_after_a_new_test_is_a_branch_condition(history: History) -> None:
    history.commit("arch", {"src/config_types.hpp": CONFIG_TYPES_HPP})
    gated = CONFIG_TYPES_HPP.replace(
        "#if defined(__gfx900__)\n",
        "#if !defined(USE_DEVICE_DISPATCH)\n    return target_arch::unknown;\n#elif defined(__gfx900__)\n",
    )
    sha = history.commit("default configs without device dispatch", {"src/config_types.hpp": gated})

    assert _rows(history, sha) == [("branch_condition", "get_device_arch")]


def test_a_number_written_with_a_type_suffix_is_no_row(history: History) -> None:
    history.commit("cut-off", {"include/common.h": "#define MAX_DENSITY_CUTOFF 0.0113\n#define MIN_TILES 4\n"})
    sha = history.commit(
        "float literal", {"include/common.h": "#define MAX_DENSITY_CUTOFF 0.0113f\n#define MIN_TILES 4\n"}
    )
    other = history.commit(
        "more tiles", {"include/common.h": "#define MAX_DENSITY_CUTOFF 0.0113f\n#define MIN_TILES 8u\n"}
    )

    assert _rows(history, sha) == []
    assert _rows(history, other) == [("native_threshold", "MIN_TILES")]


def test_a_constant_table_initialised_by_a_typed_brace_list_is_a_table(history: History) -> None:
    tables = (
        "constexpr auto kBlockSizes = std::array<int, 3>{64, 128, 256};\n"
        "const std::vector<Entry> Database::fallback = std::vector<Entry>{\n  XaxpyApple, XgemvApple\n};\n"
    )
    history.commit("tables", {"src/database.cpp": tables})
    more = tables.replace("128, 256}", "128, 512}").replace("XgemvApple\n", "XgemvApple,\n  TrsvApple\n")
    sha = history.commit("retuned", {"src/database.cpp": more})

    assert _rows(history, sha) == [("native_array", "fallback"), ("native_array", "kBlockSizes")]


SOFTMAX_CUH = """\
#define WARP_SIZE 32
#define MAX_ROWS 1024

template <int pack_size>
void DispatchSoftmax(cudaStream_t stream, const int64_t rows, const int64_t cols, int thread_group_width = 32) {
  if (rows > 1024) {
    SoftmaxBlock<pack_size><<<rows, 128, 0, stream>>>(rows, cols);
  } else {
    SoftmaxWarp<pack_size><<<rows, thread_group_width, 0, stream>>>(rows, cols);
  }
}
"""


def test_a_number_replaced_by_a_macro_holding_it_is_no_row(history: History) -> None:
    history.commit("softmax", {"src/softmax.cuh": SOFTMAX_CUH})
    named = SOFTMAX_CUH.replace("int thread_group_width = 32)", "int thread_group_width = WARP_SIZE)").replace(
        "if (rows > 1024) {", "if (rows > MAX_ROWS) {"
    )
    sha = history.commit("named sizes", {"src/softmax.cuh": named})
    other = history.commit("more rows per warp", {"src/softmax.cuh": named.replace("MAX_ROWS 1024", "MAX_ROWS 2048")})

    assert rules_rows(history.path, sha) == []
    assert last_resort_functions(history.path, sha) == ["DispatchSoftmax"]  # its changed branch test, no more
    assert _rows(history, other) == [("native_threshold", "MAX_ROWS")]


def test_a_number_replaced_by_a_macro_defined_twice_is_a_row(history: History) -> None:
    platform_sizes = SOFTMAX_CUH.replace(
        "#define WARP_SIZE 32\n", "#ifndef USE_ROCM\n#define WARP_SIZE 32\n#else\n#define WARP_SIZE 64\n#endif\n"
    )
    history.commit("softmax", {"src/softmax.cuh": platform_sizes})
    named = platform_sizes.replace("int thread_group_width = 32)", "int thread_group_width = WARP_SIZE)")
    sha = history.commit("a warp's width", {"src/softmax.cuh": named})

    # 64 on ROCm now: a macro defined twice has no one value to read the new text with
    assert rules_rows(history.path, sha) == [("native_threshold", "default of thread_group_width")]


GENERATED_CONFIG_HPP = """\
/* DO NOT EDIT THIS FILE
 * This file is automatically generated by `/scripts/config-tuning/select_best_config.py`.
 */
template<class T>
struct generator_config_selector<RNG_MTGP32, T>
{
    __host__ __device__ static constexpr unsigned int get_blocks(const target_arch arch)
    {
        switch(arch)
        {
            case target_arch::gfx1030: return 512;
            case target_arch::gfx906: return 448;
            default: return generator_config_defaults<RNG_MTGP32, T>::blocks;
        }
    }
};
"""


def test_a_source_a_tuning_run_generated_added_whole_is_tuning_not_new_code(history: History) -> None:
    history.commit("generator", {"src/mtgp32.hpp": '#include "config_defaults.hpp"\n'})
    sha = history.commit(
        "tuned mtgp32 configs",
        {
            "src/config/mtgp32_config.hpp": GENERATED_CONFIG_HPP,
            "src/mtgp32.hpp": '#include "config/mtgp32_config.hpp"\n',
        },
    )
    handwritten = GENERATED_CONFIG_HPP.split("*/\n", 1)[1]
    other = history.commit("a handwritten selector", {"src/config/xorwow_config.hpp": handwritten})

    assert _rows(history, sha) == [("dispatch_logic", "get_blocks")]
    assert _rows(history, other) == []


def test_a_native_benchmark_program_is_not_read(history: History) -> None:
    timing = "int main() {\n  const int n_step = 100;\n  for (int i = 0; i < n_step; ++i) run();\n}\n"
    files = {"src/softmax_benchmark.cpp": timing, "benchmarks/gemm.cu": timing, "src/softmax.cpp": timing}
    history.commit("benchmarks", files)
    sha = history.commit("more steps", {path: timing.replace("100", "150") for path in files})

    assert _rows(history, sha) == [("native_threshold", "n_step")]
    assert {f.file for f in explain(history.path, sha).table_findings} == {"src/softmax.cpp"}


ENQUEUE_CC = """\
static ncclResult_t computeChunk(struct Info* info, size_t nBytes) {
  int chunkSize = info->chunkSize;
  if (info->algorithm == NCCL_ALGO_TREE) {
    while (nBytes / chunkSize < 64 && chunkSize > 65536) chunkSize /= 2;
  } else if (info->algorithm == NCCL_ALGO_COLLNET_DIRECT) {
    while (nBytes / chunkSize < 32 && chunkSize > 131072) chunkSize /= 2;
  }
  info->chunkSize = chunkSize;
  return ncclSuccess;
}
"""


def test_an_else_if_added_to_a_kept_chain_is_a_condition_row(history: History) -> None:
    history.commit("chunks", {"src/enqueue.cc": ENQUEUE_CC})
    ring = ENQUEUE_CC.replace(
        "  } else if (info->algorithm == NCCL_ALGO_COLLNET_DIRECT) {\n",
        "  } else if (info->algorithm == NCCL_ALGO_RING && info->protocol == NCCL_PROTO_SIMPLE) {\n"
        "    while (nBytes / chunkSize < 16 && chunkSize > 65536) chunkSize /= 2;\n"
        "  } else if (info->algorithm == NCCL_ALGO_COLLNET_DIRECT) {\n",
    )
    sha = history.commit("ring simple chunk size tuning", {"src/enqueue.cc": ring})
    fresh = ring.replace(
        "  info->chunkSize = chunkSize;\n",
        "  if (info->pattern == PATTERN_RING) {\n    chunkSize = 1 << 17;\n"
        "  } else if (info->pattern == PATTERN_TREE) {\n    chunkSize = 1 << 16;\n  }\n"
        "  info->chunkSize = chunkSize;\n",
    )
    new_chain = history.commit("a new chain", {"src/enqueue.cc": fresh})

    assert _rows(history, sha) == [("branch_condition", "computeChunk")]
    assert rules_rows(history.path, new_chain) == []
    assert last_resort_functions(history.path, new_chain) == ["computeChunk"]  # its changed branch test, no more


REF_IMPL_CUH = """\
#ifndef CUCO_REF_IMPL_CUH
#define CUCO_REF_IMPL_CUH

template <typename CG>
__device__ void make_copy(CG const& g, int* const memory_to_use) const noexcept
{
#if defined(CUDA_HAS_CUDA_BARRIER)
  copy_with_barrier(g, memory_to_use);
#else
  copy_plain(g, memory_to_use);
#endif
}

#endif
"""


def test_another_feature_macro_tested_by_the_preprocessor_is_a_branch_condition(history: History) -> None:
    history.commit("ref", {"include/ref_impl.cuh": REF_IMPL_CUH})
    fixed = REF_IMPL_CUH.replace("CUDA_HAS_CUDA_BARRIER", "CUCO_HAS_CUDA_BARRIER")
    sha = history.commit("the barrier macro's right name", {"include/ref_impl.cuh": fixed})
    guard = history.commit(
        "guard renamed", {"include/ref_impl.cuh": fixed.replace("CUCO_REF_IMPL_CUH", "CUCO_REF_CUH")}
    )

    assert _rows(history, sha) == [("branch_condition", "make_copy")]
    assert _rows(history, guard) == []
