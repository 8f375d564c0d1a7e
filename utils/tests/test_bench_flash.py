"""Tests of utils.bench_flash, notebook 14's measurements: `.venv/bin/pytest utils/tests/test_bench_flash.py`."""
import time

import pytest
import torch

from utils import bench_flash

MiB = 2 ** 20


def allocate_and_free():
    big = torch.ones(16 * MiB)  # 64 MiB, written, then dropped before returning
    return float(big[0]) + torch.zeros(4).sum()


@pytest.fixture(params=["high-water mark", "fallback"])
def method(request, monkeypatch):
    if request.param == "fallback":
        monkeypatch.setattr(bench_flash, "_high_water_mark_available", lambda: False)
    elif not bench_flash._high_water_mark_available():
        pytest.skip("no /proc/self/clear_refs on this system")
    return request.param


def test_peak_counts_what_a_call_held_even_when_freed_before_it_returned(method):
    peak, result = bench_flash.peak_extra_memory(allocate_and_free)
    assert float(result) == 1.0
    assert 60 * MiB <= peak <= 80 * MiB, peak / MiB


def test_peak_of_a_small_call_is_small(method):
    peak, _ = bench_flash.peak_extra_memory(lambda: torch.ones(1000).sum())
    assert peak < 8 * MiB, peak / MiB


def test_measure_reports_the_three_variants_with_equal_outputs():
    rows = bench_flash.measure([128, 256], d=16, block=64)
    assert [r["T"] for r in rows] == [128, 256]
    assert all(r[f"{n} {u}"] >= 0 for r in rows for n in ("naive", "tiled", "SDPA") for u in ("MiB", "s"))
    assert "naive" in bench_flash.format_rows(rows)


def test_the_time_is_the_call_alone(method):
    peak, seconds, result = bench_flash.peak_memory_and_time(lambda: time.sleep(0.05) or torch.ones(3).sum())
    assert float(result) == 3.0 and peak < 8 * MiB
    assert 0.05 <= seconds < 0.5, seconds



def test_measure_repeats_a_size_whose_time_is_out_of_order(monkeypatch):
    calls = []

    def fake(fn, q, k, v):  # times proportional to T, except the very first call: a busy moment
        calls.append(q.shape[2])
        return 0, (10.0 if len(calls) == 1 else q.shape[2] / 128), fn(q, k, v)

    monkeypatch.setattr(bench_flash, "peak_memory_and_time", fake)
    rows = bench_flash.measure([128, 256], d=16, block=64)
    assert calls == [128] * 3 + [256] * 3 + [128] * 3 + [256] * 3  # both sizes once more, then in order
    assert rows[0]["naive s"] == 1.0 and bench_flash.order_warning(rows) is None
