"""Tests of utils.bench_linear, notebook 16's measurements: `.venv/bin/pytest utils/tests/test_bench_linear.py`."""
from utils import bench_linear as bl


def test_memory_of_the_published_configs():
    qwen = {r["tokens"]: r for r in bl.memory_rows(bl.QWEN3_NEXT_80B)}
    assert qwen[4096]["state MiB"] == qwen[1048576]["state MiB"] == 36 * 32 * 128 * 128 * 4 / 2**20  # 72 MiB, whatever the length
    assert qwen[1048576]["cache MiB"] == 1048576 * 12 * 2 * 2 * 256 * 2 / 2**20  # 12 full layers, 2 KV heads of 256, bf16
    assert qwen[1048576]["all-full MiB"] == 4 * qwen[1048576]["cache MiB"]
    kimi = {r["tokens"]: r for r in bl.memory_rows(bl.KIMI_LINEAR_48B)}
    assert kimi[131072]["cache MiB"] == 131072 * 7 * 576 * 2 / 2**20 and kimi[4096]["state MiB"] == 40.0
    assert "Kimi-Linear-48B-A3B" in bl.format_memory(list(kimi.values()))


def test_decode_and_prefill_rows_time_both_ways_on_equal_outputs():
    decode = bl.decode_rows([64, 256], heads=2, d=8, repeats=2)
    assert [r["context"] for r in decode] == [64, 256] and all(r["linear ms"] > 0 and r["attention ms"] > 0 for r in decode)
    assert decode[1]["cache MiB"] == 4 * decode[0]["cache MiB"] and decode[0]["state MiB"] == decode[1]["state MiB"]
    prefill = bl.prefill_rows([40], heads=2, d=8, chunk_size=16)  # checks chunked == recurrent before timing
    assert prefill[0]["tokens"] == 40 and prefill[0]["recurrent s"] > 0


def test_recall_fixed_states_fail_past_d_and_the_cache_does_not():
    rows = {r["pairs"]: r for r in bl.associative_recall([16, 512], d=64, trials=1)}
    assert rows[16]["softmax attention"] == 1.0 and rows[16]["delta rule"] == 1.0
    assert rows[512]["linear attention"] < 0.5 and rows[512]["delta rule"] < 0.5 and rows[512]["softmax attention"] > 0.95
    assert rows[512]["delta rule, newest 16"] > rows[512]["delta rule"]  # it overwrites: the newest survive
