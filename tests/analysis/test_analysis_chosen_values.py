"""Values a function hands on (chosen_literals.py, comparisons in returned tuples), what a launch's arguments are (tile
arguments passed by position, strides) and empty lists in tuning functions (local_tables.py), on real git
histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import Finding, FindingKind, explain

QUANT_PY = """\
import torch


class BitsConfig:
    def get_min_capability(self) -> int:
        # Turing or newer
        return 75

    def __len__(self):
        return 2


def align_size(config) -> int:
    if config.fp8:
        return 32
    return 16


def workers(sm_cnt):
    if sm_cnt >= 132:
        worker = 128
    elif sm_cnt >= 108:
        worker = 96
    else:
        worker = 64
    return worker


def retries(attempt):
    if attempt > 3:
        delay = 10
    else:
        delay = 1
    return delay


def main():
    return 0
"""


def _rows(history: History, sha: str, kind: FindingKind) -> list[Finding]:
    return [f for f in explain(history.path, sha).table_findings if f.kind is kind]


def test_numbers_a_function_returns_or_picks_per_arch_are_its_rows(history: History) -> None:
    history.commit("quant", {"pkg/quant.py": QUANT_PY})
    changed = (
        QUANT_PY.replace("def main():\n    return 0", "def main():\n    return 1")
        .replace("# Turing or newer\n        return 75", "# Ampere or newer\n        return 80")
        .replace("return 16", "return 0")
        .replace("worker = 96", "worker = 108")
        .replace("delay = 10", "delay = 30")
        .replace("return 2", "return 3")
    )
    sha = history.commit("bnb needs sm80; no padding; 108 workers", {"pkg/quant.py": changed})

    found = _rows(history, sha, FindingKind.DISPATCH_LOGIC)

    # retries' condition is about no arch, dtype or shape; __len__ and main choose nothing
    assert [(f.name, f.before, f.after) for f in found] == [
        ("BitsConfig.get_min_capability", "return 75", "return 80"),
        ("align_size", "return 16", "return 0"),
        ("workers", "worker = 96 when sm_cnt >= 108", "worker = 108 when sm_cnt >= 108"),
    ]


SEEDS_PY = """\
from registry import register


def first_load_order(num_kv: int) -> int:
    if num_kv < 512:
        return 0
    if num_kv == 512:
        return 0
    return 8


def shared_memory_size():
    size = query_device()
    return size if size else 49152


@register("load")
def _(x):
    return 1


@register("store")
def _(x):
    return 2
"""


def test_a_returned_number_under_a_condition_or_instead_of_a_query_is_a_row(history: History) -> None:
    history.commit("seeds", {"pkg/seeds.py": SEEDS_PY})
    changed = (
        SEEDS_PY.replace("    if num_kv == 512:\n        return 0", "    if num_kv == 512:\n        return 4")
        .replace("    size = query_device()\n    return size if size else 49152", "    return 64 * 1024")
        .replace("return 2\n", "return 3\n")
    )
    sha = history.commit("seed for 512; fixed shared memory", {"pkg/seeds.py": changed})

    found = _rows(history, sha, FindingKind.DISPATCH_LOGIC)

    # `def _` is defined twice on each side: which one became which is unknown, so neither is a row
    assert [(f.name, f.before, f.after) for f in found] == [
        ("first_load_order", "return 0 when num_kv == 512", "return 4 when num_kv == 512"),
        ("shared_memory_size", None, "return 64 * 1024"),
    ]


REDUCE_PY = """\
def can_use_segmented_reduce(x, axis):
    contiguous_size = x.shape[axis]
    return (contiguous_size <= 0x7fffffff, contiguous_size)


def sizes(x):
    return (x.ndim, x.size)
"""


def test_a_comparison_inside_a_returned_tuple_is_a_condition(history: History) -> None:
    history.commit("reduce", {"pkg/reduce.py": REDUCE_PY})
    changed = REDUCE_PY.replace("(contiguous_size <= 0x7fffffff,", "(x.size <= 0x7fffffff,").replace(
        "(x.ndim, x.size)", "(x.size, x.ndim)"
    )
    sha = history.commit("segmented reduce only below INT_MAX elements", {"pkg/reduce.py": changed})

    found = _rows(history, sha, FindingKind.BRANCH_CONDITION)

    assert [(f.name, f.label, f.before, f.after) for f in found] == [
        (
            "can_use_segmented_reduce",
            "can_use_segmented_reduce shape condition",
            "contiguous_size <= 2147483647",
            "x.size <= 2147483647",
        )
    ]  # sizes returns no comparison


OPERATION_PY = """\
import util
from bisector.kernels import cosine_kernel, norm_kernel


def cosine(x1, x2, size):
    grid = lambda meta: (x1.shape[0],)
    cosine_kernel[grid](x1, x2, size, util.block_size(size, x1.element_size()), util.dtype(x1.dtype))


def norm(x, size):
    grid = lambda meta: (x.shape[0],)
    block_size = util.block_size(size, x.element_size())
    norm_kernel[grid](x, size, block_size)
"""


def test_a_tile_argument_passed_by_position_is_a_launch_parameter(history: History) -> None:
    history.commit("operations", {"pkg/operation.py": OPERATION_PY})
    changed = OPERATION_PY.replace(", util.block_size(size, x1.element_size()), ", ", ").replace(
        "norm_kernel[grid](x, size, block_size)", "norm_kernel[grid](x, x.stride(0), size, block_size)"
    )
    sha = history.commit("cosine autotunes its block size; norm takes a stride", {"pkg/operation.py": changed})

    found = _rows(history, sha, FindingKind.LAUNCH_PARAM)

    # a stride added before norm's block size moves it, and is no tile
    assert [(f.name, f.key, f.before, f.after) for f in found] == [
        ("cosine_kernel[...]", "positional block_size", "util.block_size(size, x1.element_size())", None)
    ]


# condition show


LAYER_NORM_PY = """\
from bisector.kernels import layer_norm_kernel


def layer_norm(x, out, eps):
    grid = (x.shape[0],)
    layer_norm_kernel[grid](x, out, stride_row_out=out.stride(0), eps=eps, num_warps=4)
"""


def test_a_stride_passed_to_a_launch_is_no_launch_parameter(history: History) -> None:
    history.commit("layer norm", {"pkg/layer_norm.py": LAYER_NORM_PY})
    changed = LAYER_NORM_PY.replace(
        "stride_row_out=out.stride(0),", "stride_row_out=out.stride(-2), x_stride=x.stride(-2),"
    )
    history.commit("strides of >2-D outputs", {"pkg/layer_norm.py": changed})
    sha = history.commit("eight warps", {"pkg/layer_norm.py": changed.replace("num_warps=4", "num_warps=8")})

    strides = _rows(history, history.git("rev-parse", "HEAD~1"), FindingKind.LAUNCH_PARAM)
    warps = _rows(history, sha, FindingKind.LAUNCH_PARAM)

    assert strides == []  # where the kernel indexes, not how it is launched
    assert [(f.key, f.before, f.after) for f in warps] == [("num_warps", "4", "8")]


PRUNE_PY = """\
import triton


def prune_configs(configs, named_args):
    pruned = []
    for config in configs:
        if config.num_stages <= 3:
            pruned.append(config)
    return pruned


def warps_configs():
    configs = [triton.Config({}, num_warps=2)]
    return configs


def _block_size(dim_size, inner_size):
    inner_threads = min(inner_size, 1024)
    dim_threads = 1
    if inner_threads <= 64 and dim_size >= 64:
        dim_threads = 1024 // inner_threads
    return dim_threads, inner_threads
"""


def test_an_empty_list_filled_in_a_loop_is_no_table(history: History) -> None:
    history.commit("prune", {"pkg/prune.py": PRUNE_PY})
    changed = (
        PRUNE_PY.replace("    pruned = []\n", "    pruned = []\n    kept = []\n")
        .replace("num_warps=2)]", "num_warps=2), triton.Config({}, num_warps=4)]")
        .replace("inner_threads <= 64 and dim_size >= 64", "inner_threads <= 32 and dim_size >= 32")
    )
    sha = history.commit("warp-multiple block sizes", {"pkg/prune.py": changed})

    found = explain(history.path, sha).table_findings

    assert [(f.kind.value, f.name) for f in found] == [
        ("autotune_config", "warps_configs.<locals>.configs"),
        ("branch_condition", "_block_size"),
    ]  # not prune_configs' new empty list kept


CONTEXT_PY = """\
import torch


def capture_begin(runtime, stream):
    if runtime.driver_version >= (12, 3):
        return stream.capture(mode="relaxed")
    return stream.capture()


def conditional_graphs(runtime):
    if runtime.toolkit_version < (12, 4):
        raise RuntimeError("needs CUDA 12.4")
    return runtime.toolkit_version >= (12, 4) and runtime.driver_version >= (12, 4)


def output_format(device, arch):
    if device.capability >= 90 and arch:
        return "sass"
    return "ptx"
"""


def test_a_guard_against_a_missing_value_added_to_a_condition_is_no_change(history: History) -> None:
    history.commit("context", {"pkg/context.py": CONTEXT_PY})
    changed = (
        CONTEXT_PY.replace(
            "if runtime.driver_version >= (12, 3):",
            "if runtime.driver_version is not None and runtime.driver_version >= (12, 3):",
        )
        .replace(
            "if runtime.toolkit_version < (12, 4):",
            "if runtime.toolkit_version is None or runtime.toolkit_version < (12, 4):",
        )
        .replace(
            "return runtime.toolkit_version >= (12, 4) and",
            "return runtime.toolkit_version is not None and runtime.toolkit_version >= (12, 4) and",
        )
        .replace("if device.capability >= 90 and arch:", "if arch is not None and device.capability >= 100 and arch:")
    )
    sha = history.commit("no driver: no version", {"pkg/context.py": changed})

    found = _rows(history, sha, FindingKind.BRANCH_CONDITION)

    assert [(f.name, f.before, f.after) for f in found] == [
        ("output_format", "device.capability >= 90 and arch", "arch is not None and device.capability >= 100 and arch")
    ]  # the versions' own tests are the same where a version is there; output_format's arch bar moved


GENERATE_PY = """\
import torch


def main(prompt, device="cuda", compile=True, *, dtype=None, steps=(8 if torch.cuda.is_available() else 1)):
    return run(prompt, device=device, compile=compile, steps=steps)
"""


def test_a_choice_made_in_a_parameter_default_is_a_condition_of_the_function(history: History) -> None:
    history.commit("generate", {"pkg/generate.py": GENERATE_PY})
    changed = GENERATE_PY.replace('device="cuda"', 'device=("cuda" if torch.cuda.is_available() else "cpu")').replace(
        "compile=True", "compile=False"
    )
    sha = history.commit("cpu when there is no GPU", {"pkg/generate.py": changed})

    found = _rows(history, sha, FindingKind.BRANCH_CONDITION)

    # steps' default chose the same way before; compile's default is no choice between two values
    assert [(f.name, f.label, f.before, f.after) for f in found] == [
        ("main", "main arch condition", None, "torch.cuda.is_available()")
    ]
