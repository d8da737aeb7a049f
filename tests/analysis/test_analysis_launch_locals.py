"""A host function's locals that configure a launch are launch parameters of the function, and locals that keep
their value in their function are no change whatever their number in the file (native_launch_locals.py), on real
git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, explain

LAYERNORM_CU = """\
void layernorm_forward(float* out, const float* inp, int N, int C, cudaStream_t stream) {
    const int block_size = 512;
    const int grid_size = CEIL_DIV(N * 32, block_size);
    layernorm_forward_kernel3<<<grid_size, block_size, 0, stream>>>(out, inp, N, C);
}

void residual_forward(float* out, const float* inp, int N, cudaStream_t stream) {
    const int block_size = 256;
    const int grid_size = CEIL_DIV(N, block_size);
    residual_forward_kernel<<<grid_size, block_size, 0, stream>>>(out, inp, N);
}

void mlp_forward(float* out, const float* inp, int batch, cudaStream_t stream) {
    const uint32_t BLOCK_DIM_Z = 2;
    const uint32_t n_rows = 4;
    dim3 threads = { 32u, n_rows, BLOCK_DIM_Z };
    mlp_kernel<<<batch / 16, threads, 0, stream>>>(out, inp);
}

void scale(float* out, int N) {
    const int factor = 3;
    scale_kernel<<<N, 128>>>(out, factor);
}
"""


def test_locals_of_a_launch_configuration_are_launch_parameters_of_their_function(history: History) -> None:
    history.commit("layernorm", {"src/layernorm.cu": LAYERNORM_CU})
    changed = (
        LAYERNORM_CU.replace("const int block_size = 512;", "const int block_size = 256;")
        .replace("BLOCK_DIM_Z = 2;", "BLOCK_DIM_Z = 1;")
        .replace("factor = 3;", "factor = 4;")
    )
    sha = history.commit("smaller blocks", {"src/layernorm.cu": changed})

    rows = sorted((f.kind, f.name, f.key) for f in explain(history.path, sha).table_findings)

    # factor is the kernel's data, not its configuration: a constant of its own
    assert rows == [
        (FindingKind.LAUNCH_PARAM, "layernorm_forward", "block_size in a launch configuration"),
        (FindingKind.LAUNCH_PARAM, "mlp_forward", "BLOCK_DIM_Z in a launch configuration"),
        (FindingKind.NATIVE_THRESHOLD, "factor", ""),
    ]


def test_a_local_renumbered_by_one_added_above_is_no_change(history: History) -> None:
    history.commit("layernorm", {"src/layernorm.cu": LAYERNORM_CU})
    added = """\
void copy(float* out, const float* inp, int N) {
    const int grid_size = CEIL_DIV(N, 64);
    copy_kernel<<<grid_size, 64>>>(out, inp, N);
}

"""
    sha = history.commit("a copy", {"src/layernorm.cu": added + LAYERNORM_CU})

    names = {f.name for f in explain(history.path, sha).table_findings}

    # layernorm_forward's and residual_forward's grid_size are grid_size and grid_size#2 before, grid_size#2 and
    # grid_size#3 after, with the same values: no rows
    assert not names & {"layernorm_forward", "residual_forward", "grid_size", "grid_size#2", "grid_size#3"}


def test_a_launch_passing_other_data_with_the_same_configuration_is_no_row(history: History) -> None:
    history.commit("layernorm", {"src/layernorm.cu": LAYERNORM_CU})
    changed = LAYERNORM_CU.replace(
        "residual_forward_kernel<<<grid_size, block_size, 0, stream>>>(out, inp, N);",
        "residual_forward_kernel<<<grid_size, block_size, 0, stream>>>(out, inp, (int64_t)N);",
    ).replace("scale_kernel<<<N, 128>>>(out, factor);", "scale_kernel<<<N, 256>>>(out, factor);")
    sha = history.commit("64-bit sizes; wider scale blocks", {"src/layernorm.cu": changed})

    rows = [(f.kind, f.name) for f in explain(history.path, sha).table_findings]

    assert rows == [(FindingKind.LAUNCH_PARAM, "scale")]


MATMUL_CC = """\
MaceStatus MatMulFunctor::operator()(const Tensor *A, const Tensor *B, Tensor *C) {
  const uint32_t gws[2] = {static_cast<uint32_t>(height_blocks), static_cast<uint32_t>(batch)};
  kernel_.setArg(idx++, static_cast<int>(height_blocks));
  const std::vector<uint32_t> lws = {kwg_size_ / 64, 64, 1};
  std::string tuning_key = Concat("matmul_opencl_kernel", batch, height, width);
  return TuningOrRun2DKernel(kernel_, tuning_key, gws, lws, future);
}
"""


def test_an_opencl_work_size_is_a_launch_parameter_by_its_name(history: History) -> None:
    """OpenCL code passes lws / gws to a project's own tuning or enqueue helper, not to a `<<<...>>>`."""
    history.commit("matmul", {"mace/kernels/opencl/matmul.cc": MATMUL_CC})
    sha = history.commit("default lws", {"mace/kernels/opencl/matmul.cc": MATMUL_CC.replace("64, 1};", "64, 0};")})

    rows = [(f.kind, f.name, f.key) for f in explain(history.path, sha).table_findings]

    assert rows == [(FindingKind.LAUNCH_PARAM, "MatMulFunctor::operator()", "lws in a launch configuration")]
