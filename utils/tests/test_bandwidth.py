import pytest
import torch

from utils import bandwidth as bw


def test_memory_bandwidth_is_measured_once_and_plausible(monkeypatch):
    first = bw.memory_bandwidth(2**24, repeats=2)  # 16 MiB: quick, still a real copy
    assert 1e8 < first < 1e13  # between 0.1 GB/s and 10 TB/s
    # Cached: the second call times nothing (counted, not clocked: a busy machine can take
    # milliseconds to answer even a dictionary lookup).
    calls = []
    monkeypatch.setattr(bw, "timed", lambda *a, **k: calls.append(a) or (1.0, None))
    assert bw.memory_bandwidth(2**24, repeats=2) == first
    assert calls == []


def test_memory_bandwidth_is_kept_per_thread_count():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = bw.memory_bandwidth(2**22, repeats=1)
        assert bw._MEASURED[("cpu", 1, 2**22)] == one
    finally:
        torch.set_num_threads(threads)


def test_fraction_is_bytes_per_second_over_bandwidth():
    assert bw.bandwidth_fraction(1e6, 50.0, bandwidth=1e8) == pytest.approx(0.5)
    assert bw.bandwidth_fraction(2e6, 10.0, bandwidth=1e9) == pytest.approx(0.02)
    with pytest.raises(ValueError):
        bw.bandwidth_fraction(0, 10.0, bandwidth=1e9)
    with pytest.raises(ValueError):
        bw.memory_bandwidth(2, repeats=1)


def test_line_says_bytes_speed_and_fraction():
    line = bw.bandwidth_line(12.5e6, 40.0, bandwidth=2e9)
    assert line == "12.50 MB read per token x 40.0 tokens/s = 0.50 GB/s, 25.0% of the measured 2.0 GB/s"


def test_read_bandwidth_is_measured_once_and_plausible(monkeypatch):
    first = bw.read_bandwidth(2**24, repeats=2)  # 16 MiB: quick, still a real read
    assert 1e8 < first < 1e13
    calls = []
    monkeypatch.setattr(bw, "timed", lambda *a, **k: calls.append(a) or (1.0, None))
    assert bw.read_bandwidth(2**24, repeats=2) == first
    assert calls == []
    with pytest.raises(ValueError):
        bw.read_bandwidth(1024, repeats=1)
    with pytest.raises(ValueError):
        bw.read_bandwidth(2**24, device="meta")


def test_last_level_cache_is_a_size_or_none():
    llc = bw.last_level_cache_bytes()
    assert llc is None or 2**10 <= llc <= 2**36
