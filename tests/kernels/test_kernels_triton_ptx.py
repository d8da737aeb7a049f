"""The Triton kernels compiled for sm_90 (H100/H200) on this machine, no GPU needed: what their PTX promises."""

import pytest

triton = pytest.importorskip("triton")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from bisector.kernels import triton_kernels  # noqa: E402

pytestmark = pytest.mark.kernels

_POINTERS = {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "ws_ptr": "*fp32", "count_ptr": "*i32"}


def _ptx_lines(kernel, num_warps: int, **constexprs: object) -> list[str]:
    names = kernel.arg_names
    signature = {n: "constexpr" if n in constexprs else _POINTERS.get(n, "i32") for n in names}
    source = ASTSource(fn=kernel, signature=signature, constexprs={(names.index(n),): v for n, v in constexprs.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    return [line.strip() for line in compiled.asm["ptx"].splitlines()]


def _row_form(prefetch: bool) -> list[str]:
    # The shipped 144x7168 SIMT tiles: 28 splits of one 256-wide K block, 4 rows of x per program; on Hopper
    # (programmatic dependent launch) the weights are loaded first.
    return _ptx_lines(
        triton_kernels.simt_rows_gemm_kernel,
        4,
        K_SPLIT=256,
        BLOCK_M=4,
        BLOCK_N=16,
        BLOCK_K=256,
        SPLIT_K=28,
        EVEN_K=True,
        PREFETCH=prefetch,
        WEIGHTS_FIRST=True,
        GDC=True,
    )


def _loads_after_first_branch(lines: list[str]) -> list[str]:
    first_branch = next(i for i, line in enumerate(lines) if " bra" in line)
    # The last arrival's reads of the partials are .cg loads; any other load after a branch is a row of x.
    return [line for line in lines[first_branch:] if "ld.global" in line and ".cg" not in line]


def test_the_row_form_prefetch_issues_every_row_of_x_before_the_first_rows_branch():
    assert _loads_after_first_branch(_row_form(prefetch=True)) == []
    assert len(_loads_after_first_branch(_row_form(prefetch=False))) >= 4  # one L2 round trip per row


def _split_mma() -> list[str]:
    # The shipped 896x7168 MMA tiles on Hopper: 14 splits of one 512-wide K block, weights loaded first.
    return _ptx_lines(
        triton_kernels.mma_gemm_kernel,
        4,
        K_SPLIT=512,
        BLOCK_M=16,
        BLOCK_N=32,
        BLOCK_K=512,
        SPLIT_K=14,
        EVEN_K=True,
        DOT_FP32=False,
        WEIGHTS_FIRST=True,
        GDC=True,
    )


def test_split_k_publishes_arrivals_with_acq_rel_and_resets_the_counter_without_a_fence():
    lines = _split_mma()
    atomics = [line for line in lines if line.startswith("@") and " atom." in line]
    assert len(atomics) == 2, atomics
    assert "atom.global.gpu.acq_rel.add" in atomics[0]
    assert "atom.global.gpu.relaxed.exch" in atomics[1]


@pytest.mark.parametrize("lines", [_split_mma, lambda: _row_form(prefetch=True)], ids=["mma", "simt rows"])
def test_under_dependent_launch_weights_stream_before_the_wait_and_nothing_is_written_before_it(lines):
    # What programmatic dependent launch may overlap with the kernel before: reads of the weights, which no
    # kernel writes. x, the partials, the counters and y are touched only after griddepcontrol.wait.
    ptx = lines()
    wait = next(i for i, line in enumerate(ptx) if line.startswith("griddepcontrol.wait;"))
    assert any("ld.global" in line for line in ptx[:wait])
    assert not any(op in line for line in ptx[:wait] for op in ("st.global", "atom.", "ld.global.cg"))
    assert any(line.startswith("griddepcontrol.launch_dependents;") for line in ptx[wait:])


def test_only_a_kernel_that_loads_its_weights_first_is_launched_dependent():
    # A dependent launch may start before the previous kernel ends: only the weights-first path waits for it
    # (griddepcontrol.wait) before reading x or writing; the K loop does not, so it must be launched plainly.
    from bisector.kernels import triton_gemm
    from bisector.kernels.kernel_kind import Kernel

    def mode(kernel: Kernel, n: int, k: int, pdl: bool) -> tuple[bool, bool]:
        tiles = triton_gemm.tiles_for(kernel, n, k)
        k_split = -(-k // (tiles.split_k * tiles.block_k)) * tiles.block_k
        return triton_gemm.launch_mode(kernel, tiles, k_split, pdl)

    assert mode(Kernel.MMA, 896, 7168, pdl=True) == (True, True)
    assert mode(Kernel.SIMT, 144, 7168, pdl=True) == (True, True)
    assert mode(Kernel.MMA, 4096, 4096, pdl=True) == (False, False)  # default tiles: 32 K blocks per program
    assert mode(Kernel.MMA, 896, 7168, pdl=False) == (False, False)
    looped = _ptx_lines(
        triton_kernels.mma_gemm_kernel, 4, K_SPLIT=4096, BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, SPLIT_K=1,
        EVEN_K=True, DOT_FP32=False, WEIGHTS_FIRST=False, GDC=False,
    )  # fmt: skip
    assert not any(line.startswith("griddepcontrol") for line in looped)
