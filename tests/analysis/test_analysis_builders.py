"""Config lists built in code and native instance lists, on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import Finding, FindingKind, explain


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

    found = explain(history.path, sha).findings

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

    assert rows(explain(history.path, sha).findings, FindingKind.AUTOTUNE_CONFIG) == {}


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

    found = explain(history.path, sha).findings

    assert "make_configs" not in rows(found, FindingKind.AUTOTUNE_CONFIG)
    assert any(f.name == "DEFAULT_CONFIGS" for f in found if f.kind.is_dispatch_relevant)


INSTANCES = """\
    namespace ck {
    using gemm_f16_instances = std::tuple<
        // M, N, K, stages
        DeviceGemm<Row, Col, F16, 256, 128, 128, 64, 3>,
        DeviceGemm<Row, Col, F16, 256, 128, 64, 64, 3>,
        DeviceGemm<Row, Col, F16, 128, 64, 64, 32, 2>
    >;
    using Gemm = DefaultGemm<
        F16,
        GemmShape<64, 64, 16>,
        GemmShape<32, 32, 16>,
        GemmShape<16, 8, 8>
    >::Kernel;
    }  // namespace ck
"""

REGISTRY = """\
    #define GN_SELECT(FUNC) \\
      GN_CASE(4, FUNC) \\
      GN_CASE(8, FUNC) \\
      GN_CASE(16, FUNC)

    REGISTER_LAUNCHER(1024, fp16, fp32, 2, 1, 4, 8);
    REGISTER_LAUNCHER(2048, fp16, fp32, 2, 1, 4, 8);
    REGISTER_LAUNCHER(4096, fp16, fp32, 2, 1, 4, 16);

    void prepare(const int *shapes, int n) {
      printf("%d\\n", 1);
      printf("%d\\n", 2);
      printf("%d\\n", 3);
    }
"""

PER_SIZE = """\
    template <int DEPTH, int GROUP>
    struct config {};

    __global__ void kernel(float *x) {
      warp_load<2>(x, 0);
      warp_load<4>(x, 1);
      warp_load<8>(x, 2);
    }

    int main() {
      int N = 1024;
      run_benchmark<config<4, 8>>(N, N);
      N = 2048;
      run_benchmark<config<4, 16>>(N, N);
      N = 4096;
      run_benchmark<config<4, 4>>(N, N);
      return 0;
    }
"""


def test_native_instance_lists_are_rows_named_by_what_holds_them(history: History) -> None:
    history.commit("instances", {"src/instances.cpp": INSTANCES, "src/registry.cu": REGISTRY, "src/bench.cu": PER_SIZE})
    instances = INSTANCES.replace(
        "    DeviceGemm<Row, Col, F16, 256, 128, 64, 64, 3>,\n",
        "    // DeviceGemm<Row, Col, F16, 256, 128, 64, 64, 3>,\n",
    ).replace("GemmShape<32, 32, 16>", "GemmShape<32, 64, 16>")
    registry = REGISTRY.replace("GN_CASE(8, FUNC) \\\n", "GN_CASE(8, FUNC) \\\n  GN_CASE(12, FUNC) \\\n").replace(
        "REGISTER_LAUNCHER(4096", "REGISTER_LAUNCHER(3072, fp16, fp32, 2, 1, 4, 8);\nREGISTER_LAUNCHER(4096"
    )
    registry = registry.replace('printf("%d\\n", 2);', 'printf("%d\\n", 5);')
    per_size = PER_SIZE.replace("config<4, 16>", "config<5, 16>").replace("warp_load<4>(x, 1)", "warp_load<4>(x, 3)")
    sha = history.commit(
        "retuned", {"src/instances.cpp": instances, "src/registry.cu": registry, "src/bench.cu": per_size}
    )

    found = explain(history.path, sha).findings

    assert {(f.kind.value, f.file, f.name, f.before, f.after) for f in found if "instance list" in f.detail} == {
        (
            "native_array",
            "src/instances.cpp",
            "gemm_f16_instances",
            "DeviceGemm<Row, Col, F16, 256, 128, 64, 64, 3>,",
            None,
        ),
        ("native_array", "src/registry.cu", "GN_SELECT", None, "GN_CASE(12, FUNC) \\"),
        (
            "native_array",
            "src/registry.cu",
            "REGISTER_LAUNCHER",
            None,
            "REGISTER_LAUNCHER(3072, fp16, fp32, 2, 1, 4, 8);",
        ),
        (
            "launch_param",
            "src/bench.cu",
            "main",
            "run_benchmark<config<4, 16>>(N, N);",
            "run_benchmark<config<5, 16>>(N, N);",
        ),
    }  # not the arguments of one template (Gemm), a check or print, or a kernel's own calls (warp_load)


def test_native_conditions_are_named_by_their_function_with_arch_continuations_and_thresholds(
    history: History,
) -> None:
    source = """\
        bool supported(const Props *dprops) {
          bool ok = (dprops->major == 8 && dprops->minor == 0) ||
                    (dprops->major == 9 && dprops->minor == 0);
          return ok;
        }

        int split_k(int experts, int n) {
          if (experts <= 8) {
            return invoke(n, 8);
          }
          if (n == 0) {
            return 0;
          }
          return invoke(n, 16);
        }

        __global__ void reduce(float *x, int threads, int m) {
          if (threads >= 32) {
            x[0] = 1;
          }
          if (m <= 16) {
            x[1] = 1;
          }
        }

        void launch(float *x, int m) {
          reduce<<<1, 32>>>(x, 32, m);
        }
    """
    history.commit("dispatch", {"csrc/api.cpp": source})
    changed = (
        source.replace(
            "(dprops->major == 9 && dprops->minor == 0);",
            "(dprops->major == 9 && dprops->minor == 0) ||\n"
            "                    (dprops->major == 10 && dprops->minor == 0);",
        )
        .replace("experts <= 8", "experts <= 10")
        .replace("n == 0", "n == 1")
        .replace("threads >= 32", "threads > 32")
        .replace("m <= 16", "m <= 32")
        .replace("  reduce<<<1, 32>>>", "  if (m == 0) {\n    return;\n  }\n  reduce<<<1, 32>>>")
    )
    sha = history.commit("blackwell, ten experts", {"csrc/api.cpp": changed})

    found = explain(history.path, sha).findings

    conditions = (FindingKind.NATIVE_THRESHOLD, FindingKind.BRANCH_CONDITION)  # a threshold; the arch picks a path
    assert [(f.label, f.before, f.after) for f in found if f.kind in conditions] == [
        (
            "supported condition on the arch",
            "(dprops->major == 9 && dprops->minor == 0);",
            "(dprops->major == 9 && dprops->minor == 0) ||",
        ),
        ("supported condition on the arch", None, "(dprops->major == 10 && dprops->minor == 0);"),
        ("split_k threshold", "if (experts <= 8) {", "if (experts <= 10) {"),
    ]  # not n == 0 -> n == 1 or a new m == 0 (empty checks), not the kernel's own threshold or batch-size branch


CHOOSER = """\
    import triton


    @triton.jit
    def _attn_kernel(q, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        pass


    def _kernel_meta(BLOCK_DK):
        \"\"\"Tiles for the head size.\"\"\"
        num_warps = 4
        num_stages = min(4, max(2, 768 // BLOCK_DK))
        BLOCK_M = max(16, 16384 // BLOCK_DK)
        BLOCK_N = 64
        if num_stages == 2:
            num_warps = 8
        return BLOCK_M, BLOCK_N, num_warps, num_stages


    def _block_d(head_dim):
        BLOCK_D = triton.next_power_of_2(head_dim)
        if head_dim > 256:
            BLOCK_D = 256
        return BLOCK_D, head_dim


    def attention(q, head_dim):
        BLOCK_DK, _ = _block_d(head_dim)
        BLOCK_M, BLOCK_N, num_warps, num_stages = _kernel_meta(BLOCK_DK)
        _attn_kernel[(1,)](q, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps, num_stages=num_stages)
"""


# one tile size, so it is no chooser and its condition keeps its row


def test_annotations_docstrings_and_layout_in_a_chooser_are_no_change(history: History) -> None:
    history.commit("attention", {"ops/attn.py": CHOOSER})
    changed = (
        CHOOSER.replace("def _kernel_meta(BLOCK_DK):", "def _kernel_meta(BLOCK_DK: int) -> tuple[int, ...]:")
        .replace("num_warps = 4", "num_warps: int = 4")
        .replace("Tiles for the head size.", "Tiles for the head size, by shared memory.")
        .replace("BLOCK_N = 64", "BLOCK_N = (\n        64\n    )")
    )
    sha = history.commit("typed", {"ops/attn.py": changed})

    assert [f for f in explain(history.path, sha).findings if f.kind.is_dispatch_relevant] == []


def test_an_env_variable_that_names_a_place_is_no_gate(history: History) -> None:
    module = """\
        import os

        CACHE_DIR = os.environ.get("KERNELS_CACHE_DIR", "/tmp/kernels")
        USE_FAST = os.getenv("KERNELS_USE_FAST", "0") == "1"
    """
    native = """\
        #include <cstdlib>
        bool use_split() {
          return std::getenv("KERNELS_SPLIT") != nullptr;
        }
    """
    history.commit("env", {"ops/env.py": module, "csrc/env.cpp": native})
    changed_module = module.replace('"/tmp/kernels"', '"~/.cache/kernels"').replace('"0") == "1"', '"1") == "1"')
    changed_native = native.replace('"KERNELS_SPLIT"', '"KERNELS_SPLIT_K"')
    sha = history.commit("defaults", {"ops/env.py": changed_module, "csrc/env.cpp": changed_native})

    found = explain(history.path, sha).findings

    assert sorted(f.name for f in found if f.kind is FindingKind.ENV_GATE) == [
        "KERNELS_SPLIT",
        "KERNELS_SPLIT_K",
        "KERNELS_USE_FAST",
    ]  # not KERNELS_CACHE_DIR: where files are, not which kernel runs


def test_a_capability_kept_in_a_module_placeholder_is_an_arch_condition(history: History) -> None:
    module = """\
        import torch
        import triton


        @triton.jit
        def _fwd_kernel(q, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
            pass


        def attention_fwd(q, head_dim):
            def _block_d(dim):
                BLOCK_D = triton.next_power_of_2(dim)
                BLOCK_DV = BLOCK_D
                return BLOCK_D, BLOCK_DV

            BLOCK_D, _ = _block_d(head_dim)
            BLOCK_M = max(16, 16384 // BLOCK_D)
            _fwd_kernel[(1,)](q, BLOCK_M=BLOCK_M, BLOCK_D=BLOCK_D)
    """
    history.commit("attention", {"ops/attn.py": module})
    changed = module.replace("import triton\n", "import triton\n\n        _nv_cap = None\n").replace(
        "            BLOCK_M = max(16, 16384 // BLOCK_D)\n",
        "            global _nv_cap\n"
        "            if _nv_cap is None:\n"
        "                _nv_cap = _query_device(q)\n"
        "            if _nv_cap[0] < 8:\n"
        "                BLOCK_M = max(16, 8192 // BLOCK_D)\n"
        "            else:\n"
        "                BLOCK_M = max(16, 16384 // BLOCK_D)\n",
    )
    sha = history.commit("smaller tiles before sm80", {"ops/attn.py": changed})

    found = explain(history.path, sha).findings

    assert {(f.kind.value, f.name, f.after) for f in found if f.kind is not FindingKind.LAUNCH_PARAM} >= {
        ("branch_condition", "attention_fwd", "_nv_cap[0] < 8")
    }
    assert not [f for f in found if f.name == "_nv_cap" or f.kind is FindingKind.DISPATCH_LOGIC]
    # _nv_cap = None is a placeholder set at run time; attention_fwd returns nothing (its helper's return of tile
    # sizes is the helper's), so it is no launch-config chooser


def test_a_value_that_only_says_a_new_type_alias_is_no_change(history: History) -> None:
    source = """\
        #include <cstdint>

        void launch(const float *x, int n) {
          const int ILP = sizeof(uint4) / sizeof(float);
          const int kWidth = sizeof(uint4) / 2;
          run(x, n, ILP, kWidth);
        }
    """
    history.commit("vector loads", {"csrc/loss.cu": source})
    changed = (
        source.replace("#include <cstdint>\n", "#include <cstdint>\n\n        typedef uint4 vector_t;\n")
        .replace("sizeof(uint4) / sizeof(float)", "sizeof(vector_t) / sizeof(float)")
        .replace("sizeof(uint4) / 2", "sizeof(uint2) / 2")
    )
    sha = history.commit("vector_t", {"csrc/loss.cu": changed})

    found = explain(history.path, sha).findings

    assert [(f.name, f.before, f.after) for f in found if f.kind is FindingKind.NATIVE_THRESHOLD] == [
        ("kWidth", "sizeof(uint4) / 2", "sizeof(uint2) / 2")
    ]  # ILP says the same type under its new alias


def test_tables_a_commit_adds_for_a_changed_builder_to_read_are_shown_by_the_builders_row(history: History) -> None:
    history.commit("configs", {"ops/matmul.py": BUILT_CONFIGS})
    changed = BUILT_CONFIGS.replace(
        'HAS_WS = os.getenv("ENABLE_WS") == "1"\n',
        'HAS_WS = os.getenv("ENABLE_WS") == "1"\n'
        "    small_blocks = [32, 64]\n"
        "    if HAS_WS:\n"
        "        bm_range = small_blocks\n"
        "    else:\n"
        "        bm_range = [128]\n"
        "    WARPS = [4, 8, 16]\n",
    ).replace("for BM in [128]\n", "for BM in bm_range\n")
    sha = history.commit("ranges by flag", {"ops/matmul.py": changed})

    found = explain(history.path, sha).findings

    assert {f.name for f in found if f.kind.is_dispatch_relevant} == {"matmul_get_configs", "<module>", "WARPS"}
    # small_blocks and bm_range are the builder's new inputs; WARPS is read by no builder: a table of its own


def test_a_variable_a_settings_class_declares_is_an_env_gate(history: History) -> None:
    module = """\
        class EnvVar:
            def __init__(self, name, default):
                self.name, self.default = name, default


        class Environment:
            KERNELS_CACHE = EnvVar("KERNELS_CACHE", "1")
    """
    history.commit("settings", {"pkg/env.py": module})
    changed = module.replace(
        '"1")\n',
        '"1")\n'
        '            KERNELS_COST_MODEL = EnvVar("KERNELS_COST_MODEL", None)\n'
        '            label = EnvVar("kernels", 1)\n',
    )  # a lower-case name is no variable of the environment
    sha = history.commit("cost model from the environment", {"pkg/env.py": changed})

    found = explain(history.path, sha).findings

    assert [(f.name, f.after) for f in found if f.kind is FindingKind.ENV_GATE] == [
        ("KERNELS_COST_MODEL", "EnvVar('KERNELS_COST_MODEL', None) (in Environment)")
    ]


def test_a_parsed_version_is_a_constant_of_its_version_string(history: History) -> None:
    module = """\
        from packaging import version

        MIN_TRITON = version.parse("3.0.0")
        NAME = version.parse(get_name())
    """
    history.commit("versions", {"ops/versions.py": module})
    changed = module.replace('"3.0.0"', '"3.2.0"').replace(
        'MIN_TRITON = version.parse("3.2.0")\n',
        'MIN_TRITON = version.parse("3.2.0")\n        VERSION_330 = Version("3.3.0")\n',
    )
    sha = history.commit("newer triton", {"ops/versions.py": changed})

    found = explain(history.path, sha).findings

    assert sorted((f.name, f.before, f.after) for f in found if f.kind is FindingKind.CONSTANT) == [
        ("MIN_TRITON", "'3.0.0'", "'3.2.0'"),
        ("VERSION_330", None, "'3.3.0'"),
    ]


def test_a_launch_shape_is_a_row_and_a_kernels_computed_local_is_none(history: History) -> None:
    source = """\
        __global__ void combine(const float *x, int s_q) {
          constexpr int kBlockM = 64;
          const int batch_idx = blockIdx.x;
          const int s_q_idx = blockIdx.y;
          use(x, batch_idx, s_q_idx, kBlockM);
        }

        void run_combine(const float *x, int b, int s_q, int h, cudaStream_t stream) {
          int blocks_per_slice = 256 / b;
          dim3 grid(b, s_q, h * blocks_per_slice);
          combine<<<grid, 128, 0, stream>>>(x, s_q);
        }
    """
    history.commit("combine", {"csrc/combine.cu": source})
    changed = (
        source.replace("kBlockM = 64", "kBlockM = 128")
        .replace("const int batch_idx = blockIdx.x;", "const int batch_idx = blockIdx.x / s_q;")
        .replace("const int s_q_idx = blockIdx.y;", "const int s_q_idx = blockIdx.x % s_q;")
        .replace("dim3 grid(b, s_q, h * blocks_per_slice);", "dim3 grid(b * s_q, 1, h * blocks_per_slice);")
        .replace("256 / b;\n", "256 / b;\n          blocks_per_slice = max(blocks_per_slice, 1);\n")
    )
    sha = history.commit("one grid row per query", {"csrc/combine.cu": changed})

    found = explain(history.path, sha).findings

    assert sorted((f.kind.value, f.label, f.before or "", f.after) for f in found if f.kind.is_dispatch_relevant) == [
        ("launch_param", "run_combine launch shape", "", "blocks_per_slice = max(blocks_per_slice, 1);"),
        (
            "launch_param",
            "run_combine launch shape",
            "dim3 grid(b, s_q, h * blocks_per_slice);",
            "dim3 grid(b * s_q, 1, h * blocks_per_slice);",
        ),
        ("native_threshold", "kBlockM", "64", "128"),
    ]  # batch_idx and s_q_idx are the kernel's own arithmetic
