from utils.bench_sparse import bytes_read, crossover, decode_step_benchmark, rolling_cache_bytes, v32_layer
from utils.dsa import DSAConfig


def test_bytes_read_per_step():
    cfg = v32_layer(1024, 40000)
    b = bytes_read(cfg, 32768)
    assert b["dense"] == 32769 * 576 * 4
    assert b["sparse"] == (32769 * 128 + 2048 * 576) * 4
    assert bytes_read(cfg, 100)["sparse"] == 101 * (128 + 576) * 4  # top-k covers every position


def test_crossover_is_where_sparse_stays_faster():
    rows = [{"context": c, "speedup": s} for c, s in ((1, 0.8), (2, 1.1), (3, 0.9), (4, 1.5), (5, 2.0))]
    assert crossover(rows) == 4
    assert crossover(rows[:1]) is None


def test_benchmark_runs_and_checks_sparse_equals_dense_below_topk():
    cfg = DSAConfig(dim=32, n_heads=2, q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4,
                    v_head_dim=8, max_seq_len=65, index_n_heads=2, index_head_dim=8, index_topk=40)
    rows = decode_step_benchmark([16, 64], repeats=1, cfg=cfg)  # 16: compared with dense inside; 64: sparse
    assert [r["context"] for r in rows] == [16, 64] and all(r["dense_ms"] > 0 and r["sparse_ms"] > 0 for r in rows)


def test_rolling_cache_memory_does_not_grow():
    sizes = rolling_cache_bytes([1024, 16384], window=16, num_kv_heads=2, head_dim=8)
    assert sizes[1024] == sizes[16384] == 2 * 16 * 2 * 8 * 4
