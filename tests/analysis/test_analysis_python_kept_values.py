"""Python rows on real git histories: what keeps every value is no row (a launch argument
moved between position and keyword, the autotune key renamed with the kernel parameter it names, a view of a
tensor taken as a reshape), and choices written in a kernel generator's own style are rows (a camelCase `useX`
flag set under a condition, the GPU's ISA tested, a condition kept in a named entry of a capabilities dict, the
kernel list of a generator script, a dispatch map built in a function); a size check that raises, added or dropped,
the tables of a class removed whole, and a condition that only reshapes a tensor in place are no rows."""

from __future__ import annotations

from analysis_history import History, last_resort_functions, rules_rows

from bisector.analysis import explain


def _rows(history: History, sha: str) -> list[tuple[str, str, str]]:
    return sorted((f.kind.value, f.name, f.key) for f in explain(history.path, sha).table_findings)


COPY_PY = """\
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK_X": 64}, num_warps=2), triton.Config({"BLOCK_X": 128}, num_warps=4)],
    key=["num_columns"],
)
@triton.jit
def _copy(x, out, num_columns, TOP_K: tl.constexpr, BLOCK_X: tl.constexpr):
    offsets = tl.arange(0, BLOCK_X)
    for i in range(tl.cdiv(num_columns, BLOCK_X)):
        mask = offsets < num_columns
        tl.store(out + offsets, tl.load(x + offsets, mask=mask), mask=mask)
        offsets += BLOCK_X


def copy(x, out, top_k):
    _copy[(x.shape[0],)](x, out, x.shape[1], TOP_K=top_k)
    return out
"""

COPY_CONSTEXPR_PY = (
    COPY_PY.replace('key=["num_columns"]', 'key=["NUM_COLUMNS"]')
    .replace("out, num_columns, TOP_K", "out, NUM_COLUMNS: tl.constexpr, TOP_K")
    .replace("(num_columns, BLOCK_X)", "(NUM_COLUMNS, BLOCK_X)")
    .replace("offsets < num_columns", "offsets < NUM_COLUMNS")
    .replace("(x, out, x.shape[1], TOP_K=top_k)", "(x, out, NUM_COLUMNS=x.shape[1], TOP_K=top_k)")
)


def test_a_parameter_made_a_constexpr_keyword_with_its_autotune_key_is_no_row(history: History) -> None:
    history.commit("copy kernel", {"pkg/kernels.py": COPY_PY})
    sha = history.commit("num_columns as a constexpr", {"pkg/kernels.py": COPY_CONSTEXPR_PY})

    assert _rows(history, sha) == []


def test_a_keyword_passing_another_value_or_a_key_naming_another_parameter_is_still_a_row(history: History) -> None:
    history.commit("copy kernel", {"pkg/kernels.py": COPY_PY})
    changed = COPY_CONSTEXPR_PY.replace("NUM_COLUMNS=x.shape[1]", "NUM_COLUMNS=x.shape[0]").replace(
        'key=["NUM_COLUMNS"]', 'key=["TOP_K"]'
    )
    sha = history.commit("tune by top_k; rows as columns", {"pkg/kernels.py": changed})

    assert _rows(history, sha) == [
        ("autotune_config", "_copy@triton.autotune", "[key]"),
        ("launch_param", "_copy[...]", "NUM_COLUMNS"),
    ]


QBYTES_PY = """\
import torch


def qbytes_mm(input, weight, scales, in_features):
    output = torch.ops.quanto.qbytes_mm(input.view(-1, in_features), weight, scales)
    return output.view(*input.shape[:-1], -1)
"""


def test_a_tensor_argument_reshaped_instead_of_viewed_is_no_launch_row(history: History) -> None:
    history.commit("qbytes", {"pkg/qbytes.py": QBYTES_PY})
    reshaped = QBYTES_PY.replace("input.view(-1, in_features)", "input.reshape(-1, in_features).contiguous()")
    sha = history.commit("non-contiguous inputs", {"pkg/qbytes.py": reshaped})
    assert _rows(history, sha) == []

    other = QBYTES_PY.replace("input.view(-1, in_features)", "input.view(-1, 2 * in_features)")
    sha = history.commit("packed pairs", {"pkg/qbytes.py": other})
    assert _rows(history, sha) == [("launch_param", "torch.ops.quanto.qbytes_mm", "arg0")]


WRITER_PY = """\
class KernelWriter:
    def init_kernel(self, kernel, caps):
        self.useInitAccOpt = False
        if kernel["EnableMatrixInstruction"] and caps["HasConstSrc"]:
            self.useInitAccOpt = True
        return self.useInitAccOpt


def assign_derived(state, isa):
    if state["StreamK"] > 0:
        if state["Persistent"]:
            reject(state, "Stream-K is persistent already")


def get_arch_caps(isa_version):
    rv = {}
    rv["HasAccCD"] = isa_version == (9, 0, 10) or isa_version == (9, 4, 2)
    rv["ForceStoreSC1"] = isa_version == (9, 4, 1) or isa_version == (9, 4, 2)
    return rv


def reject(state, reason):
    state["Valid"] = False
"""


def test_choices_of_a_kernel_generator_written_in_camel_case_are_rows(history: History) -> None:
    history.commit("writer", {"Tensile/KernelWriter.py": WRITER_PY})
    changed = (
        WRITER_PY.replace('caps["HasConstSrc"]:', 'caps["HasConstSrc"] and kernel["StreamK"] == 0:')
        .replace(
            '            reject(state, "Stream-K is persistent already")\n',
            '            reject(state, "Stream-K is persistent already")\n'
            "        if isa != (9, 4, 2):\n"
            '            reject(state, "XCC mapping only on gfx942")\n',
        )
        .replace("(9, 4, 1) or isa_version == (9, 4, 2)", "(9, 4, 0) or isa_version == (9, 4, 1)")
    )
    sha = history.commit("gfx942 only; no init-acc opt for Stream-K", {"Tensile/KernelWriter.py": changed})

    assert _rows(history, sha) == [
        ("branch_condition", "KernelWriter.init_kernel", "backend condition"),
        ("branch_condition", "assign_derived", "arch condition"),
        ("branch_condition", "get_arch_caps", "arch condition"),
    ]


def test_names_that_only_look_like_an_isa_or_a_use_flag_choose_nothing(history: History) -> None:
    source = """\
    def pick(kernel, state):
        if state["disabled"] or kernel.isAvailable():
            kernel.user = True
        return kernel
    """
    history.commit("pick", {"pkg/pick.py": source})
    changed = source.replace('state["disabled"]', 'state["disabled"] or state["visa"]')
    sha = history.commit("visa holders", {"pkg/pick.py": changed})

    assert rules_rows(history.path, sha) == []
    assert last_resort_functions(history.path, sha) == ["pick"]  # its changed branch test, no more


ATTN_PY = """\
import torch


class ColoAttention:
    _kernel_dispatch_map = None

    @staticmethod
    def _init_kernels_dispatch():
        if ColoAttention._kernel_dispatch_map is None:
            half_dispatch_map = {
                None: FlashAttentionLoader(),
                "padded": FlashAttentionWithPaddingMaskLoader(),
            }
            float_dispatch_map = {None: FloatAttentionLoader()}
            ColoAttention._kernel_dispatch_map = {torch.float16: half_dispatch_map, torch.float32: float_dispatch_map}

    def attention(self, q, mask_type):
        ColoAttention._init_kernels_dispatch()
        return ColoAttention._kernel_dispatch_map[q.dtype][mask_type].load()(q)
"""


def test_a_kernel_dispatch_map_built_in_a_function_is_a_table(history: History) -> None:
    history.commit("attention", {"pkg/attn.py": ATTN_PY})
    changed = ATTN_PY.replace('"padded": FlashAttentionWithPaddingMaskLoader()', '"padded": FlashAttentionLoader()')
    sha = history.commit("padded masks by the plain flash kernel", {"pkg/attn.py": changed})

    assert _rows(history, sha) == [
        ("table_entry", "ColoAttention._init_kernels_dispatch.<locals>.half_dispatch_map", "['padded']")
    ]


DMOE_PY = """\
import torch


class ParallelMLP(torch.nn.Module):
    def __init__(self, ffn_hidden_size, blocking):
        super().__init__()
        self.ffn_hidden_size = ffn_hidden_size
        self.blocking = blocking

    def topology(self, x, padded_bins):
        blocks_per_row = self.ffn_hidden_size // self.blocking
        if x.shape[0] > 4096:
            return self.large_topology(x, padded_bins, blocks_per_row)
        return self.small_topology(x, padded_bins, blocks_per_row)
"""


def test_a_size_check_that_raises_added_is_no_row_but_one_changed_is(history: History) -> None:
    history.commit("dmoe", {"pkg/dmoe.py": DMOE_PY})
    checked = DMOE_PY.replace(
        "        blocks_per_row = ",
        "        if self.ffn_hidden_size % self.blocking != 0:\n"
        '            raise ValueError("ffn_hidden_size must be a multiple of blocking")\n'
        "        blocks_per_row = ",
    )
    sha = history.commit("refuse ragged ffn sizes", {"pkg/dmoe.py": checked})
    assert rules_rows(history.path, sha) == []
    assert last_resort_functions(history.path, sha) == ["ParallelMLP.topology"]  # its changed branch test, no more

    pairs = checked.replace("% self.blocking", "% (2 * self.blocking)")
    sha = history.commit("blocks of two", {"pkg/dmoe.py": pairs})
    assert _rows(history, sha) == [("branch_condition", "ParallelMLP.topology", "shape condition")]

    platform = pairs.replace(
        '            raise ValueError("ffn_hidden_size',
        '            raise ValueError("ffn_hidden_size")\n        if torch.version.hip is not None:\n'
        '            raise RuntimeError("ffn_hidden_size',
    )
    sha = history.commit("no ROCm", {"pkg/dmoe.py": platform})
    assert _rows(history, sha) == [("branch_condition", "ParallelMLP.topology", "arch condition")]


GENERATOR_PY = """\
from collections import namedtuple

NS = namedtuple("NS", "length factors workgroup_size")


def list_large_kernels():
    sbcc_kernels = [
        NS(length=192, factors=[8, 6, 4], workgroup_size=128),
        NS(length=200, factors=[8, 5, 5], workgroup_size=128),
    ]
    return sbcc_kernels


def generate(kernels):
    for kernel in kernels:
        print(f"__global__ void fft_{kernel.length}();")


if __name__ == "__main__":
    generate(list_large_kernels())
"""


def test_the_kernel_list_of_a_kernel_generator_script_is_a_table(history: History) -> None:
    history.commit("generator", {"library/src/device/kernel-generator.py": GENERATOR_PY})
    changed = GENERATOR_PY.replace("factors=[8, 5, 5]", "factors=[5, 8, 5]")
    sha = history.commit("tweak factors for length 200", {"library/src/device/kernel-generator.py": changed})

    assert _rows(history, sha) == [("table_entry", "list_large_kernels.<locals>.sbcc_kernels", "")]


LOADER_PY = """\
class KernelLoader:
    REGISTRY = []


class FlashAttentionLoader(KernelLoader):
    REGISTRY = ["FlashAttentionNpuExtension", "FlashAttentionDaoCudaExtension", "FlashAttentionSdpaCudaExtension"]


class FlashAttentionWithPaddingMaskLoader(KernelLoader):
    REGISTRY = ["FlashAttentionNpuExtension", "FlashAttentionDaoCudaExtension"]
"""


def test_the_tables_of_a_class_removed_whole_are_no_rows_but_a_kept_class_s_are(history: History) -> None:
    history.commit("loaders", {"pkg/kernel_loader.py": LOADER_PY})
    dropped = LOADER_PY[: LOADER_PY.index("\n\nclass FlashAttentionWithPaddingMaskLoader")] + "\n"
    sha = history.commit("padded masks by the plain loader", {"pkg/kernel_loader.py": dropped})
    assert _rows(history, sha) == []

    trimmed = dropped.replace(', "FlashAttentionSdpaCudaExtension"', "")
    sha = history.commit("no SDPA", {"pkg/kernel_loader.py": trimmed})
    assert _rows(history, sha) == [("table_entry", "FlashAttentionLoader.REGISTRY", "")]


GEMM_PY = """\
def gemm_rcr_config(func_attrs, dtype="float16"):
    make_fproc(func_attrs, "rcr")
    for op in func_attrs["op_instance"].values():
        op.alignment = 8


def gemm_rcr_names(func_attrs):
    for op in func_attrs["op_instance"].values():
        op.name = op.procedural_name()
"""


def test_a_condition_of_a_function_that_builds_kernel_configs_is_a_row_whatever_it_tests(history: History) -> None:
    history.commit("gemm", {"pkg/gemm_rcr.py": GEMM_PY})
    changed = GEMM_PY.replace(
        "        op.alignment = 8\n",
        "        op.alignment = 8\n        if op.gemm_kind == GemmKind.Universal3x:\n            op.c_element = None\n",
    ).replace(
        "        op.name = op.procedural_name()\n",
        "        if op.gemm_kind == GemmKind.Universal3x:\n            op.name = op.procedural_name()\n",
    )
    sha = history.commit("no residual in SM90 kernels", {"pkg/gemm_rcr.py": changed})

    assert _rows(history, sha) == [("branch_condition", "gemm_rcr_config", "config condition")]
