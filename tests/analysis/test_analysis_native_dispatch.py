"""Native switch macros, defaults, env reads and arch checks; Python defaults, config calls, backend choices and
module flags, on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import Finding, FindingKind, explain


def rows(findings: tuple[Finding, ...], kind: FindingKind) -> list[tuple[str, str | None, str | None]]:
    return [(f.label, f.before, f.after) for f in findings if f.kind is kind]


LAUNCH_CU = """\
void conv_bwd_launch(Params &params, cudaStream_t stream) {
    BOOL_SWITCH(params.seqlen <= 128, kShort, [&] {
        auto kernel = &conv_bwd_kernel<kShort>;
        kernel<<<params.batch, 128, 0, stream>>>(params);
    });
}

void conv_bwd(Params &params,
              int max_par = 8
) {
    const int n_chunks = (params.seqlen + 63) / 64;
    conv_bwd_launch(params, stream);
}
"""


def test_a_switch_macro_a_parameter_default_and_an_env_read_in_cuda_are_rows(history: History) -> None:
    history.commit("bwd", {"csrc/conv_bwd.cu": LAUNCH_CU})
    changed = (
        LAUNCH_CU.replace("params.seqlen <= 128, kShort", "params.seqlen <= 256, kShort")
        .replace("int max_par = 8", "int max_par = 16")
        .replace(
            "    conv_bwd_launch(params, stream);",
            '    const char* env = std::getenv("CONV_DETERMINISTIC");\n'
            "    const int n_chunks_new = (params.seqlen + 127) / 128;\n"
            "    conv_bwd_launch(params, stream);",
        )
    )
    sha = history.commit("longer short path, more parallel, deterministic switch", {"csrc/conv_bwd.cu": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.NATIVE_THRESHOLD) == [
        (
            "conv_bwd_launch condition of BOOL_SWITCH",
            "BOOL_SWITCH(params.seqlen <= 128, kShort, [&] {",
            "BOOL_SWITCH(params.seqlen <= 256, kShort, [&] {",
        ),
        ("default of max_par", "8", "16"),
    ]  # n_chunks_new, a new local computed from other names, is no row
    assert rows(found, FindingKind.ENV_GATE) == [
        ("CONV_DETERMINISTIC read", None, 'const char* env = std::getenv("CONV_DETERMINISTIC");')
    ]


def test_a_signature_reflowed_or_a_parameter_added_with_a_default_and_an_alias_are_no_default_rows(
    history: History,
) -> None:
    source = (
        "using policy_t = detail::reduce::policy;\n"
        "void launch(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = nullptr) const {\n"
        "}\n"
    )
    history.commit("launcher", {"csrc/launch.cuh": source})
    changed = (
        "using policy_t = detail::topk::policy;\n"
        "void launch(dim3 grid,\n"
        "            dim3 block,\n"
        "            size_t smem = 0,\n"
        "            cudaStream_t stream = nullptr,\n"
        "            bool dependent_launch = false) const {\n"
        "}\n"
    )
    sha = history.commit("reflow, dependent launch", {"csrc/launch.cuh": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.NATIVE_THRESHOLD) == []


def test_an_arch_check_kept_in_a_bool_and_a_refusing_check_are_arch_conditions(history: History) -> None:
    source = (
        "void mha_fwd() {\n"
        "    auto dprops = at::cuda::getCurrentDeviceProperties();\n"
        "    bool is_sm120 = dprops->major == 12 && dprops->minor == 0;\n"
        '    TORCH_CHECK(is_sm120, "only supports Blackwell GPUs.");\n'
        "}\n"
    )
    history.commit("api", {"csrc/api.cu": source})
    changed = source.replace(
        '    TORCH_CHECK(is_sm120, "',
        '    bool is_sm121 = dprops->major == 12 && dprops->minor == 1;\n    TORCH_CHECK(is_sm120 || is_sm121, "',
    )
    sha = history.commit("sm121 too", {"csrc/api.cu": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.BRANCH_CONDITION) == [
        ("mha_fwd condition on the arch", 'TORCH_CHECK(is_sm120, "only supports Blackwell GPUs.");',
         "bool is_sm121 = dprops->major == 12 && dprops->minor == 1;"),
        ("mha_fwd condition on the arch", None, 'TORCH_CHECK(is_sm120 || is_sm121, "only supports Blackwell GPUs.");'),
    ]  # fmt: skip


def test_a_local_number_constant_is_a_row_and_a_struct_member_added_is_one_too(history: History) -> None:
    source = "struct Policy {\n    static constexpr int kTile = 64;\n};\n\nvoid run() {\n    int x = 0;\n}\n"
    history.commit("policy", {"csrc/policy.cuh": source})
    local = "    constexpr int kNumWeights = 48;\n    const int rows = (x + kNumWeights - 1) / kNumWeights;"
    changed = source.replace("kTile = 64;", "kTile = 64;\n    static constexpr int kStages = 3;")
    changed = changed.replace("    int x = 0;", local)
    sha = history.commit("stages", {"csrc/policy.cuh": changed})

    found = explain(history.path, sha).findings

    assert sorted(rows(found, FindingKind.NATIVE_THRESHOLD)) == [
        ("Policy::kStages", None, "3"),
        ("kNumWeights", None, "48"),
    ]


WRAPPER = """\
import os


def mul(a, b, workspace, thread_k=-1, max_par=8, *, mode="fast"):
    return _kernel(a, b, workspace, thread_k, max_par, mode)


def make_configs(blocks, warps):
    return [triton.Config({"BLOCK": b}, num_warps=w) for b in blocks for w in warps]


CONFIGS = make_configs([128, 256], [4, 8])


@triton.autotune(CONFIGS, key=["n"])
@triton.jit
def dequant_kernel(x, n, BLOCK: tl.constexpr):
    pass
"""


def test_python_parameter_defaults_and_a_config_call_of_literal_lists_are_rows(history: History) -> None:
    history.commit("wrapper", {"pkg/ops.py": WRAPPER})
    changed = (
        WRAPPER.replace("max_par=8", "max_par=16")
        .replace("thread_k=-1, ", "thread_k=-1, thread_n=-1, ")
        .replace("make_configs([128, 256], [4, 8])", "make_configs([512], [1])")
    )
    sha = history.commit("retune", {"pkg/ops.py": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.CONSTANT) == [("mul(max_par)", "8", "16")]  # the new thread_n is no row
    assert rows(found, FindingKind.TABLE_ENTRY) == [
        ("CONFIGS", "make_configs([128, 256], [4, 8])", "make_configs([512], [1])")
    ]
    assert [f.name for f in found if f.kind is FindingKind.AUTOTUNE_CONFIG] == ["dequant_kernel@triton.autotune"]


MATMUL = """\
import os
import sys

ENABLE_CACHE = os.getenv("LIB_ENABLE_CACHE", "1") == "1"


class Matmul:
    def __init__(self, source_format, outfeatures, backend="tl"):
        self.backend = backend
        if outfeatures != 256 == 0:
            raise ValueError("outfeatures")

    def tune(self):
        return {}
"""


def test_backend_choices_features_env_flags_and_the_platform_are_conditions(history: History) -> None:
    history.commit("matmul", {"pkg/matmul.py": MATMUL})
    changed = (
        MATMUL.replace(
            '            raise ValueError("outfeatures")\n',
            '            raise ValueError("outfeatures")\n'
            '        if source_format in ["nf"]:\n            backend = "tir"\n',
        )
        .replace("outfeatures != 256 == 0", "outfeatures % 256 != 0")
        .replace(
            "        return {}",
            "        if ENABLE_CACHE:\n            return {}\n        return None",
        )
        .replace('== "1"\n', '== "1"\nif sys.platform == "darwin":\n    os.environ["MPS_FALLBACK"] = "1"\n')
    )
    sha = history.commit("nf falls back to tir", {"pkg/matmul.py": changed})

    found = explain(history.path, sha).findings

    assert sorted(rows(found, FindingKind.BRANCH_CONDITION)) == [
        ("<module> arch condition", None, "sys.platform == 'darwin'"),
        ("Matmul.__init__ backend condition", None, "source_format in ['nf']"),
        ("Matmul.__init__ shape condition", "outfeatures != 256 == 0", "outfeatures % 256 != 0"),
        ("Matmul.tune env condition", None, "ENABLE_CACHE"),
    ]


def test_a_new_or_dropped_module_flag_is_no_row_but_a_flipped_one_is(history: History) -> None:
    history.commit("flags", {"pkg/flags.py": "HAS_SM90 = False\nOLD_FLAG = True\n"})
    sha = history.commit("sm121", {"pkg/flags.py": "HAS_SM90 = True\nHAS_SM121 = False\n"})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.CONSTANT) == [("HAS_SM90", "False", "True")]


ATTENTION = """\
def attention(q, k, v, arch, scale):
    if arch == "sm90":
        return fp8_wrapper(q, k, v, sm_scale=scale, pv_accum_dtype="fp32")
    out = torch.empty(q.shape, dtype="float16")
    return fp16_wrapper(q, k, v, sm_scale=scale)


def prepare(x, n):
    return x
"""


def test_a_wrapper_keyword_choosing_the_precision_is_a_launch_and_a_launch_under_a_new_branch_is_not(
    history: History,
) -> None:
    history.commit("attention", {"pkg/core.py": ATTENTION})
    changed = (
        ATTENTION.replace('pv_accum_dtype="fp32"', 'pv_accum_dtype="fp32+fp16"')
        .replace('dtype="float16"', 'dtype="bfloat16"')
        .replace(
            "    out = torch.empty",
            '    elif arch == "sm121":\n        return fp8_wrapper(q, k, v, sm_scale=scale, pv_accum_dtype="fp32")\n'
            "    out = torch.empty",
        )
        .replace(
            "    return x\n",
            "    def pick(m):\n        if m.shape[0] > 64:\n            return 1\n        return 2\n"
            "    if n > 128:\n        return pick(x)\n    return x\n",
        )
    )
    sha = history.commit("fp16 accumulation, sm121", {"pkg/core.py": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.LAUNCH_PARAM) == [
        ("fp8_wrapper pv_accum_dtype", "'fp32'", "'fp32+fp16'")
    ]  # not torch.empty's dtype, not the sm121 launch (its branch's row shows it)
    assert rows(found, FindingKind.BRANCH_CONDITION) == [
        ("attention arch condition", None, "arch == 'sm121'"),
        ("prepare shape condition", None, "n > 128"),
    ]  # not the conditions of the new closure prepare.<locals>.pick


VARLEN = """\
def varlen_fwd(q, total_q, batch_size, precision):
    rows = total_q / batch_size
    if rows >= 256:
        config_name = "prefill"
    else:
        config_name = "decode"
    return load_module(q, config_name, device=q.device)
"""


def test_an_if_naming_the_config_and_a_comparison_passed_to_a_switch_keyword_are_conditions(
    history: History,
) -> None:
    history.commit("varlen", {"pkg/flash.py": VARLEN})
    changed = VARLEN.replace("rows >= 256", "rows > 64").replace(
        "device=q.device)", 'device=q.device, use_fp4=precision == "fp4", scale=precision == "x")'
    )
    sha = history.commit("four blocks, fp4", {"pkg/flash.py": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.BRANCH_CONDITION) == [
        ("varlen_fwd backend condition", "rows >= 256", "rows > 64"),
        ("varlen_fwd dtype condition", None, "precision == 'fp4'"),
    ]  # scale= is no switch keyword


KERNELS = """\
import triton
import triton.language as tl


@triton.jit
def load_block(ptr, d: tl.constexpr, BLOCK_K: tl.constexpr):
    if d > 0:
        return tl.load(ptr)
    return fetch(ptr, BLOCK_K=BLOCK_K)


@cute.jit
def host_entry(a, dtype):
    if dtype == "fp16":
        run_fp16(a)
"""


def test_a_triton_kernels_own_branches_and_calls_are_no_rows_but_a_cute_jit_hosts_are(history: History) -> None:
    history.commit("kernels", {"pkg/kernels.py": KERNELS})
    changed = (
        KERNELS.replace("if d > 0:", "if d == BLOCK_K:")
        .replace("fetch(ptr, BLOCK_K=BLOCK_K)", "fetch(ptr, BLOCK_K=2 * BLOCK_K)")
        .replace('dtype == "fp16"', 'dtype == "bf16"')
    )
    sha = history.commit("boundary", {"pkg/kernels.py": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.BRANCH_CONDITION) == [
        ("host_entry dtype condition", "dtype == 'fp16'", "dtype == 'bf16'")
    ]
    assert rows(found, FindingKind.LAUNCH_PARAM) == []


def test_a_decorator_passing_configs_is_an_autotune_whatever_its_name(history: History) -> None:
    source = (
        "@libtuner(\n"
        '    configs=runtime.get_tuned_config("mm"),\n'
        '    key=["M", "N", "K"],\n'
        '    strategy=["log", "log", "log"],\n'
        ")\n"
        "@triton.jit\n"
        "def mm_kernel(a, b, M, N, K):\n"
        "    pass\n"
    )
    history.commit("mm", {"pkg/mm.py": source})
    changed = source.replace('"log", "log", "log"', '"align32", "align32", "align32"')
    sha = history.commit("align", {"pkg/mm.py": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.AUTOTUNE_CONFIG) == [
        ("mm_kernel@libtuner[strategy]", "['log', 'log', 'log']", "['align32', 'align32', 'align32']")
    ]
