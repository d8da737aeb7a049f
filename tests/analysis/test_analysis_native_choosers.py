"""C / C++ / CUDA dispatch functions told by their bodies (native_choosers.py): choosers that return a choice and
launchers with several kernel sites, on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, explain


def units(history: History, sha: str) -> list[tuple[str, str]]:
    return sorted((f.kind.value, f.name) for f in explain(history.path, sha).table_findings)


CHOOSER_CU = """\
static bool should_use_mmq(int type, int cc, long ne11, long n_experts) {
    if (type == TYPE_F16) {
        return false;
    }
    if (turing_mma_available(cc)) {
        return true;
    }
    return ne11 < MMQ_DP4A_MAX_BATCH_SIZE;
}

static constexpr __host__ __device__ int calc_nwarps(int type, int ncols) {
    switch (type) {
        case TYPE_Q4_K:
        case TYPE_Q6_K:
            return 8;
        default:
            return 4;
    }
}
"""


def test_a_new_test_in_a_chooser_and_a_new_case_return_are_dispatch_rows(history: History) -> None:
    history.commit("mmq", {"src/mmq.cu": CHOOSER_CU})
    changed = CHOOSER_CU.replace(
        "    return ne11 < MMQ_DP4A_MAX_BATCH_SIZE;",
        "    if (cc == CC_VEGA) {\n        return n_experts > 0;\n    }\n    return ne11 < MMQ_DP4A_MAX_BATCH_SIZE;",
    ).replace("        case TYPE_Q6_K:\n", "            return 8;\n        case TYPE_Q6_K:\n            return 2;\n")
    sha = history.commit("Vega: MMQ only for MoE; Q6_K on two warps", {"src/mmq.cu": changed})

    # the new arch test alone was new code (no row); both functions return a choice
    assert units(history, sha) == [("dispatch_logic", "calc_nwarps"), ("dispatch_logic", "should_use_mmq")]
    row = next(f for f in explain(history.path, sha).table_findings if f.name == "should_use_mmq")
    assert (row.before, row.after) == (None, "if (cc == CC_VEGA) {")


LAUNCHER_CU = """\
void flash_attn_ext(Context & ctx, Tensor * dst) {
    const int cc = device_cc(ctx);
    if (Q->ne[1] <= 8) {
        flash_attn_ext_vec_f16(ctx, dst);
    } else {
        flash_attn_ext_tile_f16(ctx, dst);
    }
}

void workspace_setup(Params & params, bool deterministic) {
    if (deterministic) {
        params.workspace_ptr = alloc_workspace(params);
    }
    conv_fwd_cuda<float>(params, stream);
    conv_fwd_channellast_cuda<float>(params, stream);
}
"""


def test_a_launcher_branch_that_picks_another_kernel_is_a_dispatch_row(history: History) -> None:
    history.commit("fattn", {"src/fattn.cu": LAUNCHER_CU})
    changed = LAUNCHER_CU.replace(
        "        flash_attn_ext_vec_f16(ctx, dst);\n",
        "        if (cc == CC_PASCAL && Q->ne[1] <= 8) {\n            flash_attn_ext_vec_f32(ctx, dst);\n"
        "        } else {\n            flash_attn_ext_vec_f16(ctx, dst);\n        }\n",
    ).replace("    if (deterministic) {", "    if (deterministic && !params.inplace) {")
    sha = history.commit("Pascal decode on the f32 vec kernel; no workspace in place", {"src/fattn.cu": changed})

    # the Pascal test guards a kernel site; the workspace test guards none (params is passed whole), so it stays
    # what it was before (no row: a test of a flag)
    assert units(history, sha) == [("dispatch_logic", "flash_attn_ext")]


STATUS_CU = """\
cublasStatus_t check_gemm(int m, int n, int kind) {
    if (m == 0 || n == 0) {
        return CUBLAS_STATUS_SUCCESS;
    }
    if (kind == 2) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return run_checks(m, n);
}

__global__ void scale_kernel(float * x, int n) {
    if (threadIdx.x >= 32) {
        return;
    }
    x[threadIdx.x] *= n > 64 ? 2.0f : 1.0f;
}
"""


def test_status_returns_and_kernels_are_no_dispatch_functions(history: History) -> None:
    history.commit("copy", {"src/copy.cu": STATUS_CU})
    changed = STATUS_CU.replace("if (kind == 2)", "if (kind == 3)").replace("threadIdx.x >= 32", "threadIdx.x >= 64")
    sha = history.commit("another kind refused; a wider kernel", {"src/copy.cu": changed})

    assert [u for u in units(history, sha) if u[0] == FindingKind.DISPATCH_LOGIC.value] == []


COST_CC = """\
static double sm_bandwidth(Comm * comm, bool ldmc) {
  if (100 <= comm->minCompCap) {
    return ldmc ? 8.44e9 : 26.6e9;
  } else {
    return ldmc ? 9.85e9 : 14.5e9;
  }
}
"""


def test_a_cost_model_returning_literal_arms_is_a_chooser(history: History) -> None:
    history.commit("cost", {"src/sym_kernels.cc": COST_CC})
    sha = history.commit(
        "Hopper bandwidth", {"src/sym_kernels.cc": COST_CC.replace("9.85e9 : 14.5e9", "4.22e9 : 13.7e9")}
    )

    # each arm of `ldmc ? a : b` is a choice returned: the changed return is a decision of a chooser
    assert units(history, sha) == [("dispatch_logic", "sm_bandwidth")]


REDUCE_CU = """\
void op_reduce(Context & ctx, Tensor * dst) {
    if (dst->ne[1] >= 32) {
        ring_reduce<<<nblocks, 256, 0, stream>>>(dst);
        return;
    }
    tree_reduce<<<nblocks, 128, 0, stream>>>(dst);
}

static bool graph_compatible(Graph * graph) {
    bool use_graphs = true;
    for (int i = 0; i < graph->n_nodes; i++) {
        if (graph->nodes[i]->op == OP_ADD &&
            graph->nodes[i]->broadcast) {
            use_graphs = false;
        }
    }
    return use_graphs;
}
"""


def test_a_branch_switched_off_in_a_launcher_is_a_dispatch_decision(history: History) -> None:
    history.commit("reduce", {"src/reduce.cu": REDUCE_CU})
    changed = REDUCE_CU.replace("if (dst->ne[1] >= 32)", "if (false && dst->ne[1] >= 32)").replace(
        "if (graph->nodes[i]->op == OP_ADD &&", "if (false && graph->nodes[i]->op == OP_ADD &&"
    )
    sha = history.commit("no ring reduction; graphs with broadcast adds", {"src/reduce.cu": changed})

    found = explain(history.path, sha).table_findings
    # op_reduce launches two kernels (two names before <<<): its switched-off branch is a decision of a launcher
    assert sorted((f.kind.value, f.name, f.key) for f in found) == [
        ("dispatch_logic", "op_reduce", "condition choosing the kernel"),
    ]


FATTN_CU = """\
void fattn_ext(Context & ctx, Tensor * dst) {
    if (Q->ne[0] == 128 &&
        (Q->ne[2] / K->ne[2] == 12 || Q->ne[2] / K->ne[2] == 6)) {
        fattn_ext_mma_new(ctx, dst);
        return;
    }
    fattn_ext_mma_f16(ctx, dst);
}

Backend * backend_init(int device, Params params) {
    Context * ctx = new_context(device);
    if (params.batch_per_byte >= 1024) {
        GGML_CUDA_LOG_INFO("setting batch_per_byte");
        ctx->batch_per_byte = params.batch_per_byte;
    }
    GGML_CUDA_LOG_WARN("init");
    GGML_CUDA_LOG_ERROR("done");
    return make_backend(ctx);
}
"""


def test_a_changed_condition_line_continues_its_if_and_logging_calls_are_no_kernel_sites(history: History) -> None:
    history.commit("fattn", {"src/fattn.cu": FATTN_CU})
    changed = FATTN_CU.replace("== 6)) {", "== 6 || Q->ne[2] / K->ne[2] == 10)) {").replace(">= 1024", ">= 2048")
    sha = history.commit("gqa ratio 10 on the new kernel; per-byte batches", {"src/fattn.cu": changed})

    # the continuation line belongs to the if that picks fattn_ext_mma_new; backend_init's logging macros share a
    # stem but launch nothing, so its changed threshold stays a threshold
    assert units(history, sha) == [("dispatch_logic", "fattn_ext"), ("native_threshold", "backend_init")]
