"""The demo history's texts and made-up world: authors, other kernels and tuning rows, docs, tests and CI
files, the culprit's description. Plain data for kernels.demo_history."""

from __future__ import annotations

AUTHORS = (
    ("Mingyi Lu", "mingyi.lu@example.com"),
    ("Priya Raman", "priya.raman@example.com"),
    ("Jonas Keller", "jkeller@example.com"),
    ("Ana Souza", "ana.souza@example.com"),
    ("Wei Zhang", "wzhang@example.com"),
    ("Fatima Haddad", "fhaddad@example.com"),
    ("Tomasz Nowak", "tnowak@example.com"),
    ("Kenji Sato", "kenji.sato@example.com"),
    ("Olivia Brown", "olivia.brown@example.com"),
    ("Rahul Mehta", "rmehta@example.com"),
    ("Lea Martin", "lea.martin@example.com"),
    ("Diego Alvarez", "dalvarez@example.com"),
)
LOGINS = ("mlu", "praman", "jkeller", "asouza", "wzhang", "fhaddad", "tnowak", "ksato", "obrown", "rmehta")

# Tuning rows for shapes the decoder never uses, and the values churn moves them through.
OTHER_ROWS: tuple[tuple[tuple[int, int], tuple[str, ...], str], ...] = (
    ((256, 7168), ("8", "6", "12", "8"), "DeepSeek-V3 router"),
    ((384, 7168), ("8", "16", "12"), "DeepSeek-V4.1 router"),
    ((2112, 7168), ("4", "8", "6"), "DeepSeek-V4.1 q_a/kv_a fused projection"),
    ((160, 5120), ("4", "2", "SIMT_ONLY"), "dots3 router"),
    ((512, 4096), ("8", "16"), "beam-search rescoring head"),
    ((7168, 256), ("2", "4"), "DeepSeek-V4.1 shared expert down"),
    ((64, 2880), ("SIMT_ONLY", "16"), "gpt-oss router"),
    ((3072, 1536), ("2", "4"), "Qwen3 kv projection"),
    ((1024, 2048), ("4", "8"), "dots3 gate"),
)
OTHER_KERNELS = ("rope", "silu_and_mul", "topk_softmax", "rms_norm_ref", "fp8_quant", "moe_align")
DOCS = ("docs/dispatch.md", "docs/kernels.md", "docs/tuning.md", "docs/ci.md", "README.md")
AREAS = ("NVIDIA", "AMD", "NPU", "CI", "Docs")


def other_kernel(name: str, version: int, block: int) -> str:
    return (
        f'"""Reference {name.replace("_", " ")} kernel (revision {version}); not used by the decoder bench."""\n\n'
        f"BLOCK = {block}\n\n\n"
        f"def launch_config(n: int) -> tuple[int, int]:\n"
        f"    return (n + BLOCK - 1) // BLOCK, BLOCK\n"
    )


def test_file(name: str, cases: int) -> str:
    sizes = ", ".join(str(64 * (i + 1)) for i in range(cases))
    return (
        f"import pytest\n\nfrom kernels.ops import {name}\n\n\n"
        f"@pytest.mark.parametrize('n', [{sizes}])\n"
        f"def test_{name}_grid_covers(n):\n"
        f"    blocks, block = {name}.launch_config(n)\n"
        f"    assert blocks * block >= n\n"
    )


def ci_yaml(checkout: str, python: str, minutes: int) -> str:
    return (
        "name: ci\non: [push, pull_request]\njobs:\n  unit:\n    runs-on: ubuntu-latest\n"
        f"    timeout-minutes: {minutes}\n    steps:\n      - uses: actions/checkout@{checkout}\n"
        f"      - uses: actions/setup-python@v5\n        with:\n          python-version: '{python}'\n"
        "      - run: pip install torch numpy pytest\n      - run: python -m pytest -q tests\n"
        "      - run: python -m kernels.bench accept-length --k 3\n"
    )


README = """# tiny-gemm-stack (gpu-bisect demo)

A small kernel stack: a tiny GEMM with a SIMT and an MMA kernel, a per-shape dispatch table
(`kernels/tiny_gemm.py`, `_TUNED_MMA_MIN_M`) and a self-speculative decoder benchmark.

    python -m kernels.bench accept-length --k 3     # 4.0000 when dispatch is batch invariant
    python -m kernels.probe batch-invariance
"""

DISPATCH_DOC = """# Tiny GEMM dispatch

Each (N, K) row of `_TUNED_MMA_MIN_M` says from which m the MMA kernel is used. Shapes that decode
(m = 1) and speculative verify (m = k + 1) both run must stay on one kernel for both.
"""

CULPRIT_DOC = """
## MMA templates

Small-m GEMMs now switch to an mma.sync template once the cost model predicts it faster; the
thresholds come from B300 runs.
"""

CULPRIT_BODY = (
    "Adds an mma.sync template next to the SIMT kernel and dispatches per shape by batch size.\n"
    "Thresholds for shapes without a tuned row come from the B300 cost model."
)

TEST_TINY_GEMM = """from kernels import tiny_gemm


def test_table_rows_are_positive():
    assert all(v >= 1 for v in tiny_gemm.tuned_table().values())
"""

TEST_MMA = """from kernels import tiny_gemm


def test_mma_threshold_is_reported():
    assert tiny_gemm.threshold_for(896, 7168).mma_min_m >= 1
"""

DOC_TOPICS = (
    "Tuning a new shape",
    "Reading the dispatch trace",
    "SIMT kernel tiles",
    "CPU fallbacks",
    "Split-K on Hopper",
    "Nightly accept-length job",
    "Adding a router shape",
    "Batch invariance",
    "Profiling small-m GEMMs",
)
DOC_SENTENCES = (
    "Run the probe before and after changing a row, and paste its output in the pull request.",
    "Tile sizes are part of the numerics: keep them fixed per shape, never per batch size.",
    "The nightly job fails when the accept length drops below the threshold on any prompt set.",
    "Use KERNELS_DISPATCH_TRACE to see which kernel each projection used in a run.",
    "Rows pinned to SIMT stay batch invariant at every m; rows with a threshold do not.",
    "Split-K partials are added in a fixed order so the output does not depend on scheduling.",
    "Router shapes of new models go through the cost model until someone tunes them.",
    "Benchmarks use L2-flushed timings so the weights come from HBM.",
)
