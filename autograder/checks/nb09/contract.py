"""Notebook 09's contracts and input spaces: MLA's calls on both paths (state across calls: a
prefill, a decode step, a chunk, a new text, a step past max_seq_len), its configurations (the
query compressed or not, sizes past the model answer's), dtypes and layouts; the cache-size
counts on DeepSeek-V3's sizes and others."""
import utils.mla as ref
from autograder.checks import randn
from autograder.checks.core import rules
from autograder.checks.core.harness import Family, Probe, Steps
from autograder.checks.core.rules import Contract, Raises
from autograder.checks.core.space import Space

_INT = ("an `int` (a number of elements)", "`int`（元素的个数）")
CONTRACTS = rules.register("09", [
    Contract("MultiHeadLatentAttention", dtypes=("float32", "float64"),
             dtype=("the layer moved with `.to(dtype)` computes in that dtype (softmax in float32, then back)",
                    "用 `.to(dtype)` 转换后的层用该 dtype 计算（softmax 用 float32，再转换回来）"),
             raises=(Raises("Exception", "`start_pos + T` is more than `cfg.max_seq_len` (the caches hold max_seq_len positions)",
                            "`start_pos + T` 大于 `cfg.max_seq_len`（缓存只能容纳 max_seq_len 个位置）"),),
             preconditions=(("a decode step (`start_pos > 0`) continues the sequences of the last prefill (`start_pos == 0`), "
                             "no more of them, at the position where they end",
                             "解码步骤（`start_pos > 0`）接着上一次预填充（`start_pos == 0`）的序列继续，序列数不多于它，并且从它们结束的位置开始"),),
             notes=(("All linear layers are without bias; the caches are the buffers `k_cache`, `v_cache` (absorb=False) and "
                     "`kv_cache`, `pe_cache` (absorb=True), in the dtype of `x` (a layer moved to float64 caches float64).",
                     "所有线性层都不带偏置；缓存是缓冲区 `k_cache`、`v_cache`（absorb=False）和 `kv_cache`、`pe_cache`（absorb=True），"
                     "dtype 与 `x` 相同（转换为 float64 的层缓存 float64）。"),
                    ("An absorbed decode step's multiply-adds are counted: at most 1.25 times the course's (the cached keys and values "
                     "are never rebuilt).",
                     "吸收路径解码步骤的乘加次数会被统计：至多为课程实现的 1.25 倍（缓存的键和值从不重建）。"))),
    Contract("mla_cache_elements_per_token", dtypes=(), dtype=_INT, device="none"),
    Contract("kv_cache_elements_per_token", dtypes=(), dtype=_INT, device="none"),
])

CONFIGS = (  # rope_theta not the default, T and widths all different, q compressed or not
    (ref.MLAConfig(dim=20, n_heads=3, q_lora_rank=10, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4,
                   v_head_dim=5, max_seq_len=16, rope_theta=100.0), 90),
    (ref.MLAConfig(dim=18, n_heads=2, q_lora_rank=0, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=6,
                   v_head_dim=3, max_seq_len=12, rope_theta=50.0), 95),
)
SEGMENTS = ((0, 5), (5, 6), (6, 8))  # prefill, one decode step, a chunk at start_pos 6
N = SEGMENTS[-1][1]


# The input space ---------------------------------------------------------------------------
_CONFIGS = {
    "q compressed, 3 heads": CONFIGS[0][0],
    "no q compression (wq), 2 heads": CONFIGS[1][0],
    # past the first two's sizes: nope + rope 12 (both others: 10), 4 heads, v_head_dim 7, max_seq_len 9
    "4 heads, nope + rope = 12": ref.MLAConfig(dim=24, n_heads=4, q_lora_rank=12, kv_lora_rank=10, qk_nope_head_dim=8,
                                               qk_rope_head_dim=4, v_head_dim=7, max_seq_len=9, rope_theta=1000.0),
}
# batch and (start_pos, T) of each call; the last level's second call ends past max_seq_len (the contract's Raises)
_SEQUENCES = {
    "one prefill of 5": [(2, 0, 5)],
    "prefill 5, decode 1, a chunk of 2": [(2, 0, 5), (2, 5, 1), (2, 6, 2)],
    "a one-token prefill, then one token": [(3, 0, 1), (3, 1, 1)],
    "a text of one, then a new text of two, decoded": [(1, 0, 3), (2, 0, 4), (2, 4, 1)],
    "prefill 3 sequences, decode the first 2": [(3, 0, 4), (2, 4, 1), (2, 5, 2)],
    "prefill 3, then a chunk past max_seq_len": [(2, 0, 3), (2, 3, "past")],
}


def _mla_point(point, seed):
    cfg = _CONFIGS[point["shape:config"]]
    scale = {"normal": 1.0, "large (size 30)": 30.0, "tiny (size 1e-3: kv_norm's eps shows)": 1e-3}[point["values"]]
    calls = []
    for n, (batch, start, T) in enumerate(_SEQUENCES[point["sequence"]]):
        T = cfg.max_seq_len - start + 1 if T == "past" else T
        calls.append(("__call__", (randn(batch, T, cfg.dim, seed=seed + n) * scale, start, point["flag:absorb"]), {}))
    return Steps(calls, ctor=(cfg,))


SPACES = {
    "MultiHeadLatentAttention": Space({"shape:config": tuple(_CONFIGS), "sequence": tuple(_SEQUENCES), "flag:absorb": (False, True),
                                       "values": ("normal", "large (size 30)", "tiny (size 1e-3: kv_norm's eps shows)"),
                                       "dtype": CONTRACTS["MultiHeadLatentAttention"].dtypes,
                                       "layout": ("contiguous", "column-major", "strided")}, _mla_point,
                                      no_grads=lambda p: p["values"] == "large (size 30)", seeds=(0,)),  # one seed: mutants' 30 s
    "mla_cache_elements_per_token": Space({"shape": ((1, 7, 2), (61, 512, 64), (3, 10, 4), (60, 512, 0), (27, 1000, 130))},
                                          lambda p, seed: (p["shape"], {})),
    "kv_cache_elements_per_token": Space({"shape": ((1, 1, 128), (95, 8, 128), (3, 5, 7), (61, 128, 128), (2, 1000, 3))},
                                         lambda p, seed: (p["shape"], {})),
}


def _mla_probes(dim: int, seed: int) -> list:
    """Prefill, a one-token decode step and a chunk, on both paths (state across calls), a
    one-token prefill, and inputs of size 30 (outputs only: a saturated softmax's gradient is rounding).
    What the buffers hold is compared only beyond what each held at the start: the contract fixes
    what is cached per token, not the batch a buffer is allocated for (DeepSeek-V3 allocates max_batch_size)."""
    def steps(absorb):
        x = randn(2, N, dim, seed=seed)
        return Steps([("__call__", (x[:, a:b].clone(), a, absorb), {}) for a, b in SEGMENTS])
    return [
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
    ]


FAMILIES = {
    "MultiHeadLatentAttention": Family(_mla_probes(CONFIGS[0][0].dim, 901), space=SPACES["MultiHeadLatentAttention"],
                                       compares=("values", "shape", "dtype", "device", "inputs", "grads", "state", "holds")),
    "mla_cache_elements_per_token": Family([
        Probe("edges", "one layer", lambda: ((1, 7, 2), {}), "只有一层"),
        Probe("arguments", "DeepSeek-V3's 61 layers, 512 + 64", lambda: ((61, 512, 64), {}), "DeepSeek-V3 的 61 层，512 + 64"),
    ], compares=("values",), space=SPACES["mla_cache_elements_per_token"]),
    "kv_cache_elements_per_token": Family([
        Probe("edges", "one layer, one KV head (MQA)", lambda: ((1, 1, 128), {}), "一层、一个键值头（MQA）"),
        Probe("arguments", "GQA: 8 KV heads over 95 layers", lambda: ((95, 8, 128), {}), "GQA：95 层、8 个键值头"),
    ], compares=("values",), space=SPACES["kv_cache_elements_per_token"]),
}
