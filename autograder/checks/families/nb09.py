"""Notebook 09's input families: MLA's prefill, decode step and chunk on both paths (state across
calls), a one-token prefill and large inputs; the cache-size counts on DeepSeek-V3's sizes."""
import utils.mla as ref
from autograder.checks import randn
from autograder.checks.harness import Family, Probe, Steps

CONFIGS = (  # rope_theta not the default, T and widths all different, q compressed or not
    (ref.MLAConfig(dim=20, n_heads=3, q_lora_rank=10, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4,
                   v_head_dim=5, max_seq_len=16, rope_theta=100.0), 90),
    (ref.MLAConfig(dim=18, n_heads=2, q_lora_rank=0, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=6,
                   v_head_dim=3, max_seq_len=12, rope_theta=50.0), 95),
)
SEGMENTS = ((0, 5), (5, 6), (6, 8))  # prefill, one decode step, a chunk at start_pos 6
N = SEGMENTS[-1][1]


def _mla_family(dim: int, seed: int) -> Family:
    """Prefill, a one-token decode step and a chunk, on both paths (state across calls), a
    one-token prefill, and inputs of size 30 (outputs only: a saturated softmax's gradient is rounding).
    What the buffers hold is not compared: the contract fixes what is cached per token, not the
    batch a buffer is allocated for (DeepSeek-V3 allocates max_batch_size)."""
    def steps(absorb):
        x = randn(2, N, dim, seed=seed)
        return Steps([("__call__", (x[:, a:b].clone(), a, absorb), {}) for a, b in SEGMENTS])
    return Family([
        *[Probe("state", f"prefill 5 tokens, decode 1 at start_pos 5, then 2 at 6, two batch items that differ (absorb={absorb})",
                lambda absorb=absorb: steps(absorb), f"预填充 5 个词元，在 start_pos 5 解码 1 个，再在 6 解码 2 个，两个不同的批次项（absorb={absorb}）")
          for absorb in (False, True)],
        *[Probe("edges", f"a one-token prefill (absorb={absorb})", lambda absorb=absorb: ((randn(2, 1, dim, seed=seed + 1), 0, absorb), {}),
                f"只有一个词元的预填充（absorb={absorb}）") for absorb in (False, True)],
        Probe("state", "a text of one, then a new text of two (absorb=True)",
              lambda: Steps([("__call__", (randn(1, 3, dim, seed=seed + 3), 0, True), {}), ("__call__", (randn(2, 4, dim, seed=seed + 4), 0, True), {}),
                             ("__call__", (randn(2, 1, dim, seed=seed + 5), 4, True), {})]),
              "先是一段文本，然后是两段新文本（absorb=True）"),
        *[Probe("extreme", f"inputs of size 30 (absorb={absorb})", lambda absorb=absorb: ((randn(2, 4, dim, seed=seed + 2) * 30, 0, absorb), {}),
                f"大小为 30 的输入（absorb={absorb}）") for absorb in (False, True)],
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads", "state", "holds"))


FAMILIES = {
    "MultiHeadLatentAttention": _mla_family(CONFIGS[0][0].dim, 901),
    "mla_cache_elements_per_token": Family([
        Probe("edges", "one layer", lambda: ((1, 7, 2), {}), "只有一层"),
        Probe("arguments", "DeepSeek-V3's 61 layers, 512 + 64", lambda: ((61, 512, 64), {}), "DeepSeek-V3 的 61 层，512 + 64"),
    ], compares=("values",)),
    "kv_cache_elements_per_token": Family([
        Probe("edges", "one layer, one KV head (MQA)", lambda: ((1, 1, 128), {}), "一层、一个键值头（MQA）"),
        Probe("arguments", "GQA: 8 KV heads over 95 layers", lambda: ((95, 8, 128), {}), "GQA：95 层、8 个键值头"),
    ], compares=("values",)),
}
FAMILY_WQ = _mla_family(CONFIGS[1][0].dim, 905)  # the second config: no query compression (wq)
