"""Native tests of the device on real git histories: a host function's test of the device it runs on, by
its vendor or model id or a feature query (`if (props.vendorID == 0x5143)`, `if (!info.support_bf16_storage())`),
picks the code path like an arch test; and names renamed in a swap or a chain (`_X -> X` while `X -> X_`) leave
the values that read them unchanged."""

from __future__ import annotations

from analysis_history import History, last_resort_functions, rules_rows

from bisector.analysis import explain


def _rows(history: History, sha: str) -> list[tuple[str, str]]:
    return sorted({(f.kind.value, f.name) for f in explain(history.path, sha).table_findings})


GPU_CPP = """\
#include "gpu.h"

void GpuInfoPrivate::query_extension_features()
{
    queryCooperativeMatrixFeatures.cooperativeMatrix = VK_TRUE;
    queryInt8Features.shaderInt8 = VK_TRUE;
    init_limits();
}

int Net::load_param(const DataReader& dr)
{
    Option opt = d->opt;
    if (!d->vkdev->info.support_int8_storage()) opt.use_int8_storage = false;
    if (!d->vkdev->info.support_subgroup_ops()) opt.use_subgroup_ops = false;
    return load_layers(dr, opt);
}
"""


def test_a_new_test_of_the_devices_vendor_is_a_branch_condition(history: History) -> None:
    history.commit("gpu", {"src/gpu.cpp": GPU_CPP})
    blacklisted = GPU_CPP.replace(
        "    init_limits();\n",
        "    init_limits();\n\n    if (physicalDeviceProperties.vendorID == 0x5143)\n    {\n"
        "        queryCooperativeMatrixFeatures.cooperativeMatrix = VK_FALSE;\n    }\n",
    )
    sha = history.commit("no cooperative matrix on adreno", {"src/gpu.cpp": blacklisted})

    assert _rows(history, sha) == [("branch_condition", "GpuInfoPrivate::query_extension_features")]


def test_a_new_query_of_a_device_feature_is_a_branch_condition(history: History) -> None:
    history.commit("gpu", {"src/gpu.cpp": GPU_CPP})
    sanitized = GPU_CPP.replace(
        "opt.use_int8_storage = false;\n",
        "opt.use_int8_storage = false;\n"
        "    if (!d->vkdev->info.support_bf16_storage()) opt.use_bf16_storage = false;\n",
    )
    sha = history.commit("sanitize bf16 options on loading", {"src/gpu.cpp": sanitized})

    assert _rows(history, sha) == [("branch_condition", "Net::load_param")]


def test_a_device_index_compared_with_zero_is_no_device_test(history: History) -> None:
    history.commit("gpu", {"src/gpu.cpp": GPU_CPP})
    logged = GPU_CPP.replace(
        "    Option opt = d->opt;\n", "    Option opt = d->opt;\n    if (device_id == 0) log_model(dr);\n"
    )
    sha = history.commit("log the model once", {"src/gpu.cpp": logged})

    assert rules_rows(history.path, sha) == []
    assert last_resort_functions(history.path, sha) == ["Net::load_param"]  # its changed branch test, no more


CG_HPP = """\
template <typename MemberType>
KOKKOS_INLINE_FUNCTION int TeamCG<MemberType>::invoke(const MemberType& member, const VectorViewType& _B,
                                                      const VectorViewType& _X, const TMPViewType& _TMPView) {
  const int numMatrices = _X.extent(0);
  const int numRows     = _X.extent(1);

  auto R = Kokkos::subview(_TMPView, Kokkos::ALL, Kokkos::make_pair(0, numRows));
  auto X = Kokkos::subview(_TMPView, Kokkos::ALL, Kokkos::make_pair(numRows, 2 * numRows));

  TeamCopy<MemberType>::invoke(member, _X, X);
  TeamCopy<MemberType>::invoke(member, _B, R);
  solve(member, X, R, numMatrices);
  TeamCopy<MemberType>::invoke(member, X, _X);
  return 0;
}
"""


def test_names_renamed_in_a_swap_leave_the_values_that_read_them(history: History) -> None:
    history.commit("cg", {"batched/KokkosBatched_CG_Team_Impl.hpp": CG_HPP})
    renamed = """\
template <typename MemberType>
KOKKOS_INLINE_FUNCTION int TeamCG<MemberType>::invoke(const MemberType& member, const VectorViewType& B,
                                                      const VectorViewType& X, const TMPViewType& TMPView) {
  const int numMatrices = X.extent(0);
  const int numRows     = X.extent(1);

  auto R  = Kokkos::subview(TMPView, Kokkos::ALL, Kokkos::make_pair(0, numRows));
  auto X_ = Kokkos::subview(TMPView, Kokkos::ALL, Kokkos::make_pair(numRows, 2 * numRows));

  TeamCopy<MemberType>::invoke(member, X, X_);
  TeamCopy<MemberType>::invoke(member, B, R);
  solve(member, X_, R, numMatrices);
  TeamCopy<MemberType>::invoke(member, X_, X);
  return 0;
}
"""
    sha = history.commit("rename reserved identifiers", {"batched/KokkosBatched_CG_Team_Impl.hpp": renamed})

    assert _rows(history, sha) == []


def test_a_name_that_takes_another_ones_place_is_a_changed_value(history: History) -> None:
    history.commit("cg", {"batched/KokkosBatched_CG_Team_Impl.hpp": CG_HPP})
    swapped = CG_HPP.replace("numMatrices = _X.extent(0)", "numMatrices = _B.extent(0)")
    sha = history.commit("batch count from B", {"batched/KokkosBatched_CG_Team_Impl.hpp": swapped})

    assert ("native_threshold", "numMatrices") in _rows(history, sha)


MHA_CPP = """\
std::tuple<at::Tensor, at::Tensor> first_token_masked_mha(at::Tensor query, at::Tensor key, at::Tensor mask) {
  auto attn_outputs = at::Tensor();
  if ((key.scalar_type() == at::kFloat || key.scalar_type() == at::kBFloat16 ||
       key.scalar_type() == at::kHalf) &&
      mask.stride(-1) == 1) {
    attn_outputs = flash_attention(query, key, mask);
  } else {
    attn_outputs = reference_mha(query, key, mask);
  }
  return {attn_outputs, at::Tensor()};
}
"""


def test_a_device_feature_query_on_a_continued_line_is_a_branch_condition(history: History) -> None:
    history.commit("mha", {"csrc/cpu/MaskedMultiHeadAttentionKrnl.cpp": MHA_CPP})
    fallback = MHA_CPP.replace(
        "       key.scalar_type() == at::kHalf) &&\n",
        "       (key.scalar_type() == at::kHalf && utils::isa_has_avx512_fp16_support())) &&\n",
    )
    sha = history.commit(
        "fp16 falls back to the reference without avx512-fp16", {"csrc/cpu/MaskedMultiHeadAttentionKrnl.cpp": fallback}
    )

    assert _rows(history, sha) == [("branch_condition", "first_token_masked_mha")]


GROUPED_CONV_HPP = """\
template <typename GridwiseGemm, typename ComputePtrOffsetOfG>
__global__ void
#if CK_USE_LAUNCH_BOUNDS
    __launch_bounds__(CK_MAX_THREAD_PER_BLOCK, CK_MIN_BLOCK_PER_CU)
#endif
        kernel_grouped_conv_fwd(const ADataType* p_a_grid, EDataType* p_e_grid, const index_t num_blocks_per_batch,
                                const ComputePtrOffsetOfG compute_ptr_offset_of_groups)
{
    const index_t g_idx = __builtin_amdgcn_readfirstlane(blockIdx.y / num_blocks_per_batch);
    const long_index_t e_offset = compute_ptr_offset_of_groups.GetEPtrOffset(g_idx);
    GridwiseGemm::Run(p_a_grid, p_e_grid + e_offset);
}

struct DeviceGroupedConvFwd
{
    struct Invoker : public BaseInvoker
    {
        float Run(const Argument& arg, const StreamConfig& stream_config = StreamConfig{})
        {
            const index_t gdx = arg.block_2_etile_map_.CalculateGridSize(arg.e_grid_desc_m_n_);
            const index_t gdy = arg.num_group_;
            const index_t gdz = 1;
            return launch_and_time_kernel(stream_config,
                                          kernel_grouped_conv_fwd<GridwiseGemm, ComputePtrOffsetOfG>,
                                          dim3(gdx, gdy, gdz),
                                          dim3(BlockSize),
                                          0,
                                          arg.p_a_grid_,
                                          arg.p_e_grid_,
                                          arg.num_blocks_per_batch_,
                                          arg.compute_ptr_offset_of_groups_);
        }
    };
};
"""


def test_a_grid_dimension_a_launch_helper_reads_in_a_dim3_is_a_launch_parameter(history: History) -> None:
    history.commit("grouped conv", {"include/device_grouped_conv_fwd.hpp": GROUPED_CONV_HPP})
    split = GROUPED_CONV_HPP.replace(
        "const index_t gdz = 1;", "const index_t gdz = arg.a_g_n_c_wis_lengths_[I1] / arg.conv_N_per_block_;"
    )
    sha = history.commit("split the batch over the grid's z", {"include/device_grouped_conv_fwd.hpp": split})

    assert _rows(history, sha) == [("launch_param", "Run")]


def test_a_kernels_block_index_read_another_way_is_its_body(history: History) -> None:
    history.commit("grouped conv", {"include/device_grouped_conv_fwd.hpp": GROUPED_CONV_HPP})
    indexed = GROUPED_CONV_HPP.replace("(blockIdx.y / num_blocks_per_batch)", "(blockIdx.y)")
    sha = history.commit("one group per grid row", {"include/device_grouped_conv_fwd.hpp": indexed})

    assert _rows(history, sha) == []


DOT_AVAIL_HPP = """\
#ifndef KOKKOSBLAS1_DOT_TPL_SPEC_AVAIL_HPP_
#define KOKKOSBLAS1_DOT_TPL_SPEC_AVAIL_HPP_

#ifdef KOKKOSKERNELS_ENABLE_TPL_CUBLAS
KOKKOSBLAS1_DOT_TPL_SPEC_AVAIL(Kokkos::LayoutLeft, Kokkos::Cuda, Kokkos::CudaSpace)
#endif

#ifdef KOKKOSKERNELS_ENABLE_TPL_ROCBLAS
KOKKOSBLAS1_DOT_TPL_SPEC_AVAIL(Kokkos::LayoutLeft, Kokkos::HIP, Kokkos::HIPSpace)
#endif

#endif
"""


def test_code_switched_off_by_an_if_0_is_a_branch_condition(history: History) -> None:
    history.commit("dot tpl", {"blas/tpls/KokkosBlas1_dot_tpl_spec_avail.hpp": DOT_AVAIL_HPP})
    disabled = DOT_AVAIL_HPP.replace(
        "#ifdef KOKKOSKERNELS_ENABLE_TPL_CUBLAS\nKOKKOSBLAS1_DOT_TPL_SPEC_AVAIL(Kokkos::LayoutLeft, Kokkos::Cuda, "
        "Kokkos::CudaSpace)\n#endif\n",
        "#ifdef KOKKOSKERNELS_ENABLE_TPL_CUBLAS\n// cuBLAS dot is slower than the native one\n#if 0\n"
        "KOKKOSBLAS1_DOT_TPL_SPEC_AVAIL(Kokkos::LayoutLeft, Kokkos::Cuda, Kokkos::CudaSpace)\n#endif\n#endif\n",
    )
    sha = history.commit("disable the cuBLAS dot wrapper", {"blas/tpls/KokkosBlas1_dot_tpl_spec_avail.hpp": disabled})

    assert _rows(history, sha) == [("branch_condition", "code switched off")]


INSTANCENORM_CPP = """\
int InstanceNorm_vulkan::create_pipeline(const Option& opt)
{
    pipeline_reduce_sum4 = new Pipeline(vkdev);
    pipeline_reduce_sum4->set_optimal_local_size_xyz(64, 1, channels);
    pipeline_reduce_sum4->create(LayerShaderType::instancenorm_reduce_sum4, opt, specializations);
    return 0;
}
"""


def test_a_compute_pipelines_work_group_size_is_a_launch_parameter(history: History) -> None:
    history.commit("instancenorm", {"src/layer/vulkan/instancenorm_vulkan.cpp": INSTANCENORM_CPP})
    smaller = INSTANCENORM_CPP.replace("set_optimal_local_size_xyz(64,", "set_optimal_local_size_xyz(16,")
    sha = history.commit("radv crash with a large local size", {"src/layer/vulkan/instancenorm_vulkan.cpp": smaller})

    assert _rows(history, sha) == [("launch_param", "InstanceNorm_vulkan::create_pipeline")]
