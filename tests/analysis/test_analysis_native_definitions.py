"""Numbers passed as C++ template arguments and config aliases (native_template_args.py), on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import explain


def _rows(history: History, sha: str) -> list[tuple[str, str, str]]:
    return sorted((f.kind.value, f.file, f.name) for f in explain(history.path, sha).table_findings)


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
