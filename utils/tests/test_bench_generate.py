"""notebook 07's two cost regimes: one row per context, prefill only up to prefill_max."""
from utils import bench_generate as bg
from utils.gpt import GPTConfig

TINY = GPTConfig(vocab_size=64, context_length=64, emb_dim=16, n_heads=2, n_layers=1)


def test_step_times_gives_a_row_per_context_and_no_prefill_past_the_limit():
    rows = bg.step_times(bg.build(TINY), [8, 16, 32], steps=2, prefill_max=16)
    assert [r["context"] for r in rows] == [8, 16, 32]
    assert rows[2]["prefill_s"] is None and all(r["prefill_s"] > 0 for r in rows[:2])
    assert all(r["decode_s"] > 0 for r in rows)
