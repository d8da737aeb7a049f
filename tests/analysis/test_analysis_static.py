"""Static table diff against real git histories."""

from __future__ import annotations

import pytest
from analysis_history import History

from bisector.analysis import Finding, FindingKind, StaticDiff, explain
from bisector.vocab.errors import RepoError

GEMM_BEFORE = """\
    SIMT_ONLY = 1 << 30

    # MMA from this m upward, per (N, K).
    _TUNED_MMA_MIN_M: dict[tuple[int, int], int] = {
        (128, 512): SIMT_ONLY,
        (144, 7168): SIMT_ONLY,
        (256, 7168): 8,
        (896, 7168): SIMT_ONLY,
        (1536, 128): SIMT_ONLY,
    }
    _MMA_TILE_M = 16


    def cost_model(n, k):
        return _MMA_TILE_M * 2


    def threshold_for(n, k):
        return _TUNED_MMA_MIN_M.get((n, k), cost_model(n, k))


    def unrelated(x):
        return x + 1
"""


def rows(diff: StaticDiff) -> dict[str, str]:
    return {f.label: f.change_text for f in diff.findings if f.kind.is_dispatch_relevant}


def test_dict_rows_with_resolved_names(history: History) -> None:
    history.commit("gemm", {"kernels/tiny_gemm.py": GEMM_BEFORE})
    after = (
        GEMM_BEFORE.replace("(144, 7168): SIMT_ONLY", "(144, 7168): 2")
        .replace("(896, 7168): SIMT_ONLY", "(896, 7168): 2")
        .replace("(1536, 128): SIMT_ONLY,", "(1536, 128): 2,\n        (2048, 64): 4,")
        .replace("(128, 512): SIMT_ONLY,\n", "")
        .replace("_TUNED_MMA_MIN_M.get((n, k), cost_model(n, k))", "_TUNED_MMA_MIN_M.get((n, k)) or cost_model(n, k)")
        .replace("return x + 1", "return x + 2")
    )
    sha = history.commit("Move Kimi shapes to MMA (#47683)", {"kernels/tiny_gemm.py": after})

    diff = explain(history.path, sha)

    assert diff.sha == sha
    assert diff.files == ("kernels/tiny_gemm.py",)
    assert rows(diff) == {
        "_TUNED_MMA_MIN_M[(128, 512)]": "SIMT_ONLY (1073741824) -> (absent)",
        "_TUNED_MMA_MIN_M[(144, 7168)]": "SIMT_ONLY (1073741824) -> 2",
        "_TUNED_MMA_MIN_M[(896, 7168)]": "SIMT_ONLY (1073741824) -> 2",
        "_TUNED_MMA_MIN_M[(1536, 128)]": "SIMT_ONLY (1073741824) -> 2",
        "_TUNED_MMA_MIN_M[(2048, 64)]": "(absent) -> 4",
    }
    row = next(f for f in diff.findings if f.key == "[(144, 7168)]")
    assert (row.file, row.name, row.line, row.kind) == ("kernels/tiny_gemm.py", "_TUNED_MMA_MIN_M", 5, "table_entry")


def test_a_changed_constant_is_a_row_and_its_readers_are_not_flagged_unless_they_change(history: History) -> None:
    history.commit("gemm", {"kernels/tiny_gemm.py": GEMM_BEFORE})
    sha = history.commit("tile", {"kernels/tiny_gemm.py": GEMM_BEFORE.replace("_MMA_TILE_M = 16", "_MMA_TILE_M = 32")})

    assert rows(explain(history.path, sha)) == {"_MMA_TILE_M": "16 -> 32"}


def test_tuples_nested_tables_sets_and_class_level_tables(history: History) -> None:
    before = """\
        _BLOCKS = (16, 32, 64)
        _SHAPES = [(144, 7168), (896, 7168)]
        _PER_DEVICE = {
            "h100": {"mma_min_m": 8, "tiles": (16, 64)},
            "b300": {"mma_min_m": 4, "tiles": (16, 64)},
        }
        _ARCHS = {"sm90", "sm100"}
        TABLE = dict({"a": 1})

        class Dispatcher:
            THRESHOLDS = {"moe": 4}

            def pick(self, m):
                return m >= self.THRESHOLDS["moe"]
    """
    after = """\
        _BLOCKS = (16, 32, 64, 128)
        _SHAPES = [(144, 7168), (1536, 128), (896, 7168)]
        _PER_DEVICE = {
            "h100": {"mma_min_m": 8, "tiles": (16, 128)},
            "b300": {"mma_min_m": 2, "tiles": (16, 64)},
            "h200": {"mma_min_m": 8},
        }
        _ARCHS = {"sm100", "sm90"}
        TABLE = dict({"a": 2})

        class Dispatcher:
            THRESHOLDS = {"moe": 2}

            def pick(self, m):
                return m > self.THRESHOLDS["moe"]
    """
    history.commit("tables", {"dispatch.py": before})
    sha = history.commit("retune", {"dispatch.py": after})

    assert rows(explain(history.path, sha)) == {
        "_BLOCKS": "(16, 32, 64) -> (16, 32, 64, 128)",
        "_SHAPES[1]": "(absent) -> (1536, 128)",
        "_PER_DEVICE['h100']['tiles']": "(16, 64) -> (16, 128)",
        "_PER_DEVICE['b300']['mma_min_m']": "4 -> 2",
        "_PER_DEVICE['h200']['mma_min_m']": "(absent) -> 8",
        "TABLE['a']": "1 -> 2",
        "Dispatcher.THRESHOLDS['moe']": "4 -> 2",
    }


def test_arithmetic_is_folded_and_what_is_not_literal_compares_by_source(history: History) -> None:
    history.commit("a", {"k.py": "import torch\nBIG = 2**20\nTABLE = {torch.float16: BIG - 1, 'f': len('x')}\n"})
    sha = history.commit("b", {"k.py": "import torch\nBIG = 2**21\nTABLE = {torch.float16: BIG - 1, 'f': len('y')}\n"})

    assert rows(explain(history.path, sha)) == {
        "BIG": "2 ** 20 (1048576) -> 2 ** 21 (2097152)",
        "TABLE[torch.float16]": "BIG - 1 (1048575) -> BIG - 1 (2097151)",
        "TABLE['f']": "len('x') -> len('y')",
    }


AUTOTUNED = """\
    import triton
    import triton.language as tl

    _CONFIGS = [
        triton.Config({"BLOCK_M": 16, "BLOCK_N": 64}, num_warps=4, num_stages=2),
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 64}, num_warps=4, num_stages=3),
    ]


    @triton.autotune(
        configs=[
            triton.Config({"BLOCK_M": 16, "BLOCK_N": 32}, num_warps=2),
            triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=8),
        ],
        key=["M", "N"],
    )
    @triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
    @triton.jit
    def matmul_kernel(a_ptr, M, N, K, BLOCK_M: tl.constexpr):
        pass


    @triton.autotune(configs=_CONFIGS, key=["N"])
    @triton.jit
    def gemv_kernel(a_ptr, N):
        pass
"""


def test_triton_autotune_configs_and_heuristics_without_importing_triton(history: History) -> None:
    after = (
        AUTOTUNED.replace('{"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=8', '{"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4')
        .replace('key=["M", "N"]', 'key=["M", "N", "K"]')
        .replace('args["K"] % args["BLOCK_K"] == 0', 'args["K"] % (2 * args["BLOCK_K"]) == 0')
        .replace(
            "num_warps=4, num_stages=3),\n",
            'num_warps=4, num_stages=3),\n    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=8),\n',
        )
    )
    history.commit("kernels", {"ops/matmul.py": AUTOTUNED})
    sha = history.commit("retune", {"ops/matmul.py": after})

    diff = explain(history.path, sha)

    assert rows(diff) == {
        "_CONFIGS[{'BLOCK_M': 64, 'BLOCK_N': 64}]": "(absent) -> num_warps=8",
        "matmul_kernel@triton.autotune[configs][{'BLOCK_M': 64, 'BLOCK_N': 32}]": "num_warps=8 -> num_warps=4",
        "matmul_kernel@triton.autotune[key]": "['M', 'N'] -> ['M', 'N', 'K']",
        "matmul_kernel@triton.heuristics['EVEN_K']": (
            "lambda args: args['K'] % args['BLOCK_K'] == 0 -> lambda args: args['K'] % (2 * args['BLOCK_K']) == 0"
        ),
        "gemv_kernel@triton.autotune[configs][{'BLOCK_M': 64, 'BLOCK_N': 64}]": "(absent) -> num_warps=8",
    }
    kinds = {f.label: f.kind for f in diff.findings}
    assert kinds["_CONFIGS[{'BLOCK_M': 64, 'BLOCK_N': 64}]"] is FindingKind.AUTOTUNE_CONFIG
    assert kinds["matmul_kernel@triton.autotune[key]"] is FindingKind.AUTOTUNE_CONFIG
    assert kinds["matmul_kernel@triton.heuristics['EVEN_K']"] is FindingKind.HEURISTIC


def test_json_yaml_and_toml_tuning_files_are_keyed(history: History) -> None:
    history.commit(
        "configs",
        {
            "configs/E=8,N=14336,device_name=NVIDIA_H200.json": '{"1": {"BLOCK_SIZE_M": 16, "num_warps": 4},'
            ' "8": {"BLOCK_SIZE_M": 16, "num_warps": 4}}',
            "configs/b300.yaml": "gemm:\n  '144x7168': {mma_min_m: 1073741824}\n  '896x7168': {mma_min_m: 8}\n",
            "configs/limits.toml": "[decode]\nmax_m = 8\n",
        },
    )
    sha = history.commit(
        "retune",
        {
            "configs/E=8,N=14336,device_name=NVIDIA_H200.json": '{"1": {"BLOCK_SIZE_M": 16, "num_warps": 4},\n'
            ' "8": {"BLOCK_SIZE_M": 32, "num_warps": 4}, "16": {"BLOCK_SIZE_M": 64, "num_warps": 8}}',
            "configs/b300.yaml": "gemm:\n  '144x7168': {mma_min_m: 2}\n  '896x7168': {mma_min_m: 8}\n",
            "configs/limits.toml": "[decode]\nmax_m = 4\n",
        },
    )

    diff = explain(history.path, sha)

    by_file: dict[str, dict[str, str]] = {}
    for finding in diff.findings:
        assert finding.kind is FindingKind.TUNING_FILE
        by_file.setdefault(finding.file, {})[finding.label] = finding.change_text
    assert by_file == {
        "configs/E=8,N=14336,device_name=NVIDIA_H200.json": {
            '["8"]["BLOCK_SIZE_M"]': "16 -> 32",
            '["16"]["BLOCK_SIZE_M"]': "(absent) -> 64",
            '["16"]["num_warps"]': "(absent) -> 8",
        },
        "configs/b300.yaml": {'["gemm"]["144x7168"]["mma_min_m"]': "1073741824 -> 2"},
        "configs/limits.toml": {'["decode"]["max_m"]': "8 -> 4"},
    }


def test_a_renamed_file_is_diffed_against_its_old_path(history: History) -> None:
    padding = ", ".join(f'"row{i}": {i}' for i in range(20))
    history.commit("gemm", {"kernels/gemm.py": GEMM_BEFORE, "configs/a.json": f'{{"m": 1, {padding}}}'})
    sha = history.commit(
        "move",
        {
            "kernels/tiny_gemm.py": GEMM_BEFORE.replace("(256, 7168): 8", "(256, 7168): 4"),
            "configs/b.json": f'{{"m": 2, {padding}}}',
        },
        renames={"kernels/gemm.py": "kernels/tiny_gemm.py", "configs/a.json": "configs/b.json"},
    )

    diff = explain(history.path, sha)

    assert rows(diff) == {"_TUNED_MMA_MIN_M[(256, 7168)]": "8 -> 4", '["m"]': "1 -> 2"}
    assert {(n.file, n.name, n.before) for n in diff.notes} == {
        ("kernels/tiny_gemm.py", "renamed", "kernels/gemm.py"),
        ("configs/b.json", "renamed", "configs/a.json"),
    }


def test_a_file_that_does_not_parse_in_one_version_gives_a_note(history: History) -> None:
    first = history.commit("ok", {"k.py": "T = {1: 2}\n", "c.json": '{"a": 1}', "d.yaml": "a: 1\n", "ok.py": "X = 1\n"})
    broken = history.commit(
        "broken", {"k.py": "T = {1: 3\n", "c.json": '{"a": 2', "d.yaml": "a: [1\n", "ok.py": "X = 2\n"}
    )

    diff = explain(history.path, broken)

    assert rows(diff) == {"X": "1 -> 2"}
    notes = {n.file: n.detail for n in diff.notes}
    assert notes["k.py"].startswith(f"does not parse at {broken[:12]}: line 1")
    assert notes["c.json"].startswith(f"does not parse at {broken[:12]}:")
    assert notes["d.yaml"].startswith(f"does not parse at {broken[:12]}:")
    fixed = history.commit("fixed", {"k.py": "T = {1: 4}\n"})
    assert explain(history.path, fixed).notes[0].detail.startswith(f"does not parse at {broken[:12]}")
    assert rows(explain(history.path, fixed, parent=first)) == {"T[1]": "2 -> 4", "X": "1 -> 2"}


def test_binary_and_oversized_files_are_skipped_with_a_note(history: History) -> None:
    history.commit("a", {"blob.json": b"\x00\x01", "big.py": "T = {1: 1}\n" + "X = 1\n" * 100})
    sha = history.commit("b", {"blob.json": b"\x00\x02", "big.py": "T = {1: 2}\n" + "X = 1\n" * 100})

    diff = explain(history.path, sha, max_file_bytes=500)

    assert not diff.table_findings
    assert {(n.file, n.detail.split(" at ")[0]) for n in diff.notes} == {
        ("blob.json", "binary"),
        ("big.py", "611 bytes"),
    }


def test_a_culprit_with_no_table_change_says_so(history: History) -> None:
    history.commit("a", {"README.md": "hi\n", "kernels/tiny_gemm.py": GEMM_BEFORE})
    sha = history.commit(
        "docs",
        {"README.md": "hello\n", "kernels/tiny_gemm.py": GEMM_BEFORE.replace("return x + 1", "return x + 2")},
    )

    diff = explain(history.path, sha)

    assert diff.files == ("README.md", "kernels/tiny_gemm.py")
    assert diff.findings == ()
    assert not diff.changes_dispatch


def test_a_file_added_or_removed_whole_is_a_note_unless_its_path_says_tuning(history: History) -> None:
    root = history.commit("root", {"k.py": "T = {1: 2}\n", "csrc/old.cu": "const int kTile = 16;\n"})
    sha = history.commit(
        "swap",
        {
            "k.py": None,
            "csrc/old.cu": None,
            "n.py": "LIMIT = 4\n",
            "ops/configs/gfx950-GEMM-N=1024.json": '{"BLOCK_M": 64, "num_warps": 4}\n',
            "cub/tuning/tuning_scan.cuh": "constexpr int items_per_thread = 15;\n",
            "ops/autotune_configs.py": "CONFIGS = [dict(BLOCK=64)]\n",
        },
    )

    first = explain(history.path, root)
    assert first.parent is None
    assert rows(first) == {}
    assert {(n.file, n.name) for n in first.notes} == {("k.py", "added whole"), ("csrc/old.cu", "added whole")}
    diff = explain(history.path, sha)
    assert rows(diff) == {
        '["BLOCK_M"]': "(absent) -> 64",
        '["num_warps"]': "(absent) -> 4",
        "items_per_thread": "(absent) -> 15",
        "CONFIGS[0]": "(absent) -> {'BLOCK': 64}",
    }
    assert {(n.file, n.name) for n in diff.notes} == {
        ("k.py", "removed whole"),
        ("csrc/old.cu", "removed whole"),
        ("n.py", "added whole"),
    }
    assert len(diff.files) == 6


def test_tool_and_package_settings_are_no_tuning_files(history: History) -> None:
    settings = {
        "pyproject.toml": '[project]\ndependencies = ["triton==3.4"]\n',
        ".github/workflows/ci.yml": "jobs:\n  test:\n    runs-on: ubuntu-22.04\n",
        "environment.yml": "dependencies:\n  - cuda=12.4\n",
        "ops/configs/gemm.yaml": "BLOCK_M: 64\n",
    }
    history.commit("settings", settings)
    sha = history.commit("bump", {path: text.replace("3.4", "3.5").replace("22.04", "24.04").replace("12.4", "12.8")
                                  .replace("64", "128") for path, text in settings.items()})  # fmt: skip

    diff = explain(history.path, sha)

    assert {(f.file, f.label, f.change_text) for f in diff.table_findings} == {
        ("ops/configs/gemm.yaml", '["BLOCK_M"]', "64 -> 128")
    }


def test_many_files_removed_whole_give_one_note_per_directory(history: History) -> None:
    vendored = {f"third_party/libfoo/src/f{i}.cpp": f"const int k{i} = {i};\n" for i in range(30)}
    vendored |= {f"third_party/libfoo/utils/u{i}.py": f"LIMIT_{i} = {i}\n" for i in range(5)}
    history.commit("vendor", {**vendored, "kernels/gemm.py": "TILE = 16\n"})
    sha = history.commit("drop the vendored library", {**dict.fromkeys(vendored), "kernels/gemm.py": "TILE = 32\n"})

    diff = explain(history.path, sha)

    assert rows(diff) == {"TILE": "16 -> 32"}
    assert {(n.file, n.name) for n in diff.notes} == {("third_party/libfoo/", "35 files removed whole")}
    assert diff.changed_file_count == 36


NATIVE = """\
    // dispatch thresholds
    #define MMA_MIN_M 8
    static constexpr int kTileM[4] = {16, 16, 32, 64};
    __constant__ int kConfigs[2][3] = {
        {16, 64, 4},  // small m
        {32, 64, 8},
    };

    int pick_kernel(int m, int n) {
        if (m <= 4) {
            return 0;
        }
        switch (m) {
            case 1: return 0;
            case 8: return 1;
        }
        switch (n) {
            case 64: return 2;
        }
        return m > 16 ? 1 : 0;
    }
"""


def test_native_constant_arrays_defines_and_batch_size_thresholds(history: History) -> None:
    history.commit("cuda", {"csrc/gemm.cu": NATIVE})
    after = (
        NATIVE.replace("MMA_MIN_M 8", "MMA_MIN_M 2")
        .replace("{16, 16, 32, 64}", "{16, 32, 32, 64}")
        .replace("{32, 64, 8}", "{32, 128, 8}")
        .replace("m <= 4", "m <= 1")
        .replace("case 8:", "case 2:")
        .replace("case 64:", "case 128:")
    )
    sha = history.commit("retune", {"csrc/gemm.cu": after})

    diff = explain(history.path, sha)

    assert [(f.kind.value, f.line, f.label, f.change_text) for f in diff.findings] == [
        ("native_array", 3, "kTileM", "{16, 16, 32, 64} -> {16, 32, 32, 64}"),
        ("native_array", 6, "kConfigs[1]", "{32, 64, 8} -> {32, 128, 8}"),
        ("native_threshold", 2, "MMA_MIN_M macro", "8 -> 2"),
        ("dispatch_logic", 10, "pick_kernel condition on the batch size", "if (m <= 4) { -> if (m <= 1) {"),
        ("dispatch_logic", 15, "pick_kernel case of switch (m)", "case 8: return 1; -> case 2: return 1;"),
    ]  # pick_kernel returns a choice: its conditions are decisions of a dispatch function (native_choosers.py)


def test_native_conditions_of_several_files_and_of_a_quoted_path(history: History) -> None:
    files = {"csrc/gemm.cu": NATIVE, "csrc/sub dir/attn.cuh": NATIVE, "csrc/naïve.cu": NATIVE}
    history.commit("cuda", files)
    sha = history.commit("retune", {path: text.replace("m <= 4", "m <= 1") for path, text in files.items()})

    conditions = [f for f in explain(history.path, sha).findings if f.key == "condition on the batch size"]

    assert sorted((f.file, f.line, f.change_text) for f in conditions) == [
        (path, 10, "if (m <= 4) { -> if (m <= 1) {") for path in sorted(files)
    ]


ARCH_DTYPE = """\
    template <typename T>
    int pick(int cc) {
    #if __CUDA_ARCH__ >= 900
      return 1;
    #endif
      if constexpr (std::is_same_v<T, half>) {
        return 2;
      }
      if (cc >= 80) {
        return 3;
      }
      return 0;
    }
"""


def test_native_conditions_on_the_arch_and_the_dtype(history: History) -> None:
    history.commit("pick", {"csrc/pick.cuh": ARCH_DTYPE})
    after = ARCH_DTYPE.replace(">= 900", ">= 1000").replace("T, half>", "T, __nv_bfloat16>").replace(">= 80", ">= 89")
    sha = history.commit("retarget", {"csrc/pick.cuh": after})

    assert [(f.line, f.label, f.change_text) for f in explain(history.path, sha).table_findings] == [
        (3, "pick condition on the arch", "#if __CUDA_ARCH__ >= 900 -> #if __CUDA_ARCH__ >= 1000"),
        (
            6,
            "pick condition on the dtype",
            "if constexpr (std::is_same_v<T, half>) { -> if constexpr (std::is_same_v<T, __nv_bfloat16>) {",
        ),
        (9, "pick condition on the arch", "if (cc >= 80) { -> if (cc >= 89) {"),
    ]


POLICY = """\
    #include <cub/util_math.cuh>

    constexpr int nominal_4b_items_to_items(int items, int size) { return items * 4 / size; }

    struct policy_selector {
      int key_size;
      constexpr auto operator()(int cc) const -> policy {
        const int ipt_800 = nominal_4b_items_to_items(15, key_size);
        if (cc >= 800) {
          return policy{256, ipt_800};
        }
        const int ipt_600 = nominal_4b_items_to_items(13, key_size);
        return policy{512, ipt_600};
      }
    };
"""


def test_native_renamed_helper_and_derived_locals_are_no_rows_a_changed_literal_is(history: History) -> None:
    history.commit("policy", {"cub/dispatch/policy_merge.cuh": POLICY})
    after = (
        POLICY.replace(
            "constexpr int nominal_4b_items_to_items(int items, int size) { return items * 4 / size; }\n", ""
        )
        .replace("nominal_4b_items_to_items(15", "nominal_4B_items_to_items(15")
        .replace("nominal_4b_items_to_items(13", "nominal_4B_items_to_items(17")
        .replace("    if (cc >= 800) {", "    constexpr int alignment = alignof(T) * vec_size;\n    if (cc >= 800) {")
        .replace("  int key_size;", "  int key_size;\n  static constexpr int min_items = 2;")
    )
    sha = history.commit("Drop the obsolete helper; retune sm60", {"cub/dispatch/policy_merge.cuh": after})

    assert rows(explain(history.path, sha)) == {
        "ipt_600": "nominal_4b_items_to_items(13, key_size) -> nominal_4B_items_to_items(17, key_size)",
        "policy_selector::min_items": "(absent) -> 2",
    }
    # another helper (a new name, not the old one spelled differently) is a change
    other = history.commit(
        "swap the helper",
        {"cub/dispatch/policy_merge.cuh": after.replace("nominal_4B_items_to_items(15", "items_v2(15")},
    )
    assert rows(explain(history.path, other)) == {
        "ipt_800": "nominal_4B_items_to_items(15, key_size) -> items_v2(15, key_size)"
    }


def test_unknown_revision_is_a_repo_error(history: History) -> None:
    history.commit("a", {"k.py": "X = 1\n"})
    with pytest.raises(RepoError, match="unknown revision"):
        explain(history.path, "no-such-branch")


def test_findings_round_trip_through_json_and_store_rows(history: History) -> None:
    history.commit("gemm", {"kernels/tiny_gemm.py": GEMM_BEFORE, "x.json": "{"})
    sha = history.commit(
        "tune", {"kernels/tiny_gemm.py": GEMM_BEFORE.replace("(144, 7168): SIMT_ONLY", "(144, 7168): 2")}
    )
    diff = explain(history.path, sha)

    assert all(Finding.from_json(f.to_json()) == f for f in diff.findings)
    rebuilt = StaticDiff.from_findings(diff.to_findings())
    assert rebuilt is not None
    assert (rebuilt.sha, rebuilt.parent, rebuilt.findings) == (diff.sha, diff.parent, diff.findings)
    assert rebuilt.changed_file_count == 1
