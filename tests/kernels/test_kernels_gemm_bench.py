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
        assert set(run.us) == {1, 2}
        assert all(us > 0 for us in run.us.values())
        assert run.ok
    assert set(shape.linear_us) == {1, 2}
    assert set(shape.table_kernel) == {1, 2}
    assert shape.hbm_bound_us is None
