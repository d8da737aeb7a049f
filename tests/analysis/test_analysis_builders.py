"""Config lists built in code and native instance lists, on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import Finding, FindingKind, static_diff


def rows(findings: tuple[Finding, ...], kind: FindingKind) -> dict[str, tuple[str | None, str | None]]:
    return {f.label: (f.before, f.after) for f in findings if f.kind is kind}


BUILT_CONFIGS = """\
    import os

    import triton

    HAS_WS = os.getenv("ENABLE_WS") == "1"


    def matmul_get_configs(pre_hook=None):
        \"\"\"The tile sizes the autotuner tries.\"\"\"
        return [
            triton.Config({"BLOCK_M": BM, "BLOCK_N": BN}, num_stages=s, num_warps=w, pre_hook=pre_hook)
            for BM in [128]
            for BN in [128, 256]
            for s in [3, 4]
            for w in [4, 8]
        ]


    def collected_configs():
        configs = []
        for bs in [64, 128]:
            configs.append(triton.Config({"X_BLOCK": bs}, num_warps=4))
        return configs


    configs_ws = [
        triton.Config({"BLOCK_M": BM}, num_warps=4, num_consumer_groups=2)
        if HAS_WS
        else triton.Config({"BLOCK_M": BM}, num_warps=8)
        for BM in [64, 128]
    ]


    class Tuner:
        def __init__(self, configs):
            self.configs = configs or [triton.Config({}, num_warps=4)]
            self.cache = {}


    @triton.autotune(configs=matmul_get_configs(), key=["M"])
    @triton.jit
    def matmul_kernel(a, M, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        pass
"""


def test_config_lists_built_in_code_are_autotune_rows_under_the_builders_name(history: History) -> None:
    history.commit("configs", {"ops/matmul.py": BUILT_CONFIGS})
    changed = (
        BUILT_CONFIGS.replace("for BM in [128]\n", "for BM in [64, 128]\n")
        .replace("for bs in [64, 128]", "for bs in [64, 128, 256]")
        .replace("if HAS_WS\n", "if not HAS_WS\n")
        .replace("self.cache = {}", "self.cache = {'hits': 0}")
        .replace("The tile sizes", "Every tile size")
    )
    sha = history.commit("more tiles", {"ops/matmul.py": changed})

    found = static_diff(history.path, sha).findings

    assert rows(found, FindingKind.AUTOTUNE_CONFIG) == {
        "matmul_get_configs": ("for BM in [128]", "for BM in [64, 128]"),
        "collected_configs": ("for bs in [64, 128]:", "for bs in [64, 128, 256]:"),
        "configs_ws": ("if HAS_WS", "if not HAS_WS"),
    }  # not Tuner.__init__: its Config is a fallback it makes on the way, not a list it returns


def test_a_builder_changed_only_in_comments_and_docstrings_gives_no_row(history: History) -> None:
    history.commit("configs", {"ops/matmul.py": BUILT_CONFIGS})
    changed = BUILT_CONFIGS.replace("The tile sizes", "All tile sizes").replace(
        "for s in [3, 4]\n", "for s in [3, 4]  # stages\n"
    )
    sha = history.commit("words", {"ops/matmul.py": changed})

    assert rows(static_diff(history.path, sha).findings, FindingKind.AUTOTUNE_CONFIG) == {}


def test_a_builder_whose_result_a_table_row_shows_has_no_row_of_its_own(history: History) -> None:
    module = """\
        import triton


        def make_configs(block_sizes, num_warps):
            configs = []
            for bs in block_sizes:
                for ws in num_warps:
                    configs.append(triton.Config({"X_BLOCK": bs}, num_warps=ws))
            return configs


        DEFAULT_CONFIGS = make_configs([128, 256], [4, 8])
    """
    history.commit("configs", {"ops/dequant.py": module})
    changed = module.replace("for ws in num_warps:", "for ws in sorted(num_warps):").replace(
        "make_configs([128, 256], [4, 8])", "make_configs([512], [1])"
    )
    sha = history.commit("retuned", {"ops/dequant.py": changed})

    found = static_diff(history.path, sha).findings

    assert "make_configs" not in rows(found, FindingKind.AUTOTUNE_CONFIG)
    assert any(f.name == "DEFAULT_CONFIGS" for f in found if f.kind.is_dispatch_relevant)
