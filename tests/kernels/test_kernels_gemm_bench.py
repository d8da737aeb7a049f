"""The GEMM bench's checks on CPU at a small shape (benchmarks/bench_kernels_gemm_cpu.py runs the full shapes)."""

import torch

from bisector.kernels import gemm_bench


def test_a_cpu_shape_run_checks_and_times_both_kernels_and_the_reference():
    shape = gemm_bench.measure_shape(40, 100, [1, 2], sweep=False, bandwidth=None, device=torch.device("cpu"))
    for run in (shape.simt, shape.mma):
        assert run.error == ""
        assert run.check is not None
        assert run.check.invariant_by_m
        assert run.check.invariant_by_position
        assert run.check.repeatable
        assert run.check.rel_err_fp32 < 1e-5
        assert run.check.same_bits_as_shipped
        assert set(run.us) == {1, 2}
        assert all(us > 0 for us in run.us.values())
        assert run.ok
    assert set(shape.linear_us) == {1, 2}
    assert set(shape.table_kernel) == {1, 2}
    assert shape.hbm_bound_us is None


def _run(us: float, ok: bool = True, same_bits: bool = True) -> gemm_bench.KernelRun:
    check = gemm_bench.Check(1e-7, 1e-3, ok, True, True, same_bits)
    return gemm_bench.KernelRun("mma", [16, 128, 14], check, {1: us})


def test_the_sweep_picks_the_fastest_tiles_that_keep_the_shipped_numerics():
    shipped, other_bits, same_bits, broken = _run(10.0), _run(5.0, same_bits=False), _run(8.0), _run(1.0, ok=False)
    assert gemm_bench.pick([shipped, other_bits, same_bits, broken]) is same_bits
    assert gemm_bench.pick([shipped, other_bits, broken]) is shipped
    assert gemm_bench.pick([_run(9.0, same_bits=False), other_bits]).us == {1: 9.0}  # none keeps them: the first


def test_a_reported_kernel_that_fails_a_check_is_named():
    def shape(mma: gemm_bench.KernelRun) -> gemm_bench.ShapeRun:
        return gemm_bench.ShapeRun(896, 7168, _run(7.0), mma, {1: 10.0}, None, 2.7, [])

    assert gemm_bench.failed_checks([shape(_run(7.0))]) == []
    # other bits than the shipped tiles without dependent launch (weights first moved a bit), or a failed check
    assert gemm_bench.failed_checks([shape(_run(7.0, same_bits=False)), shape(_run(7.0, ok=False))]) == [
        "896x7168 mma",
        "896x7168 mma",
    ]
