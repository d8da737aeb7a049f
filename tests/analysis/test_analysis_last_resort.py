"""The rows of last resort (changed_branches.py) on real git histories: a host function whose branch tests the commit
changes, in a file no other rule gave a row, is a branch_condition row; kernels, examples and moved or reworded tests
are not; more than MAX_FUNCTIONS such functions in a commit are one note."""

from __future__ import annotations

from analysis_history import History, last_resort_functions, rules_rows

from bisector.analysis import explain
from bisector.analysis.changed_branches import DEFAULT_KEY, MAX_FUNCTIONS, ROW_KEY, SHAPE_KEY, housekeeping
from bisector.analysis.findings import FindingKind

SPMV_CPP = """\
#include "spmv.h"

// maps the public algorithm to the kernel family
static status alg_to_csrmv(spmv_alg alg, csrmv_alg& out)
{
    switch(alg)
    {
    case spmv_alg_default:
    case spmv_alg_csr_stream:
    {
        out = csrmv_alg_stream;
        return status_success;
    }

    case spmv_alg_csr_adaptive:
    {
        out = csrmv_alg_adaptive;
        return status_success;
    }
    }
    return status_invalid_value;
}

__global__ void csrmv_kernel(const int* rows, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = rows[i];
}
"""

BLIT_CU = """\
void blit_int32(int op, const int* in, int* out, int count)
{
    int blocks = (count + 255) / 256;
    if (op == OP_ADD) {
        add_kernel<<<blocks, 256>>>(in, out, count);
    }
}
"""
# a new branch that re-routes an op before the launches: no rule reads it as a kernel choice
ROUTED_BLIT_CU = BLIT_CU.replace(
    "    if (op == OP_ADD) {\n", "    if (op == OP_REALDIV) {\n        op = OP_DIV;\n    }\n    if (op == OP_ADD) {\n"
)


def test_a_case_moved_to_another_algorithm_is_a_row_of_last_resort(history: History) -> None:
    history.commit("spmv", {"src/spmv.cpp": SPMV_CPP})
    adaptive = SPMV_CPP.replace("    case spmv_alg_default:\n", "").replace(
        "    case spmv_alg_csr_adaptive:\n", "    case spmv_alg_default:\n    case spmv_alg_csr_adaptive:\n"
    )
    sha = history.commit("the default algorithm is adaptive", {"src/spmv.cpp": adaptive})

    rows = explain(history.path, sha).table_findings
    assert [(r.kind, r.file, r.name, r.key) for r in rows] == [
        (FindingKind.BRANCH_CONDITION, "src/spmv.cpp", "alg_to_csrmv", ROW_KEY)
    ]
    assert (rows[0].before, rows[0].after, rows[0].line) == (
        "case spmv_alg_default: (line 8 before)",
        "case spmv_alg_default: (line 14)",
        14,
    )
    assert rows[0].detail.startswith("a branch test of this function changed (2 in all)")


def test_a_new_branch_before_a_launch_is_a_row_but_not_in_a_kernel(history: History) -> None:
    history.commit("blit", {"src/blit.cu": BLIT_CU})
    sha = history.commit("integer realdiv is div", {"src/blit.cu": ROUTED_BLIT_CU})
    assert rules_rows(history.path, sha) == []
    assert last_resort_functions(history.path, sha) == ["blit_int32"]

    history.commit("spmv", {"src/spmv.cpp": SPMV_CPP})
    guarded = SPMV_CPP.replace("    if (i < n) y[i] = rows[i];\n", "    if (i < n && rows[i] >= 0) y[i] = rows[i];\n")
    sha = history.commit("skip negative rows in the kernel", {"src/spmv.cpp": guarded})
    assert explain(history.path, sha).table_findings == ()  # a __global__ function computes, it does not choose


def test_housekeeping_functions_and_experiments_get_no_rows(history: History) -> None:
    source = BLIT_CU + "\nvoid deleteAxis(Axis* axis)\n{\n    if (axis->buffer) release(axis->buffer);\n}\n"
    history.commit("blit", {"src/blit.cu": source, "experiments/blit.cu": BLIT_CU})
    freed = source.replace("if (axis->buffer)", "if (axis->buffer && axis->owned)")
    sha = history.commit("free owned buffers", {"src/blit.cu": freed, "experiments/blit.cu": ROUTED_BLIT_CU})
    assert explain(history.path, sha).table_findings == ()

    assert [housekeeping(name) for name in ("getVkFFTErrorString", "ArmDevice::Allocate", "Pool.free_list")] == [
        True, True, True
    ]  # fmt: skip
    assert [housekeeping(name) for name in ("preprocess_qkw", "Mlp.topology", "is_freestanding")] == [
        False, False, False
    ]  # fmt: skip


def test_moved_reworded_and_commented_tests_are_no_rows(history: History) -> None:
    history.commit("blit", {"src/blit.cu": BLIT_CU})
    spaced = BLIT_CU.replace("if (op == OP_ADD) {", "if (op==OP_ADD) {  // the only op so far")
    sha = history.commit("format", {"src/blit.cu": spaced})
    assert explain(history.path, sha).table_findings == ()

    reworded = spaced.replace("if (op==OP_ADD) {  // the only op so far", "LIB_IF(op == OP_ADD) {")
    sha = history.commit("the project's if macro", {"src/blit.cu": reworded})
    assert explain(history.path, sha).table_findings == ()  # the same test in parentheses on the other side


def test_a_file_with_a_rule_row_gets_no_row_of_last_resort(history: History) -> None:
    source = """\
void gemm(int m, int n, const float* a, float* c)
{
    if (m <= 64) {
        simt_gemm(m, n, a, c);
    } else if (n > 4) {
        mma_gemm(m, n, a, c);
    }
}
"""
    history.commit("gemm", {"src/gemm.cpp": source})
    changed = source.replace("m <= 64", "m <= 128").replace("n > 4", "n > 8 && aligned(a)")
    sha = history.commit("retune", {"src/gemm.cpp": changed})

    assert rules_rows(history.path, sha) == [("dispatch_logic", "gemm")]
    assert last_resort_functions(history.path, sha) == []


PICK_PY = """\
import triton


def pick_backend(dtype, device):
    if device.name in ENABLED:
        return "triton"
    return "torch"


@triton.jit
def _add_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    if n > BLOCK:
        tl.store(x_ptr + offsets, 0)
"""


def test_a_python_functions_changed_test_is_a_row_but_not_a_kernels_or_an_examples(history: History) -> None:
    history.commit("pick", {"pkg/pick.py": PICK_PY, "examples/run.py": PICK_PY})
    rerouted = PICK_PY.replace("if device.name in ENABLED:", "if device.name in ENABLED and not is_busy(device):")
    sha = history.commit("triton on every accelerator", {"pkg/pick.py": rerouted, "examples/run.py": rerouted})
    rows = explain(history.path, sha).table_findings
    assert [(r.file, r.name, r.key) for r in rows] == [("pkg/pick.py", "pick_backend", ROW_KEY)]
    assert rows[0].before == "device.name in ENABLED"
    assert rows[0].after == "device.name in ENABLED and (not is_busy(device))"  # as ast.unparse writes it
    assert rows[0].line == 5

    in_kernel = rerouted.replace("if n > BLOCK:", "if n >= BLOCK:")
    sha = history.commit("kernel bound", {"pkg/pick.py": in_kernel})
    assert explain(history.path, sha).table_findings == ()


def test_a_test_moved_inside_its_function_is_no_row(history: History) -> None:
    history.commit("pick", {"pkg/pick.py": PICK_PY})
    moved = PICK_PY.replace(
        '    if device.name in ENABLED:\n        return "triton"\n    return "torch"\n',
        '    backend = "torch"\n    if device.name in ENABLED:\n        backend = "triton"\n    return backend\n',
    )
    sha = history.commit("one return", {"pkg/pick.py": moved})
    assert explain(history.path, sha).table_findings == ()


def test_more_functions_than_the_cap_are_one_note(history: History) -> None:
    functions = [f"void step{i}(int x)\n{{\n    if (ready(x)) run{i}(x);\n}}\n" for i in range(MAX_FUNCTIONS + 1)]
    history.commit("steps", {"src/steps.cpp": "\n".join(functions)})
    changed = "\n".join(f.replace("if (ready(x))", "if (ready(x) && !busy(x))") for f in functions)
    sha = history.commit("inclusive bounds everywhere", {"src/steps.cpp": changed})

    diff = explain(history.path, sha)
    assert diff.table_findings == ()
    assert [n.name for n in diff.notes] == [f"branch tests changed in {MAX_FUNCTIONS + 1} functions"]
    assert "src/steps.cpp: step0, src/steps.cpp: step1" in diff.notes[0].detail


LOCAL_WS_CC = """\
std::vector<uint32_t> LocalWS(const uint32_t *gws, const uint32_t kwg_size) {
  std::vector<uint32_t> lws(4, 0);
  uint64_t cache_size = OpenCLRuntime::Global()->device_global_mem_cache_size();
  lws[1] = std::min<uint32_t>(gws[1], kwg_size);
  lws[0] = std::max<uint32_t>(lws[0], 1);
  const uint32_t lws_size = lws[0] * lws[1];
  return lws;
}

std::vector<uint32_t> Default3DLocalWS(const uint32_t *gws, const uint32_t kwg_size) {
  std::vector<uint32_t> lws(4, 0);
  if (kwg_size == 0) {
    lws[0] = lws[1] = lws[2] = 1;
  }
  return lws;
}
"""


def test_a_changed_work_size_assignment_is_a_launch_row_unless_a_branch_test_changed_too(history: History) -> None:
    history.commit("local work sizes", {"src/opencl/conv.cc": LOCAL_WS_CC})
    capped = LOCAL_WS_CC.replace(
        "lws[0] = std::max<uint32_t>(lws[0], 1);",
        "lws[0] = std::max<uint32_t>(std::min<uint32_t>(lws[0], kwg_size / lws[1]), 1);",
    ).replace(
        "if (kwg_size == 0) {\n    lws[0] = lws[1] = lws[2] = 1;",
        "if (kwg_size < 4) {\n    lws[0] = lws[1] = lws[2] = 2;",
    )
    sha = history.commit("fix lws overflow", {"src/opencl/conv.cc": capped})

    rows = sorted((r.kind, r.name, r.key) for r in explain(history.path, sha).table_findings)

    assert rows == [
        (FindingKind.BRANCH_CONDITION, "Default3DLocalWS", ROW_KEY),  # its test changed: the branch is the row
        (FindingKind.LAUNCH_PARAM, "LocalWS", SHAPE_KEY),
    ]


SWAP_PY = """\
def swap_linear_with_float8_linear(
    module,
    module_cls,
    *,
    skip_fqn_list=None,
    scaling_type_x=TensorScalingType.DELAYED,
    scaling_type_w=TensorScalingType.DELAYED,
):
    for name, child in module.named_children():
        if name in (skip_fqn_list or []):
            continue
        setattr(module, name, module_cls.from_float(child, scaling_type_x, scaling_type_w))
    return module
"""


def test_a_python_functions_changed_parameter_default_is_a_constant_row_of_last_resort(history: History) -> None:
    history.commit("swap", {"float8/linear_utils.py": SWAP_PY})
    dynamic = SWAP_PY.replace("TensorScalingType.DELAYED", "TensorScalingType.DYNAMIC")
    sha = history.commit("dynamic scaling by default", {"float8/linear_utils.py": dynamic})

    rows = explain(history.path, sha).table_findings

    assert [(r.kind, r.name, r.key) for r in rows] == [
        (FindingKind.CONSTANT, "swap_linear_with_float8_linear", DEFAULT_KEY)
    ]
    assert (rows[0].before, rows[0].after) == (
        "scaling_type_x=TensorScalingType.DELAYED",
        "scaling_type_x=TensorScalingType.DYNAMIC",
    )
    assert rows[0].detail.startswith("a parameter default of this function changed (2 in all)")

    added = dynamic.replace("    skip_fqn_list=None,\n", "    skip_fqn_list=None,\n    emulate=False,\n")
    sha = history.commit("a new parameter with a default", {"float8/linear_utils.py": added})
    assert explain(history.path, sha).table_findings == ()


SORT_H = """\
template <class Policy, class Key>
void radix_sort(Policy& policy, Key* keys, size_t count)
{
    size_t temp_bytes = 0;
    rocprim::radix_sort_keys(nullptr, temp_bytes, keys, keys, count);
    launch(policy, keys, count, temp_bytes);
}
"""


def test_guards_a_commit_only_adds_are_no_rows_but_a_guard_that_reroutes_is(history: History) -> None:
    history.commit("sort", {"thrust/detail/sort.h": SORT_H})
    guarded = SORT_H.replace(
        "    size_t temp_bytes = 0;\n", "    if(count == 0)\n        return;\n    size_t temp_bytes = 0;\n"
    )
    sha = history.commit("nothing to sort", {"thrust/detail/sort.h": guarded})
    assert explain(history.path, sha).table_findings == ()

    rerouted = guarded.replace(
        "    if(count == 0)\n        return;\n", "    if(count < 64)\n        return small_sort(keys, count);\n"
    )
    sha = history.commit("small inputs sort in one block", {"thrust/detail/sort.h": rerouted})
    rows = explain(history.path, sha).table_findings
    assert [(r.kind, r.name, r.before, r.after) for r in rows] == [
        (FindingKind.BRANCH_CONDITION, "radix_sort", "if(count == 0)", "if(count < 64)")
    ]

    history.commit("pick", {"pkg/pick.py": PICK_PY})
    none_guard = PICK_PY.replace(
        "def pick_backend(dtype, device):\n",
        'def pick_backend(dtype, device):\n    if device is None:\n        raise ValueError("no device")\n',
    )
    assert none_guard != PICK_PY
    sha = history.commit("a device is required", {"pkg/pick.py": none_guard})
    assert explain(history.path, sha).table_findings == ()
    history.commit("no guard", {"pkg/pick.py": PICK_PY})
    filled_in = none_guard.replace('raise ValueError("no device")', "device = current_device()")
    sha = history.commit("the current device by default", {"pkg/pick.py": filled_in})
    assert explain(history.path, sha).table_findings == ()


def test_a_zero_test_whose_branch_goes_on_is_a_row(history: History) -> None:
    history.commit("sort", {"thrust/detail/sort.h": SORT_H})
    flagged = SORT_H.replace(
        "    size_t temp_bytes = 0;\n", "    size_t temp_bytes = 0;\n    if(count == 0) policy.small = 1;\n"
    )
    sha = history.commit("empty inputs take the small path", {"thrust/detail/sort.h": flagged})
    assert [r.name for r in explain(history.path, sha).table_findings] == ["radix_sort"]


CUTE_PY = """\
import cutlass.cute as cute


@cute.jit
def launch_gemm(a, b, c, stream):
    if raster_order(c) == "along_m":
        tile = (256, 128)
    else:
        tile = (128, 128)
    gemm_kernel(a, b, c, tile).launch(grid=grid_of(c, tile), stream=stream)
"""


def test_a_cute_jit_function_is_host_code_whose_changed_test_is_a_row(history: History) -> None:
    """CuTe DSL's @cute.jit marks the host function that picks and launches a @cute.kernel."""
    history.commit("gemm", {"pkg/gemm.py": CUTE_PY})
    sha = history.commit("wide tiles along n", {"pkg/gemm.py": CUTE_PY.replace('"along_m"', '"along_n"')})
    assert [(r.kind, r.name, r.key) for r in explain(history.path, sha).table_findings] == [
        (FindingKind.BRANCH_CONDITION, "launch_gemm", ROW_KEY)
    ]
