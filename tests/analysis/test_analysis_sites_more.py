"""More launch, condition and autotune rules of the static diff, on real git histories."""

from __future__ import annotations

from analysis_history import History, last_resort_functions, rules_rows

from bisector.analysis import Finding, FindingKind, explain
from bisector.analysis.python_tables import parse_module, scan_pair


def rows(findings: tuple[Finding, ...], kind: FindingKind) -> dict[str, tuple[str | None, str | None]]:
    return {f.label: (f.before, f.after) for f in findings if f.kind is kind}


NO_CACHE_LAUNCH = """\
    import triton


    @triton.jit
    def _fwd_kernel_no_prompt_cache(Q, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        pass


    def attention(q, k, max_len):
        BLOCK_M = 128
        BLOCK_N = BLOCK_M // 2
        grid = (triton.cdiv(max_len, BLOCK_M), 1)
        _fwd_kernel_no_prompt_cache[grid](q, k, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        kernel_cache[(1, 2)](q)
"""


def test_a_kernel_whose_name_says_cache_is_still_a_launch(history: History) -> None:
    history.commit("attention", {"ops/attn.py": NO_CACHE_LAUNCH})
    changed = NO_CACHE_LAUNCH.replace("BLOCK_M // 2", "BLOCK_M").replace("kernel_cache[(1, 2)]", "kernel_cache[(1, 4)]")
    sha = history.commit("block n", {"ops/attn.py": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.LAUNCH_PARAM) == {
        "_fwd_kernel_no_prompt_cache[...] BLOCK_N": ("BLOCK_N (= BLOCK_M // 2)", "BLOCK_N (= BLOCK_M)")
    }


CONFIG_BUILDER = """\
    import triton


    def get_autotune_config(arch):
        configs = []
        configs.append(triton.Config({"BLOCK_K": 16}, num_warps=1))
        configs.append(triton.Config({"BLOCK_K": 64}, num_warps=2))
        if arch == 9:
            tile_n = [64, 128]
        elif arch == 10:
            tile_n = [128, 256]
        return configs, tile_n


    def unpack(x):
        parts = [1, 2]
        return parts
"""


def test_lists_a_tuning_function_builds_are_tables(history: History) -> None:
    history.commit("configs", {"ops/configs.py": CONFIG_BUILDER})
    changed = (
        CONFIG_BUILDER.replace(
            '        configs.append(triton.Config({"BLOCK_K": 64}',
            '        configs.append(triton.Config({"BLOCK_K": 32}, num_warps=1))\n'
            '        configs.append(triton.Config({"BLOCK_K": 64}',
        )
        .replace("tile_n = [128, 256]", "tile_n = [64, 128, 256]")
        .replace("parts = [1, 2]", "parts = [1, 2, 3]")
    )
    sha = history.commit("more configs", {"ops/configs.py": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.AUTOTUNE_CONFIG) == {
        "get_autotune_config.<locals>.configs[{'BLOCK_K': 32}]": (None, "num_warps=1")
    }
    assert rows(found, FindingKind.TABLE_ENTRY) == {
        "get_autotune_config.<locals>.tile_n": ("[128, 256]", "[64, 128, 256]")
    }


WARPS_MODULE = """\
    import triton
    from mylib.cache import cache_autotune

    IS_HOPPER = True
    NUM_WARPS = [2, 4] if IS_HOPPER else [2, 4, 8]


    @triton.autotune(configs=[triton.Config({}, num_warps=w) for w in NUM_WARPS], key=["BT"])
    @triton.jit
    def bwd_kernel(x, BT: tl.constexpr):
        pass


    @cache_autotune(configs=[triton.Config({}, num_warps=w) for w in [2, 4] if not IS_HOPPER], key=["BT"])
    @triton.jit
    def fwd_kernel(x, BT: tl.constexpr):
        pass
"""


def test_conditional_lists_wrapped_autotune_and_lists_an_autotune_comprehension_reads(history: History) -> None:
    history.commit("kernels", {"ops/wy.py": WARPS_MODULE})
    changed = (
        WARPS_MODULE.replace("[2, 4] if IS_HOPPER", "[2] if IS_HOPPER")
        .replace("if not IS_HOPPER]", "if not IS_HOPPER or w == 2]")
        .replace("IS_HOPPER = True\n", "IS_HOPPER = True\n    LAUNCH = {'num_warps': 1} if IS_HOPPER else {}\n")
    )
    sha = history.commit("hopper warps", {"ops/wy.py": changed})

    found = explain(history.path, sha).findings

    # a new conditional table (LAUNCH) is new code: its readers show it; a changed one is a row
    assert rows(found, FindingKind.TABLE_ENTRY) == {
        "NUM_WARPS": ("[2, 4] if IS_HOPPER else [2, 4, 8]", "[2] if IS_HOPPER else [2, 4, 8]")
    }
    assert {f.name for f in found if f.kind is FindingKind.AUTOTUNE_CONFIG} == {
        "bwd_kernel@triton.autotune",
        "fwd_kernel@cache_autotune",
    }
    assert not [f for f in found if f.kind is FindingKind.DISPATCH_LOGIC]


def test_an_env_variable_the_module_sets_is_a_gate_unless_the_process_owns_it(history: History) -> None:
    history.commit("utils", {"lib/utils.py": "import os\n\nis_nvidia = True\n"})
    sha = history.commit(
        "ieee",
        {
            "lib/utils.py": (
                "import os\n\nis_nvidia = True\nif is_nvidia:\n"
                "    os.environ['TRITON_F32_DEFAULT'] = 'ieee'\n    os.environ['PATH'] = '/opt/cuda/bin'\n"
            )
        },
    )

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.ENV_GATE) == {
        "TRITON_F32_DEFAULT": (None, "os.environ['TRITON_F32_DEFAULT'] = 'ieee' (in <module>)")
    }


SUPPORTS = """\
    import torch


    class FwOp:
        def supports(self, d):
            device_capability = torch.cuda.get_device_capability(d.device)
            return device_capability >= (7, 5)

        def __eq__(self, other):
            return self.dtype == other.dtype

        def shape_not_supported_reasons(self, K):
            reasons = []
            if K not in {16, 32, 64, 128}:
                reasons.append("K")
            return reasons
"""


def test_a_returned_arch_comparison_and_a_size_in_a_set_of_numbers_are_conditions(history: History) -> None:
    history.commit("op", {"ops/fmha.py": SUPPORTS})
    changed = (
        SUPPORTS.replace(">= (7, 5)", "== (8, 0)")
        .replace("self.dtype == other.dtype", "self.dtype is other.dtype")
        .replace("64, 128}", "64, 128, 256}")
    )
    sha = history.commit("sm80 only", {"ops/fmha.py": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.BRANCH_CONDITION) == {
        "FwOp.supports arch condition": ("device_capability >= (7, 5)", "device_capability == (8, 0)"),
        "FwOp.shape_not_supported_reasons shape condition": (
            "K not in {16, 32, 64, 128}",
            "K not in {16, 32, 64, 128, 256}",
        ),
    }


RENAMED = """\
    import triton


    @triton.heuristics({"EVEN": lambda args: args["T"] % 64 == 0})
    @triton.autotune(configs=[triton.Config({}, num_warps=w) for w in [2, 4]], key=["T"])
    @triton.jit
    def proprocess_qkw(q, T, EVEN: tl.constexpr):
        pass


    def run(q, T):
        proprocess_qkw[(T,)](q, T)
"""


def test_a_renamed_kernel_with_the_same_decorators_and_calls_is_no_change(history: History) -> None:
    history.commit("kernel", {"ops/h.py": RENAMED})
    retuned = RENAMED.replace("proprocess_qkw", "preprocess_qkw").replace("[2, 4]", "[4, 8]")
    sha = history.commit("rename and retune", {"ops/h.py": retuned})
    autotune = {f.name for f in explain(history.path, sha).table_findings if f.kind is FindingKind.AUTOTUNE_CONFIG}
    assert autotune == {"proprocess_qkw@triton.autotune", "preprocess_qkw@triton.autotune"}

    sha = history.commit("rename only", {"ops/h.py": retuned.replace("preprocess_qkw", "process_qkw")})
    assert explain(history.path, sha).table_findings == ()


LONG_CONDITION = """\
    import torch


    class DotProductAttention:
        def forward(self, query_layer, key_layer, value_layer):
            use_flash = True
            if (
                query_layer.dtype not in [torch.bfloat16, torch.float16]
                or key_layer.dtype not in [torch.bfloat16, torch.float16]
                or value_layer.dtype not in [torch.bfloat16, torch.float16]
                or (self.device_compute_capability == 8.6 and key_layer.shape[-1] > 64)
            ):
                use_flash = False
            if is_cdna():
                use_flash = False
            return use_flash
"""


def test_a_long_condition_changed_past_its_shown_length_and_amd_arch_predicates(history: History) -> None:
    history.commit("attention", {"te/attention.py": LONG_CONDITION})
    changed = LONG_CONDITION.replace("== 8.6", "in (8.6, 8.9)").replace("is_cdna()", "is_cdna3()")
    sha = history.commit("sm89", {"te/attention.py": changed})

    found = explain(history.path, sha).findings

    conditions = rows(found, FindingKind.BRANCH_CONDITION)
    assert set(conditions) == {"DotProductAttention.forward arch condition"}
    assert [(f.before, f.after) for f in found if f.after and "cdna" in f.after] == [("is_cdna()", "is_cdna3()")]
    long_row = next(f for f in found if f.after and "8.9" in f.after)
    assert long_row.before is not None
    assert long_row.before.startswith("...")
    assert "== 8.6" in long_row.before


OPS = """\
    import torch

    HAS_FAST = True
    BLOCK = 64


    class FwOp:
        SUPPORTED_MAX_K = 128
        _TEST_K = [128]


    class BwOp:
        SUPPORTED_MAX_K = FwOp.SUPPORTED_MAX_K
"""


def test_aliases_test_data_and_conditional_overrides_give_no_rows_of_their_own(history: History) -> None:
    history.commit("ops", {"ops/fmha.py": OPS})
    changed = (
        OPS.replace("SUPPORTED_MAX_K = 128", "SUPPORTED_MAX_K = 256")
        .replace("_TEST_K = [128]", "_TEST_K = [128, 256]")
        .replace(
            "BLOCK = 64\n",
            "BLOCK = 64\n    if torch.cuda.get_device_capability()[0] >= 12:\n        HAS_FAST = False\n",
        )
    )
    sha = history.commit("k 256", {"ops/fmha.py": changed})

    found = explain(history.path, sha).table_findings

    assert {(f.kind, f.name) for f in found} == {
        (FindingKind.CONSTANT, "FwOp.SUPPORTED_MAX_K"),
        (FindingKind.BRANCH_CONDITION, "<module>"),
    }


def test_an_env_membership_test_joined_by_or_is_not_read_with_a_default(history: History) -> None:
    source = "import os\n\n\ndef stats():\n    if 'NO_STATS' in os.environ or USE_SCOPE:\n        return None\n"
    history.commit("stats", {"lib/stats.py": source})
    changed = source.replace("USE_SCOPE", "os.environ.get('USE_SCOPE', '0') == '1'")
    sha = history.commit("scope from env", {"lib/stats.py": changed})

    found = explain(history.path, sha).findings

    assert {f.name for f in found if f.kind is FindingKind.ENV_GATE} == {"USE_SCOPE"}


def test_a_call_passing_tile_keywords_is_a_launch_and_a_config_object_or_tl_call_is_not(history: History) -> None:
    source = (
        "import triton\n\n\ndef gemm(a, b):\n"
        "    gemm_sm90(a, b, tile_M=128, tile_N=64, cluster_M=2)\n"
        "    sort_rows(a, block_size=32)\n"
        "    for i in tl.range(0, 4, num_stages=2):\n"
        "        pass\n"
        "    return triton.Config({}, num_warps=4)\n"
    )
    history.commit("gemm", {"ops/gemm.py": source})
    changed = (
        source.replace("tile_M=128", "tile_M=tile_m")
        .replace("num_warps=4", "num_warps=8")
        .replace("block_size=32", "block_size=64")
        .replace("num_stages=2", "num_stages=3")
    )
    sha = history.commit("tile m", {"ops/gemm.py": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.LAUNCH_PARAM) == {"gemm_sm90 tile_M": ("128", "tile_m")}


def test_a_native_flag_accumulated_with_a_size_comparison_is_a_condition(history: History) -> None:
    source = (
        "bool pick(int m, int block_m, int best) {\n"
        "    bool success = false;\n"
        "    success |= block_m != best;\n"
        "    return success;\n"
        "}\n"
    )
    history.commit("heuristic", {"csrc/heuristics.hpp": source})
    changed = source.replace("block_m != best;", "block_m != best\n               and block_m <= m;")
    sha = history.commit("not larger than m", {"csrc/heuristics.hpp": changed})

    found = explain(history.path, sha).findings

    assert [(f.label, f.before, f.after) for f in found if f.kind is FindingKind.NATIVE_THRESHOLD] == [
        ("pick condition on the batch size", None, "and block_m <= m;")
    ]


PREDICATE = """\
    import torch


    class Attention:
        def uses_mx(self):
            return self.dtype in [torch.float8_e4m3fn]

        def forward(self, key):
            if self.uses_mx():
                return key
            return None
"""


def test_a_dropped_predicate_gives_no_condition_row_of_its_own(history: History) -> None:
    history.commit("attention", {"ops/attn.py": PREDICATE})
    changed = PREDICATE.replace(
        "        def uses_mx(self):\n            return self.dtype in [torch.float8_e4m3fn]\n\n", ""
    ).replace("self.uses_mx()", "self.mx")
    sha = history.commit("inline", {"ops/attn.py": changed})
    assert rules_rows(history.path, sha) == []
    assert last_resort_functions(history.path, sha) == ["Attention.forward"]  # its changed branch test, no more


def test_only_top_level_definitions_whose_text_changed_are_scanned_for_sites() -> None:
    source = (
        "def same(x):\n    if x.shape[0] > 64:\n        return 1\n\n\n"
        "def edited(x):\n    if x.shape[0] > 64:\n        return 2\n"
    )
    before, after = scan_pair(
        parse_module(source), parse_module(source.replace("> 64:\n        return 2", "> 32:\n        return 2"))
    )

    assert before is not None
    assert after is not None
    assert set(before.sites.branches) == set(after.sites.branches) == {"edited"}
    assert set(before.functions) == {"same", "edited"}  # tables and function logic still see every function

    commented = (
        source.replace("return 1", "return 1  # one")
        .replace("def same(x):\n", 'def same(x):\n    """Doc."""\n')
        .replace("def edited(x):\n", "def edited(x):\n    # note\n")
    )
    before, after = scan_pair(parse_module(source), parse_module(commented))
    assert before is not None
    assert after is not None
    assert before.sites.branches == after.sites.branches == {}
