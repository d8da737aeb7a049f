"""Rows from what C++ declares (native_definitions.py and the modules it calls): numbers passed as template
arguments, config aliases, dtype dispatch macros, launch bounds, class marker traits and member defaults, whole-file
gates and a call moved to a new callee, on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import static_diff


def _rows(history: History, sha: str) -> list[tuple[str, str, str]]:
    return sorted((f.kind.value, f.file, f.name) for f in static_diff(history.path, sha).table_findings)


SORT_CONFIG_HPP = """\
#pragma once
namespace lib {
enum class target_arch : unsigned int { gfx908 = 908, gfx90a = 910 };

template<unsigned int Arch, class Key, class Enable = void>
struct default_sort_config : sort_config<256, 4> {};

template<>
struct default_sort_config<static_cast<unsigned int>(target_arch::gfx908), double>
    : sort_config<256, 8>
{};

template <typename Key, class Probe = double_hashing<2, hash<Key>>>
class multimap {
  public:
    Key* slots;
};
}
"""

GFX90A_SPECIALISATION = """\
template<>
struct default_sort_config<static_cast<unsigned int>(target_arch::gfx90a), double>
    : sort_config<512, 4>
{};

"""


def test_a_specialisation_for_an_arch_and_a_template_default_are_config_rows(history: History) -> None:
    history.commit("configs", {"include/lib/sort_config.hpp": SORT_CONFIG_HPP})
    changed = SORT_CONFIG_HPP.replace("template <typename Key", GFX90A_SPECIALISATION + "template <typename Key")
    changed = changed.replace("double_hashing<2,", "double_hashing<8,")
    sha = history.commit("gfx90a tuning; probe 8 slots at once", {"include/lib/sort_config.hpp": changed})

    assert _rows(history, sha) == [
        ("constant", "include/lib/sort_config.hpp", "default_sort_config"),
        ("constant", "include/lib/sort_config.hpp", "multimap"),
    ]


def test_the_same_numbers_reformatted_or_under_another_type_name_are_no_row(history: History) -> None:
    history.commit("configs", {"include/lib/sort_config.hpp": SORT_CONFIG_HPP})
    changed = SORT_CONFIG_HPP.replace(
        "double>\n    : sort_config<256, 8>\n{};", "double> : sort_config_v2<256U, 8U> {};"
    ).replace("class Probe = double_hashing<2, hash<Key>>>", "class Probe =\n    double_hashing<2, murmur<Key>>>")
    sha = history.commit("rename the config template", {"include/lib/sort_config.hpp": changed})

    assert _rows(history, sha) == []


FLASH_LAUNCH_H = """\
#pragma once

template <typename T>
void run_mha_fwd_hdim192(Flash_fwd_params &params, cudaStream_t stream) {
    BOOL_SWITCH(params.is_causal, Is_causal, [&] {
        run_flash_fwd<Flash_fwd_kernel_traits<192, 128, 128, 64, 8, false, T>, Is_causal>(params, stream);
    });
}

template <class Config, class Key, class Value>
int scan_by_key(Key* keys, Value* values, int size) {
    using config = default_or_custom_config<Config, default_scan_config<TARGET_ARCH, Value>>;
    return scan_impl<config>(keys, values, size);
}

template <typename T>
__global__ void reduce_kernel(const T* in, T* out) {
    using BlockReduce = cub::BlockReduce<T, 128>;
    out[blockIdx.x] = BlockReduce().Sum(in[threadIdx.x]);
}
"""


def test_a_host_functions_kernel_traits_and_config_alias_are_dispatch_rows(history: History) -> None:
    history.commit("launchers", {"csrc/flash_fwd_launch_template.h": FLASH_LAUNCH_H})
    changed = (
        FLASH_LAUNCH_H.replace("192, 128, 128, 64, 8, false", "192, 128, 64, 64, 4, false")
        .replace("default_scan_config<TARGET_ARCH, Value>", "default_scan_by_key_config<TARGET_ARCH, Key, Value>")
        .replace("cub::BlockReduce<T, 128>", "cub::BlockReduce<T, 256>")
    )
    sha = history.commit("64x64 tiles, 4 warps; a scan-by-key config", {"csrc/flash_fwd_launch_template.h": changed})

    # the kernel's own BlockReduce width is its body: no row
    assert _rows(history, sha) == [
        ("dispatch_logic", "csrc/flash_fwd_launch_template.h", "run_mha_fwd_hdim192"),
        ("dispatch_logic", "csrc/flash_fwd_launch_template.h", "scan_by_key"),
    ]


ATTENTION_H = """\
template <typename T, int CTA_H>
struct AttentionUniversal {
    static constexpr int kWarpCount = 4;

    __device__ void reduce(T* out) {
        using Reduce = attention::Reduce<T, CTA_H, 32, kWarpCount>;
        Reduce op;
        op(out);
    }
};
"""


def test_a_config_alias_moved_from_kernel_code_to_its_class_is_no_row(history: History) -> None:
    history.commit("attention", {"src/attention_universal.h": ATTENTION_H})
    changed = ATTENTION_H.replace(
        "    static constexpr int kWarpCount = 4;\n",
        "    static constexpr int kWarpCount = 4;\n\n"
        "    using ReduceOp = attention::Reduce<T, CTA_H, 32, kWarpCount>;\n",
    ).replace(
        "        using Reduce = attention::Reduce<T, CTA_H, 32, kWarpCount>;\n        Reduce op;",
        "        ReduceOp op;",
    )
    sha = history.commit("the reduce op is the class's", {"src/attention_universal.h": changed})

    assert _rows(history, sha) == []


RADIUS_CU = """\
#include <torch/extension.h>

torch::Tensor radius_cuda(torch::Tensor x) {
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND(at::ScalarType::Half, x.scalar_type(), "_", [&] {
    radius_kernel<scalar_t><<<BLOCKS, THREADS, 0, stream>>>(x.data_ptr<scalar_t>());
  });
  return x;
}

torch::Tensor knn_cuda(torch::Tensor x) {
  AT_DISPATCH_FLOATING_TYPES(x.type(), "_", [&] { knn_kernel<scalar_t><<<1, 1>>>(x.data_ptr<scalar_t>()); });
  return x;
}
"""


def test_a_dtype_added_to_a_dispatch_macro_is_a_row_and_the_same_dtypes_are_not(history: History) -> None:
    history.commit("radius", {"csrc/cuda/radius_cuda.cu": RADIUS_CU})
    changed = RADIUS_CU.replace(
        "AT_DISPATCH_FLOATING_TYPES_AND(at::ScalarType::Half, x.scalar_type(), ",
        "AT_DISPATCH_FLOATING_TYPES_AND2(\n      at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), ",
    ).replace("AT_DISPATCH_FLOATING_TYPES(x.type(),", "AT_DISPATCH_FLOATING_TYPES(x.scalar_type(),")
    sha = history.commit("bfloat16 radius", {"csrc/cuda/radius_cuda.cu": changed})

    assert _rows(history, sha) == [("dispatch_logic", "csrc/cuda/radius_cuda.cu", "radius_cuda")]


CONV_CUH = """\
#pragma once

template <typename OutType, typename InType>
__global__ void Conv1D(OutType d_out, InType d_in, int signal_len)
{
    d_out[threadIdx.x] = d_in[threadIdx.x];
}
"""

NEW_KERNEL = """
template <typename T>
__launch_bounds__(256)
__global__ void Conv2D(T d_out, T d_in)
{
    d_out[threadIdx.x] = d_in[threadIdx.x];
}
"""


def test_launch_bounds_put_on_a_kernel_are_a_launch_row_and_a_new_kernels_are_not(history: History) -> None:
    history.commit("conv", {"include/kernels/conv.cuh": CONV_CUH})
    changed = CONV_CUH.replace("__global__ void Conv1D", "__launch_bounds__(1024)\n__global__ void Conv1D")
    sha = history.commit("launch bounds", {"include/kernels/conv.cuh": changed + NEW_KERNEL})

    assert _rows(history, sha) == [("launch_param", "include/kernels/conv.cuh", "Conv1D")]


REDUCE_H = """\
template <typename T> class reduceOpAny {
public:
  using matx_reduce = bool;
  using matx_no_cub_reduce = bool;
  using value_type = bool;
  __host__ __device__ T Init() { return T(0); }
};

class GemmHandle {
public:
  GemmHandle() {}
private:
  void *workspace = nullptr;
  size_t workspaceSize = 1 << 25UL;
  float alpha = 1.0f;
};
"""


def test_a_marker_trait_dropped_and_a_member_size_default_changed_are_rows(history: History) -> None:
    history.commit("reduce", {"include/reduce.h": REDUCE_H})
    changed = (
        REDUCE_H.replace("  using matx_no_cub_reduce = bool;\n", "")
        .replace("using value_type = bool;", "using value_type = T;")
        .replace("1 << 25UL", "1 << 22UL")
        .replace("alpha = 1.0f", "alpha = 0.5f")
    )
    sha = history.commit("any() through CUB; 4 MiB workspace", {"include/reduce.h": changed})

    # value_type is a type alias, not a marker; a float default is a value fed to the kernels
    assert _rows(history, sha) == [
        ("dispatch_logic", "include/reduce.h", "reduceOpAny"),
        ("native_threshold", "include/reduce.h", "GemmHandle::workspaceSize"),
    ]


VISION_CU = """\
#include "vision_embedding.h"

int vision_embedding(const float* in, float* out) {
    return cudnn_conv(in, out);
}
"""

VISION_H = """\
#ifndef VISION_EMBEDDING_H_
#define VISION_EMBEDDING_H_
int vision_embedding(const float* in, float* out);
#endif
"""


def test_a_source_file_put_under_a_macro_is_a_row_but_a_header_is_not(history: History) -> None:
    history.commit("vision", {"src/vision_embedding.cu": VISION_CU, "include/vision_embedding.h": VISION_H})
    gated_cu = "#ifdef ENABLE_CUDNN\n\n" + VISION_CU + "\n#endif\n"
    gated_h = VISION_H.replace("int vision", "#ifdef ENABLE_CUDNN\nint vision").replace(
        ");\n#endif", ");\n#endif\n#endif"
    )
    sha = history.commit("cudnn optional", {"src/vision_embedding.cu": gated_cu, "include/vision_embedding.h": gated_h})

    assert _rows(history, sha) == [("branch_condition", "src/vision_embedding.cu", "#ifdef ENABLE_CUDNN")]


ARGMAX_H = """\
template <typename OutType, typename IndexType, typename InType>
void argmax_impl(OutType dest, IndexType &idest, const InType &in, cudaExecutor exec)
{
  cudaStream_t stream = exec.getStream();
  reduce(dest, idest, in, detail::reduceOpMax<float>(), stream, true);
}

template <typename OutType, typename InType>
void max_impl(OutType dest, const InType &in, cudaExecutor exec)
{
  cudaStream_t stream = exec.getStream();
  reduce(dest, in, detail::reduceOpMax<float>(), stream, true);
}
"""


def test_work_handed_to_a_new_callee_is_a_row_and_a_callee_renamed_everywhere_is_not(history: History) -> None:
    history.commit("reductions", {"include/reduce.h": ARGMAX_H})
    moved = ARGMAX_H.replace(
        "reduce(dest, idest, in, detail::reduceOpMax<float>(), stream, true);", "cub_argmax(dest, idest, in, stream);"
    )
    sha = history.commit("argmax through CUB", {"include/reduce.h": moved})
    renamed = moved.replace("reduce(dest, in,", "reduce_all(dest, in,")
    rename = history.commit("reduce is reduce_all", {"include/reduce.h": renamed})

    assert _rows(history, sha) == [("dispatch_logic", "include/reduce.h", "argmax_impl")]
    assert _rows(history, rename) == []


GROUPED_CU = """\
void grouped_matmul_out_kernel(const std::vector<at::Tensor>& input) {
  using GemmKernel = typename cutlass::gemm::kernel::DefaultGemmGrouped<
      float, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone,
      4,                                             // Granularity A
      float, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone,
      4,                                             // Granularity B
      cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<256, 128, 32>,        // Threadblock-level Tile
      cutlass::gemm::GemmShape<64, 64, 32>,          // Warp-level Tile
      cutlass::gemm::GemmShape<16, 8, 8>,            // Instruction
      3>::GemmKernel;
  run_grouped<GemmKernel>(input);
}

struct GatherRS_Space {
  static constexpr auto AllHParams = make_space_gemm_hparams(
      cute::make_tuple(
          make_gather_rs_hparams(cute::Int<28>{}, cute::Int<8192>{}),
          make_gather_rs_hparams(cute::Int<28>{}, cute::Int<6144>{}),
          make_gather_rs_hparams(cute::Int<28>{}, cute::Int<4096>{})));
};
"""


def test_cutlass_arguments_of_a_host_alias_are_a_row_and_an_instance_lists_statement_is_its_own(
    history: History,
) -> None:
    history.commit("grouped", {"csrc/matmul_kernel.cu": GROUPED_CU})
    changed = GROUPED_CU.replace("4,      ", "1,      ").replace(
        "          make_gather_rs_hparams(cute::Int<28>{}, cute::Int<8192>{}),\n",
        "          make_gather_rs_hparams(cute::Int<26>{}, cute::Int<8192>{}),\n"
        "          make_gather_rs_hparams(cute::Int<28>{}, cute::Int<8192>{}),\n",
    )
    sha = history.commit("granularity 1; gather ctas 26", {"csrc/matmul_kernel.cu": changed})

    # the GemmShape lines are one template's arguments, not an instance list; the hparams are (native_instances.py)
    assert _rows(history, sha) == [
        ("dispatch_logic", "csrc/matmul_kernel.cu", "grouped_matmul_out_kernel"),
        ("native_array", "csrc/matmul_kernel.cu", "make_gather_rs_hparams"),
    ]
