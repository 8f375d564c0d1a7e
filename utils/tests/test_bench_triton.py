"""utils.bench_triton, notebook 15's measurement, on this machine: on a CPU it runs the kernels in
Triton's interpreter at small sizes (the GPU run is `python -m utils.bench_triton` on a GPU)."""
import pytest
import torch

from utils import bench_triton
from utils.flash_triton import interpreted, tolerance


def test_measure_times_each_contender_and_checks_its_error():
    rows = bench_triton.measure([(1, 2, 16)], [64, 80], causal_modes=(False, True), dtype=torch.float32, reps=1)
    assert [(r["causal"], r["T"]) for r in rows] == [(False, 64), (False, 80), (True, 64), (True, 80)]
    for r in rows:
        for name in ("kernel", "tiled", "SDPA"):
            assert r[f"{name} s"] > 0 and r[f"{name} TFLOP/s"] > 0
            assert r[f"{name} err"] < 10 * tolerance()["atol"], (name, r)
    table = bench_triton.format_rows(rows)
    assert "kernel/SDPA" in table and len(table.splitlines()) == 5
    assert "goal 2x" in bench_triton.summary([{**rows[0], "T": 4096}])


def test_the_tiled_forward_is_skipped_past_its_budget():
    rows = bench_triton.measure([(1, 1, 16)], [64, 128], causal_modes=(False,), dtype=torch.float32, reps=1, tiled_budget=0.0)
    assert "tiled s" in rows[0] and "tiled s" not in rows[1]
    assert "skipped" in bench_triton.format_rows(rows)


@pytest.mark.skipif(not interpreted(), reason="on a GPU the command is the full measurement, minutes long: run it by hand")
def test_the_command_runs():
    rows = bench_triton.main([])
    assert len(rows) == 4
