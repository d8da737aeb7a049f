"""Reachability on real git histories: a changed condition that chooses a launch's input is a row."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import Finding, FindingKind, explain


def rows(findings: tuple[Finding, ...], kind: FindingKind) -> list[tuple[str, str | None, str | None]]:
    return [(f.label, f.before, f.after) for f in findings if f.kind is kind]


OPS_PY = """\
import logging
import os

import triton

logger = logging.getLogger(__name__)
USE_BIG = os.environ.get("PKG_BIG_BLOCKS", "0") == "1"
DEBUG = os.environ.get("PKG_DEBUG", "0") == "1"
BLOCK_DEFAULT = 64


@triton.jit
def _kernel(x, BLOCK: tl.constexpr):
    pass


def _run(x, block):
    _kernel[(x.numel() // block,)](x, BLOCK=block)


def forward(x, variant):
    if USE_BIG:
        block = 128
    else:
        block = BLOCK_DEFAULT
    if variant == "wide":
        block = 256
    if DEBUG:
        print("forward", block)
    if os.environ.get("PKG_TRACE") == "1":
        logger.info("block %d", block)
    _run(x, block)


def describe(variant):
    if variant == "wide":
        return "w"
    return "n"


if __name__ == "__main__":
    batch, heads = 2, 8
    forward(None, "wide")
"""


def test_a_condition_that_chooses_a_launch_input_through_the_call_graph_is_a_row(history: History) -> None:
    history.commit("ops", {"pkg/ops.py": OPS_PY})
    changed = OPS_PY.replace('    if variant == "wide":\n        block = 256', '    if variant in ("wide", "huge"):\n'
                             "        block = 256")  # fmt: skip
    changed = changed.replace('    if variant == "wide":\n        return "w"', '    if variant == "huge":\n'
                              '        return "w"')  # fmt: skip
    sha = history.commit("huge takes the wide block", {"pkg/ops.py": changed})

    found = explain(history.path, sha).findings

    # forward launches through _run, and its condition sets the block passed there; describe launches nothing
    assert [(f.name, f.key, f.before, f.after) for f in found if f.kind is FindingKind.BRANCH_CONDITION] == [
        ("forward", "launch condition", "variant == 'wide'", "variant in ('wide', 'huge')")
    ]


ATTENTION_PY = """\
from pkg import _qattn as qattn


def attend(q, k, fast, variant):
    if fast:
        qattn.attn_f16(q, k)
    else:
        qattn.attn_f32(q, k)
    tile = 32 if variant == "narrow" else 64
    qattn.attn_tiled(q, k, tile)
"""


def test_conditions_choosing_kernels_in_native_extension_calls_and_between_literals_are_rows(
    history: History,
) -> None:
    history.commit("attention", {"pkg/attention.py": ATTENTION_PY})
    changed = (
        ATTENTION_PY.replace("if fast:", "if fast and q.is_contiguous():")
        .replace('    tile = 32 if variant == "narrow" else 64\n', '    warps = 4 if variant == "narrow" else 8\n')
        .replace("qattn.attn_tiled(q, k, tile)", "qattn.attn_tiled(q, k, 64, warps)")
    )
    sha = history.commit("f16 only for contiguous q; the variant picks warps, not tiles", {"pkg/attention.py": changed})

    found = explain(history.path, sha).findings

    # the extension module's calls are launches: the if picks one of two kernels; the conditional expression
    # now chooses another launch input (warps, not the tile)
    assert [(f.name, f.key, f.before, f.after) for f in found if f.kind is FindingKind.BRANCH_CONDITION] == [
        ("attend", "launch condition", "fast", "fast and q.is_contiguous()"),
        (
            "attend",
            "launch condition",
            "tile = ... if variant == 'narrow' else ...",
            "warps = ... if variant == 'narrow' else ...",
        ),
    ]


SGMV_CU = """\
#define SWITCH_HIDDEN(hidden, case_macro) \\
    switch (hidden) { \\
        case 2048: case_macro(2048); \\
        case 4096: case_macro(4096); \\
        default: assert(false); \\
    }

void sgmv(float* y, int d_in, int d_out, int dim, at::Tensor t) {
    if (t.defined()) {
        y = t.data_ptr<float>();
    }
    int blocks = DIVIDE(dim, 128);
    int stride = dim * 2;
    auto kernel = pick_sgmv_kernel(blocks);
    kernel<<<blocks, 128>>>(y, stride);
    run_gemm<64, 64, 16>(y, d_in, d_out);
}
"""


def test_native_code_that_reaches_a_kernel_choice_is_a_row_and_code_that_does_not_is_none(history: History) -> None:
    history.commit("sgmv", {"csrc/sgmv.cu": SGMV_CU})
    changed = (
        SGMV_CU.replace(
            "        case 4096: case_macro(4096); \\\n",
            "        case 3072: case_macro(3072); \\\n        case 4096: case_macro(4096); \\\n",
        )
        .replace("DIVIDE(dim, 128)", "DIVIDE(dim, 256)")
        .replace("int stride = dim * 2;", "int stride = dim * 4;")
        .replace("if (t.defined()) {", "if (t.defined() && t.numel() > 0) {")
        .replace(
            "    run_gemm<64, 64, 16>(y, d_in, d_out);\n",
            "    if (d_in < d_out) {\n        run_gemm<32, 128, 16>(y, d_in, d_out);\n    } else {\n"
            "        run_gemm<16, 64, 64>(y, d_in, d_out);\n    }\n",
        )
    )
    sha = history.commit("hidden 3072, wider blocks, tiles by shape", {"csrc/sgmv.cu": changed})

    found = explain(history.path, sha).findings

    assert rows(found, FindingKind.NATIVE_THRESHOLD) == [
        ("case of switch (hidden)", None, "case 3072: case_macro(3072); \\"),
        ("blocks (read by the kernel choice)", "DIVIDE(dim, 128)", "DIVIDE(dim, 256)"),
    ]  # stride reaches the kernel's arguments, not which kernel runs; the t.defined() block reads a pointer
    # sgmv launches at two sites: the condition that picks between them is a decision of a dispatch function
    # (native_choosers.py)
    assert rows(found, FindingKind.DISPATCH_LOGIC) == [
        ("sgmv condition choosing the kernel", None, "if (d_in < d_out) {")
    ]


GEMM_CU = """\
template <class T, class... Options>
void run_gemm(Args &args) {
    static const float beta_zero = 0.0f;
    args.beta_ptr = &beta_zero;
    constexpr int kStages = 4;
    gemm_kernel<kStages><<<args.grid, 128>>>(args);
}
"""


def test_a_local_read_only_through_its_address_or_never_read_is_no_row(history: History) -> None:
    history.commit("gemm", {"csrc/gemm.cu": GEMM_CU})
    changed = GEMM_CU.replace(
        "    static const float beta_zero = 0.0f;\n    args.beta_ptr = &beta_zero;\n",
        "    const at::cuda::CUDAGuard device_guard{args.device};\n",
    )
    sha = history.commit(
        "beta on the device, its guard; three stages", {"csrc/gemm.cu": changed.replace("= 4;", "= 3;")}
    )

    found = explain(history.path, sha).findings

    # kStages picks the kernel instance; beta_zero is a value the kernel reads through a pointer, device_guard an
    # object held for the function's scope
    assert rows(found, FindingKind.NATIVE_THRESHOLD) == [("kStages", "4", "3")]
