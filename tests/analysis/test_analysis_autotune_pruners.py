"""Autotune pruners a commit adds or changes (autotune_pruners.py), on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, static_diff

MATMUL_PY = """\
import torch
import triton
import triton.language as tl

CONFIGS = [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_stages=3)]


def smem_prune(configs, named_args):
    device = torch.cuda.current_device()
    limit = triton.compiler.cuda_utils.get_device_properties(device)["max_shared_mem"]
    pruned = []
    for config in configs:
        needed = (config.kwargs["BLOCK_M"] + config.kwargs["BLOCK_N"]) * config.num_stages
        if needed <= limit:
            pruned.append(config)
    return pruned


def fp16_prune(configs, named_args):
    return configs


@triton.autotune(configs=CONFIGS, key=["M"], prune_configs_by={"early_config_prune": smem_prune})
@triton.jit
def matmul_kernel(a, b, M, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pass


@triton.autotune(configs=CONFIGS, key=["M"], prune_configs_by={"early_config_prune": fp16_prune})
@triton.jit
def fp16_kernel(a, b, M, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pass
"""

SHAPE_PRUNE = """\
try:
    import triton

    def shape_prune(configs, nargs):
        return [c for c in configs if c.kwargs["BLOCK_M"] <= nargs["M"]]

    @triton.autotune(configs=CONFIGS, key=["M"], prune_configs_by={"early_config_prune": shape_prune})
    @triton.jit
    def small_kernel(a, M):
        pass
except ImportError:
    pass


def log_prune(configs, named_args, **kwargs):
    M = named_args["M"]
    logger.info(f"{len(configs)=} for {M=}")
    return configs


@triton.autotune(configs=CONFIGS, key=["M"], prune_configs_by={"early_config_prune": log_prune})
@triton.jit
def logged_kernel(a, M):
    pass
"""


def pruner_rows(history: History, sha: str) -> list[tuple[str, str]]:
    return [
        (f.name, f.detail)
        for f in static_diff(history.path, sha).table_findings
        if f.kind is FindingKind.AUTOTUNE_CONFIG and f.detail.startswith("prunes")
    ]


def test_a_pruner_that_now_hands_its_configs_to_a_new_helper_is_a_row_and_so_is_the_helper(history: History) -> None:
    history.commit("matmul", {"ops/matmul.py": MATMUL_PY})
    helper = "\n\ndef limit_stages(configs, named_args):\n    return sorted(configs, key=lambda c: c.num_stages)[:4]\n"
    changed = (
        MATMUL_PY.replace("def fp16_prune(", helper.lstrip("\n") + "\n\ndef fp16_prune(")
        .replace("    return configs\n", "    configs = limit_stages(configs, named_args)\n    return configs\n")
        .replace(
            "triton.compiler.cuda_utils.get_device_properties", "triton.runtime.driver.utils.get_device_properties"
        )
    )
    sha = history.commit("prune fp16 configs by stages; the device query's new home", {"ops/matmul.py": changed})

    assert sorted(pruner_rows(history, sha)) == [
        ("fp16_prune", "prunes the configs of fp16_kernel"),
        ("limit_stages", "prunes the configs of fp16_kernel"),
    ]


def test_a_new_pruner_under_a_try_is_a_row_one_that_only_logs_is_none(history: History) -> None:
    history.commit("matmul", {"ops/matmul.py": MATMUL_PY})
    sha = history.commit("a small kernel pruned by shape", {"ops/matmul.py": MATMUL_PY + "\n\n" + SHAPE_PRUNE})

    assert pruner_rows(history, sha) == [("shape_prune", "prunes the configs of small_kernel")]
