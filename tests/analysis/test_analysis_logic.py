"""Which changed functions are dispatch logic, config lists built by +, and constants that name env variables,
in the static diff of real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, StaticDiff, static_diff

KERNELS = """\
import logging
import os
from dataclasses import dataclass

import triton

GPU_ENV = "LIB_BENCH_GPU"
_SPLIT_TABLE = {64: 2, 128: 4}

CONFIGS = [
    triton.Config({"BLOCK": 64}, num_warps=4),
] + io_bound_configs()


@triton.autotune(configs=CONFIGS, key=["M"])
@triton.jit
def _kernel(x, M, BLOCK: tl.constexpr):
    pass


def split_for(n):
    splits = _SPLIT_TABLE.get(n, 1)
    logging.info("n=%d", n)
    return splits


@dataclass
class GemmConfig:
    block: int = 64
    pad: bool = False
"""


def by_kind(diff: StaticDiff) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in diff.table_findings:
        out.setdefault(f.kind.value, set()).add(f.label)
    return out


def test_a_config_list_joined_with_a_call_is_compared_config_by_config_under_its_name_and_each_autotune(
    history: History,
) -> None:
    history.commit("kernels", {"ops/gemm.py": KERNELS})
    after = KERNELS.replace(
        '    triton.Config({"BLOCK": 64}, num_warps=4),\n',
        '    triton.Config({"BLOCK": 64}, num_warps=4),\n    triton.Config({"BLOCK": 128}, num_warps=8),\n',
    ).replace('key=["M"])', 'key=["M"], prune_configs_by={"early_config_prune": prune})')
    sha = history.commit("a config for large K", {"ops/gemm.py": after})

    diff = static_diff(history.path, sha)

    assert by_kind(diff) == {
        "autotune_config": {
            "CONFIGS[{'BLOCK': 128}]",
            "_kernel@triton.autotune[configs][{'BLOCK': 128}]",
            "_kernel@triton.autotune[prune_configs_by]['early_config_prune']",
        }
    }
    added = next(f for f in diff.findings if f.label == "CONFIGS[{'BLOCK': 128}]")
    assert (added.before, added.after) == (None, "num_warps=8")
    # the part that is no literal is an entry of its own, compared by its text
    other = history.commit(
        "more io-bound configs", {"ops/gemm.py": after.replace("io_bound_configs()", "io_configs(8)")}
    )
    assert by_kind(static_diff(history.path, other)) == {
        "autotune_config": {
            "CONFIGS[+ io_bound_configs()]",
            "CONFIGS[+ io_configs(8)]",
            "_kernel@triton.autotune[configs][+ io_bound_configs()]",
            "_kernel@triton.autotune[configs][+ io_configs(8)]",
        }
    }


def test_dispatch_logic_is_a_changed_statement_that_reads_a_table_not_any_change_of_a_reader(history: History) -> None:
    history.commit("kernels", {"ops/gemm.py": KERNELS})
    quiet = KERNELS.replace('logging.info("n=%d", n)', 'logging.debug("n=%d splits=%d", n, splits)')
    quiet += """

    def __eq__(self, other):
        return self.block == other.block and self.pad == other.pad

    def __hash__(self):
        return hash((self.block, self.pad))
"""
    sha = history.commit("quieter; GemmConfig is hashable", {"ops/gemm.py": quiet})
    assert by_kind(static_diff(history.path, sha)) == {}

    reads = quiet.replace("_SPLIT_TABLE.get(n, 1)", "_SPLIT_TABLE.get(n, 2)")
    sha = history.commit("default split 2", {"ops/gemm.py": reads})
    diff = static_diff(history.path, sha)
    assert by_kind(diff) == {"dispatch_logic": {"split_for"}}
    assert diff.table_findings[0].detail == "reads _SPLIT_TABLE"


def test_a_constant_that_names_an_env_variable_shows_as_the_gate_not_as_a_constant(history: History) -> None:
    history.commit("kernels", {"ops/gemm.py": KERNELS.replace('GPU_ENV = "LIB_BENCH_GPU"\n', "")})
    after = (
        KERNELS
        + """

def gpu_override():
    return os.environ.get(GPU_ENV)
"""
    )
    sha = history.commit("let the bench name the GPU", {"ops/gemm.py": after})

    diff = static_diff(history.path, sha)

    assert by_kind(diff) == {"env_gate": {"LIB_BENCH_GPU"}}
    gate = diff.table_findings[0]
    assert (gate.kind, gate.before, gate.after) == (
        FindingKind.ENV_GATE,
        None,
        "os.environ.get(GPU_ENV) (in gpu_override)",
    )


def test_a_field_added_to_a_dataclass_is_no_row_a_changed_default_is(history: History) -> None:
    history.commit("kernels", {"ops/gemm.py": KERNELS})
    after = KERNELS.replace("    block: int = 64\n", "    block: int = 128\n    swizzle: int = 8\n")
    sha = history.commit("a swizzle option; bigger blocks", {"ops/gemm.py": after})

    diff = static_diff(history.path, sha)

    assert [(f.label, f.change_text) for f in diff.table_findings] == [("GemmConfig.block", "64 -> 128")]


RUNTIME_PY = """\
runtime = None
_WARPS = {64: 4, 128: 8}
_FAST_WARPS = {64: 2}


def init():
    global runtime
    runtime = Runtime()


def capture_begin(force_module_load=None):
    if force_module_load is None:
        if runtime.driver_version >= (12, 3):
            force_module_load = False
        else:
            force_module_load = True
    return force_module_load


def assert_graph_support():
    if runtime.toolkit_version < (12, 4):
        raise RuntimeError("needs CUDA Toolkit 12.4+")


def is_graph_supported():
    return runtime.toolkit_version >= (12, 4) and runtime.driver_version >= (12, 4)


def warps_for(block):
    if block in _WARPS:
        return _WARPS[block]
    return 4
"""


def test_none_checks_added_to_a_functions_reads_of_a_module_value_are_no_row(history: History) -> None:
    history.commit("runtime", {"pkg/context.py": RUNTIME_PY})
    guarded = (
        RUNTIME_PY.replace(
            "if runtime.driver_version >=", "if runtime.driver_version is not None and runtime.driver_version >="
        )
        .replace(
            "    if runtime.toolkit_version < (12, 4):",
            '    if runtime.driver_version is None:\n        raise RuntimeError("no driver")\n'
            "    if runtime.toolkit_version is None or runtime.toolkit_version < (12, 4):",
        )
        .replace(
            "return runtime.toolkit_version >= (12, 4) and",
            "return runtime.toolkit_version is not None and runtime.toolkit_version >= (12, 4) and",
        )
        .replace("if block in _WARPS:", "if block is not None and block in _WARPS:")
    )
    sha = history.commit("version checks handle None", {"pkg/context.py": guarded})
    assert by_kind(static_diff(history.path, sha)) == {}

    fast = guarded.replace("block is not None and block in _WARPS:", "block is not None and block in _FAST_WARPS:")
    sha = history.commit("fast warps", {"pkg/context.py": fast})
    diff = static_diff(history.path, sha)
    assert by_kind(diff) == {"dispatch_logic": {"warps_for"}}
    assert diff.table_findings[0].detail == "reads _FAST_WARPS, _WARPS"


PICKER = """\
import functools

_SPLIT_TABLE = {64: 2, 128: 4}


def picker(n):
    n = max(n, 1)
    logging.info("n=%d", n)

    @functools.lru_cache(maxsize=16)
    def pick(m):
        return m

    total = pick(n)
    logging.info("total=%d", total)
    return total
"""


def test_a_long_functions_statements_around_its_change_are_left_out_but_not_a_nested_defs_decorator(
    history: History,
) -> None:
    # the statements before and after the change are the same lines on both sides: only the middle is compared,
    # and a nested def's decorator line is part of that def (its def line and body are the same on both sides)
    history.commit("picker", {"ops/pick.py": PICKER})
    sha = history.commit("cache by table", {"ops/pick.py": PICKER.replace("maxsize=16", "maxsize=_SPLIT_TABLE[64]")})

    diff = static_diff(history.path, sha)

    assert by_kind(diff) == {"dispatch_logic": {"picker"}}
    assert diff.table_findings[0].detail == "reads _SPLIT_TABLE"
