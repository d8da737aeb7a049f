"""Launch parameters, dispatch branch conditions and env-var gates in the static diff, on real git histories."""

from __future__ import annotations

import textwrap

from analysis_history import History

from bisector.analysis import Finding, FindingKind, explain, render_markdown, render_text
from bisector.analysis.dispatch_sites import condition_category
from bisector.analysis.explanation import Explanation

LAUNCHER = """\
    import os
    import torch
    import triton


    def is_hip():
        return torch.version.hip is not None


    def matmul(a, b):
        M, K = a.shape
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]),)
        num_warps = 4
        if M <= 64:
            _small_kernel[grid](a, b, M, num_warps=num_warps, num_stages=2, BLOCK_M=16)
        else:
            _big_kernel[(M // 128, 1)](a, b, M, num_warps=8, num_stages=3, BLOCK_M=128)
        return torch.ops.my_lib.scale(a, 1.0)


    def pick(x):
        if is_hip():
            return "hip"
        if x.dtype == torch.float16:
            return "fp16"
        if x.shape[0] > 4096:
            return "split"
        cache[key](x)
        return "default"
"""


def rows(findings: tuple[Finding, ...], kind: FindingKind) -> dict[str, tuple[str | None, str | None]]:
    return {f.label: (f.before, f.after) for f in findings if f.kind is kind}


def test_launch_keywords_grid_local_values_and_custom_op_arguments(history: History) -> None:
    history.commit("launcher", {"ops/matmul.py": LAUNCHER})
    after = (
        LAUNCHER.replace("num_warps = 4", "num_warps = 2 if K < 256 else 4")
        .replace("num_stages=3, BLOCK_M=128", "num_stages=4, BLOCK_M=128")
        .replace("(M // 128, 1)", "(M // 128, 2)")
        .replace("scale(a, 1.0)", "scale(a, 0.5)")
    )
    sha = history.commit("retune", {"ops/matmul.py": after})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.LAUNCH_PARAM) == {
        "_small_kernel[...] num_warps": ("num_warps (= 4)", "num_warps (= 2 if K < 256 else 4)"),
        "_big_kernel[...] grid": ("(M // 128, 1)", "(M // 128, 2)"),
        "_big_kernel[...] num_stages": ("3", "4"),
        "torch.ops.my_lib.scale arg1": ("1.0", "0.5"),
    }
    stages = next(f for f in found if f.key == "num_stages")
    assert (stages.detail, stages.line) == ("in matmul; when not (M <= 64)", 17)
    # the new conditional expression chooses num_warps by shape; cache[key](x) is no launch
    assert rows(found, FindingKind.BRANCH_CONDITION) == {"matmul shape condition": (None, "K < 256")}


def test_the_condition_that_chooses_a_launch_and_added_or_removed_launches(history: History) -> None:
    history.commit("launcher", {"ops/matmul.py": LAUNCHER})
    after = LAUNCHER.replace("if M <= 64:", "if M <= 128:").replace(
        "        return torch.ops.my_lib.scale(a, 1.0)\n", "        return a\n"
    )
    sha = history.commit("threshold", {"ops/matmul.py": after})

    found = explain(history.path, sha).findings

    launches = rows(found, FindingKind.LAUNCH_PARAM)
    assert launches["_small_kernel[...] condition"] == ("M <= 64", "M <= 128")
    assert launches["_big_kernel[...] condition"] == ("not (M <= 64)", "not (M <= 128)")
    assert launches["torch.ops.my_lib.scale launch"] == ("arg0=a, arg1=1.0", None)
    assert rows(found, FindingKind.BRANCH_CONDITION) == {"matmul shape condition": ("M <= 64", "M <= 128")}


def test_arch_dtype_and_shape_branch_conditions_before_and_after(history: History) -> None:
    history.commit("launcher", {"ops/matmul.py": LAUNCHER})
    after = (
        LAUNCHER.replace("if is_hip():", "if is_hip() or torch.cuda.get_device_capability()[0] < 8:")
        .replace("x.dtype == torch.float16", "x.element_size() == 2")
        .replace('        if x.shape[0] > 4096:\n            return "split"\n', "")
    )
    sha = history.commit("gates", {"ops/matmul.py": after, "tests/test_matmul.py": "if is_hip():\n    pass\n"})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.BRANCH_CONDITION) == {
        "pick arch condition": ("is_hip()", "is_hip() or torch.cuda.get_device_capability()[0] < 8"),
        "pick dtype condition": ("x.dtype == torch.float16", "x.element_size() == 2"),
        "pick shape condition": ("x.shape[0] > 4096", None),
    }
    assert all(f.file == "ops/matmul.py" for f in found if f.kind.is_dispatch_relevant)  # tests choose nothing


ENVS = """\
    import os

    environment_variables = {
        "LIB_USE_TC": lambda: bool(int(os.getenv("LIB_USE_TC", "1"))),
    }


    def use_fast_path():
        return os.environ.get("LIB_FAST_PATH", "0") == "1"
"""


def test_env_gates_added_removed_flipped_and_whether_the_bisect_sets_them(history: History) -> None:
    history.commit("envs", {"lib/envs.py": ENVS, "lib/ops.py": "from lib import envs\n\ndef run():\n    return 1\n"})
    after_envs = ENVS.replace('os.getenv("LIB_USE_TC", "1")', 'os.getenv("LIB_USE_TC", "0")').replace(
        'os.environ.get("LIB_FAST_PATH", "0") == "1"', "True"
    )
    ops = "from lib import envs\n\ndef run():\n    if envs.LIB_NEW_KERNEL:\n        return 2\n    return 1\n"
    sha = history.commit("flags", {"lib/envs.py": after_envs, "lib/ops.py": ops})

    found = explain(history.path, sha, env={"LIB_NEW_KERNEL": "1"}).findings  # the runner passes the test's env

    gates = {f.name: f for f in found if f.kind is FindingKind.ENV_GATE}
    assert set(gates) == {"LIB_USE_TC", "LIB_FAST_PATH", "LIB_NEW_KERNEL"}
    flipped = gates["LIB_USE_TC"]
    assert (flipped.before, flipped.after) == (
        "bool(int(os.getenv('LIB_USE_TC', '1'))) (in <module>)",
        "bool(int(os.getenv('LIB_USE_TC', '0'))) (in <module>)",
    )
    assert flipped.detail == "gate changed; the bisect's environment does not set it"
    removed = gates["LIB_FAST_PATH"]
    assert (removed.before, removed.after) == ("os.environ.get('LIB_FAST_PATH', '0') == '1' (in use_fast_path)", None)
    added = gates["LIB_NEW_KERNEL"]
    assert (added.before, added.after, added.file) == (None, "envs.LIB_NEW_KERNEL (in run)", "lib/ops.py")
    assert added.detail == "gate added; the bisect's environment sets LIB_NEW_KERNEL=1"
    branches = rows(tuple(found), FindingKind.BRANCH_CONDITION)
    assert branches == {"run env condition": (None, "envs.LIB_NEW_KERNEL")}


def test_the_new_rows_render_in_text_and_markdown(history: History) -> None:
    history.commit("launcher", {"ops/matmul.py": LAUNCHER})
    sha = history.commit("warps", {"ops/matmul.py": LAUNCHER.replace("num_warps=8", "num_warps=16")})

    explanation = Explanation(static=explain(history.path, sha))

    text = render_text(explanation, width=200)
    assert "ops/matmul.py:17  launch _big_kernel[...] num_warps: 8 -> 16  [in matmul; when not (M <= 64)]" in text
    assert "| launch `_big_kernel[...] num_warps` (in matmul; when not (M <= 64)) | 8 | 16 |" in render_markdown(
        explanation
    )


def test_condition_categories() -> None:
    import ast

    def category(text: str) -> str:
        return condition_category(ast.parse(text, mode="eval").body)

    assert category('os.environ.get("X") == "1"') == "env"
    assert category("torch.version.hip is not None") == "arch"
    assert category("props.major >= 9 and 'H100' in torch.cuda.get_device_name()") == "arch"
    assert category("a.dtype in (torch.float8_e4m3fn,)") == "dtype"
    assert category("batch_size <= 16") == "shape"
    assert category("y.size > 0x7fffffff // 1024") == "shape"  # numpy's size, a limit written as arithmetic
    assert category("size <= 1 << 20") == "shape"
    assert category("y.size > limit") == ""
    assert category("x is None") == ""
    assert category("len(configs) > 0") == ""


def test_moved_reads_and_conditions_are_not_changes_and_an_or_default_is_part_of_the_gate(history: History) -> None:
    before = """\
        import os


        def threads():
            return os.getenv("NVCC_THREADS") or "2"


        def pick(x):
            if x.shape[0] > 4096:
                return "split"
            if x.dtype == torch.float16:
                return "fp16"
            return "default"
    """
    before = textwrap.dedent(before)
    history.commit("build", {"setup.py": before})
    moved = before.replace('    return os.getenv("NVCC_THREADS") or "2"', "    return THREADS").replace(
        "import os\n", 'import os\n\nTHREADS = os.getenv("NVCC_THREADS") or "2"\n'
    )
    moved = moved.replace(
        '    if x.shape[0] > 4096:\n        return "split"\n    if x.dtype == torch.float16:\n        return "fp16"\n',
        '    if x.dtype == torch.float16:\n        return "fp16"\n    if x.shape[0] > 4096:\n        return "split"\n',
    )
    sha = history.commit("move", {"setup.py": moved})
    assert explain(history.path, sha).table_findings == ()

    flipped = history.commit("flip", {"setup.py": moved.replace('or "2"', 'or "4"')})
    (gate,) = explain(history.path, flipped).table_findings
    assert (gate.kind, gate.before, gate.after) == (
        FindingKind.ENV_GATE,
        "os.getenv('NVCC_THREADS') or '2' (in <module>)",
        "os.getenv('NVCC_THREADS') or '4' (in <module>)",
    )


def test_a_table_bound_in_both_branches_of_a_module_if_is_kept_per_branch(history: History) -> None:
    before = """\
        import torch
        import triton

        if torch.version.hip is not None:
            CONFIGS = [triton.Config({"BLOCK": 64}, num_warps=4)]
        else:
            CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=4)]
    """
    history.commit("configs", {"ops/configs.py": before})
    sha = history.commit(
        "hip", {"ops/configs.py": before.replace('{"BLOCK": 64}, num_warps=4', '{"BLOCK": 64}, num_warps=8')}
    )

    (row,) = explain(history.path, sha).table_findings
    assert (row.kind, row.label, row.before, row.after) == (
        FindingKind.AUTOTUNE_CONFIG,
        "CONFIGS (if torch.version.hip is not None)[{'BLOCK': 64}]",
        "num_warps=4",
        "num_warps=8",
    )


def test_ci_workflows_are_not_tuning_files_and_a_dtype_name_in_a_class_is_no_dtype_condition(history: History) -> None:
    code = "X = 1\n\ndef same(self, other):\n    if isinstance(other, Float8TrainingConfig):\n        return True\n"
    history.commit("ci", {".github/workflows/ci.yml": "jobs:\n  a: 1\n", "lib/config.py": "X = 1\n"})
    sha = history.commit("ci", {".github/workflows/ci.yml": "jobs:\n  a: 2\n", "lib/config.py": code})

    assert explain(history.path, sha).table_findings == ()


def test_a_function_named_by_a_launch_or_condition_row_has_no_separate_dispatch_logic_row(history: History) -> None:
    history.commit("launcher", {"ops/matmul.py": "LIMIT = 64\n" + textwrap.dedent(LAUNCHER)})
    after = "LIMIT = 64\n" + textwrap.dedent(LAUNCHER).replace("if M <= 64:", "if M <= LIMIT:")

    sha = history.commit("limit", {"ops/matmul.py": after})

    kinds = {(f.kind, f.name) for f in explain(history.path, sha).table_findings}
    assert (FindingKind.BRANCH_CONDITION, "matmul") in kinds
    assert (FindingKind.DISPATCH_LOGIC, "matmul") not in kinds


def test_test_files_are_not_read_and_a_blob_the_repository_lacks_is_a_note(history: History) -> None:
    history.commit("start", {"ops/table.json": '{"a": 1}\n', "tests/fixture.json": '{"a": 1}\n'})
    sha = history.commit("change", {"ops/table.json": '{"a": 2}\n', "tests/fixture.json": '{"a": 2}\n'})
    blob = history.git("rev-parse", f"{sha}:ops/table.json")
    (history.path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # as a partial clone lacks it

    diff = explain(history.path, sha)

    assert diff.table_findings == ()
    (note,) = diff.notes
    assert (note.file, note.name) == ("ops/table.json", "not analysed")
    assert note.detail.startswith(f"unreadable at {sha[:12]}")


def test_a_variable_named_by_a_module_constant_and_launch_keywords_passed_as_a_dict(history: History) -> None:
    before = "import os\n\nGPU_ENV = 'LIB_GPU'\n\n\ndef run(x, grid):\n    _k[grid](x, num_warps=4)\n"
    history.commit("start", {"lib/run.py": before})
    after = (
        "import os\n\nGPU_ENV = 'LIB_GPU'\nTUNED = {'num_stages': 1}\n\n\n"
        "def name():\n    return os.environ.get(GPU_ENV)\n\n\n"
        "def run(x, grid):\n    _k[grid](x, num_warps=4, **TUNED)\n"
    )
    sha = history.commit("override", {"lib/run.py": after})

    found = explain(history.path, sha).table_findings

    assert rows(found, FindingKind.ENV_GATE) == {"LIB_GPU": (None, "os.environ.get(GPU_ENV) (in name)")}
    assert rows(found, FindingKind.LAUNCH_PARAM) == {"_k[...] **": (None, "TUNED")}


GATED = """\
import torch
from lib.utils import arch_info, launch

tuned_decode = arch_info.get_arch() == "gfx950"
DEFAULT_WARPS = 4


def decode(q, out):
    warps = 1 if tuned_decode else DEFAULT_WARPS
    low_precision = q.dtype == torch.float8_e4m3fn
    if low_precision:
        return launch(q, out, warps, "fp8")
    return launch(q, out, warps, "bf16")
"""


def test_a_condition_kept_in_a_name_is_a_gate_where_it_is_made_and_where_it_is_read(history: History) -> None:
    history.commit("decode", {"ops/decode.py": GATED})
    last = '    return launch(q, out, warps, "bf16")'
    after = (
        GATED.replace('get_arch() == "gfx950"', 'get_arch() in ("gfx950", "gfx942")')
        .replace("q.dtype == torch.float8_e4m3fn", "q.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)")
        .replace(last, "    if tuned_decode and not low_precision:\n        warps = 2\n" + last)
    )
    sha = history.commit("tune decode on gfx942 too", {"ops/decode.py": after})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.BRANCH_CONDITION) == {
        "<module> arch condition": (
            "tuned_decode = arch_info.get_arch() == 'gfx950'",
            "tuned_decode = arch_info.get_arch() in ('gfx950', 'gfx942')",
        ),
        "decode dtype condition": (
            "low_precision = q.dtype == torch.float8_e4m3fn",
            "low_precision = q.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)",
        ),
        "decode arch condition": (None, "tuned_decode and (not low_precision)"),
    }
    read = next(f for f in found if f.label == "decode arch condition")
    assert read.detail == (
        "where tuned_decode = arch_info.get_arch() in ('gfx950', 'gfx942'); "
        "low_precision = q.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)"
    )


def test_a_condition_kept_in_a_local_no_code_reads_is_no_row(history: History) -> None:
    history.commit("decode", {"ops/decode.py": GATED})
    unused = "    capability = torch.cuda.get_device_capability()\n    big = q.shape[0] > 4096\n"
    read = "    major = torch.cuda.get_device_capability()[0]\n    warps = 8 if major >= 9 else warps\n"
    after = GATED.replace("    low_precision =", unused + read + "    low_precision =")
    sha = history.commit("query the device", {"ops/decode.py": after})

    found = explain(history.path, sha).findings

    assert sorted((f.label, f.after) for f in found if f.kind is FindingKind.BRANCH_CONDITION) == [
        ("decode arch condition", "major = torch.cuda.get_device_capability()[0]"),
        ("decode arch condition", "major >= 9"),
    ]


def test_where_the_arch_comes_from_is_an_arch_condition_a_device_name_is_not(history: History) -> None:
    source = """\
import torch


def dequantize(w):
    major, minor = torch.cuda.get_device_capability()
    device_arch = f"{major * 10 + minor}"
    return get_module(device_arch).dequantize(w)


def cache_key(bench):
    gpu = get_device_name(bench.device)
    return (gpu, bench.name)
"""
    history.commit("fp4", {"ops/fp4.py": source})
    after = source.replace("torch.cuda.get_device_capability()", "get_compute_capability(w.device)")
    sha = history.commit("the weight's device", {"ops/fp4.py": after.replace("get_device_name(", "gpu_name(")})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.BRANCH_CONDITION) == {
        "dequantize arch condition": (
            "major, minor = torch.cuda.get_device_capability()",
            "major, minor = get_compute_capability(w.device)",
        )
    }


def test_loop_and_filter_conditions_of_a_config_pruner_are_branch_conditions(history: History) -> None:
    source = """\
def prune(configs, M, smem):
    kept = [c for c in configs if c.kwargs["BLOCK_M"] <= M]
    for config in kept:
        num_stages = config.num_stages
        while num_stages > 0 and config.kwargs["BLOCK_K"] * num_stages > smem:
            num_stages -= 1
    return kept
"""
    history.commit("pruner", {"ops/prune.py": source})
    after = source.replace('c.kwargs["BLOCK_M"] <= M]', 'c.kwargs["BLOCK_M"] <= 2 * M]').replace(
        "num_stages > 0 and", "num_stages > 1 and"
    )
    sha = history.commit("keep bigger tiles, at least two stages", {"ops/prune.py": after})

    found = explain(history.path, sha).findings

    assert {(f.before, f.after) for f in found if f.kind is FindingKind.BRANCH_CONDITION} == {
        ("c.kwargs['BLOCK_M'] <= M", "c.kwargs['BLOCK_M'] <= 2 * M"),
        (
            "num_stages > 0 and config.kwargs['BLOCK_K'] * num_stages > smem",
            "num_stages > 1 and config.kwargs['BLOCK_K'] * num_stages > smem",
        ),
    }
