"""Config lists built by +, constants that name env variables and dataclass fields,
in the static diff of real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, StaticDiff, explain

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

    diff = explain(history.path, sha)

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
    assert by_kind(explain(history.path, other)) == {
        "autotune_config": {
            "CONFIGS[+ io_bound_configs()]",
            "CONFIGS[+ io_configs(8)]",
            "_kernel@triton.autotune[configs][+ io_bound_configs()]",
            "_kernel@triton.autotune[configs][+ io_configs(8)]",
        }
    }


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

    diff = explain(history.path, sha)

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

    diff = explain(history.path, sha)

    assert [(f.label, f.change_text) for f in diff.table_findings] == [("GemmConfig.block", "64 -> 128")]
