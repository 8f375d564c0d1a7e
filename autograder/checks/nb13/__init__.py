"""Hidden checks of notebook 13: sliding windows, attention sinks, DeepSeek Sparse Attention.

Values are compared with utils.sliding_window and utils.dsa on deterministic inputs; when they
differ, autograder.checks.nb13.dsa_mistakes restates the reference with one known mistake at a time
and the message names it. The rolling cache is fed keys that carry their own position (rolling_cache.py), so the
order, the count and the storage of what it returns can be read off directly.
"""
import torch

import utils.dsa as ref
from autograder.checks import (graded_checks, call, course_runs, expect, expect_close, expect_known, expect_tensor, fail, load_state,
                               own_module, own_work, randn, seeded_state)
from autograder.checks.nb13 import dsa_mistakes as mis
from autograder.checks.nb13.contract import FAMILIES, INDEX_CFG, SPARSE_CFG
from autograder.checks.core import elsewhere
from autograder.checks.core.harness import _where, same_as_reference, same_as_reference_module
from autograder.checks.nb13.rolling_cache import _run_cache, _tensors
from utils.sliding_window import attention_with_sinks as ref_sinks
from utils.sliding_window import sliding_window_mask as ref_mask
from utils.sliding_window import RollingKVCache as RefCache

MASK_CASES = ((5, 5, 2), (3, 7, 3), (4, 6, 1), (6, 6, 6), (2, 5, 9), (1, 8, 4))
SEGMENTS = ((0, 5), (5, 6), (6, 9))  # prefill, one decode step, a chunk at start_pos 6


def _kept(fn):
    """topk_key_mask's result read as what the contract fixes (ties are broken arbitrarily): how many keys each
    query keeps, and the scores it keeps, sorted."""
    def topk_key_mask(index_scores, topk):
        mask = fn(index_scores, topk)
        if not (isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.shape == index_scores.shape):
            return mask
        kept = index_scores.detach().masked_fill(mask, float("-inf")).sort(-1, descending=True).values
        return (~mask).sum(-1), kept
    return topk_key_mask


def _explain_kept(probe, out, expected):
    en_on, zh_on = _where(probe)
    return (f"topk_key_mask keeps the wrong keys{en_on}: exactly min(topk, number of finite scores) per query, the highest "
            "ones (ties broken any way), never a -inf one.",
            f"topk_key_mask 保留的键不对{zh_on}：每个查询恰好保留 min(topk, 有限分数的个数) 个最高的分数（并列时任选），"
            "永远不选 -inf 的位置。")


def check_sliding_window_mask(sliding_window_mask):
    fn = sliding_window_mask
    for T_q, T_k, window in MASK_CASES:
        with own_work(fn, "sliding_window_mask"):
            got = call(fn, T_q, T_k, window, name="sliding_window_mask")
        expect_tensor(got, "sliding_window_mask's result", "sliding_window_mask 的结果")
        expect(got.dtype == torch.bool, "The mask must be a boolean tensor (True = blocked).", "掩码必须是布尔张量（True 表示屏蔽）。",
               f"dtype {got.dtype}")
        want = ref_mask(T_q, T_k, window)
        if tuple(got.shape) == tuple(want.shape) and torch.equal(got, want):
            continue
        for name, variant in mis.window_mask_variants(T_q, T_k, window).items():
            if tuple(got.shape) == tuple(variant.shape) and torch.equal(got, variant):
                fail(*mis.MASK_MISTAKES[name], f"num_queries={T_q}, num_keys={T_k}, window={window}")
        fail("sliding_window_mask is wrong: the query at absolute position p = i + num_keys - num_queries sees the keys p - window + 1 .. p.",
             "sliding_window_mask 不对：绝对位置 p = i + num_keys - num_queries 的查询看到键 p - window + 1 .. p。",
             f"num_queries={T_q}, num_keys={T_k}, window={window}; got {tuple(got.shape)} with {int((~got).sum())} open, "
             f"expected {int((~want).sum())}")
    reference = ref_mask  # looked up before own_work blocks it
    with own_work(fn, "sliding_window_mask"):
        same_as_reference(fn, reference, FAMILIES["sliding_window_mask"], "sliding_window_mask")


def check_RollingKVCache(RollingKVCache):
    cls = RollingKVCache
    for window, chunks in ((4, [1] * 9), (4, [3, 3, 3]), (3, [2, 2, 1, 4]), (4, [7, 2]), (5, [2, 6, 1, 1]), (1, [1, 2, 1])):
        cache, _ = _run_cache(cls, window, chunks)
    _, k = _run_cache(cls, 3, [2, 3], torch.float64)
    expect(k.dtype == torch.float64, "The cache must keep the dtype it was built with (dtype=...).",
           "缓存必须保持构造时指定的 dtype（dtype=...）。", f"dtype {k.dtype}")
    with own_work(cls, "RollingKVCache"), elsewhere.pretence() as there:  # another device, emulated on the CPU
        other = call(cls, 2, 3, 3, 4, dtype=torch.float32, device=elsewhere.ELSEWHERE, name="RollingKVCache")
    stray = [tuple(t.shape) for t in _tensors(other) if not there(t)]
    expect(not stray, "The cache must allocate its storage on the device it is given (device=...).",
           "缓存必须在给定的设备（device=...）上分配存储。",
           f"tensors of shape {stray} not made on device={elsewhere.ELSEWHERE} (emulated on the CPU)")
    with own_work(cls, "RollingKVCache"):
        call(cache.reset, name="RollingKVCache.reset")
        k, _ = call(cache.update, torch.ones(2, 3, 1, 4), torch.ones(2, 3, 1, 4), name="RollingKVCache.update")
    expect(cache.seq_len == 1 and k.shape[2] == 1, "After reset() the cache starts a new text: seq_len 0 and no old positions returned.",
           "reset() 之后缓存开始一段新文本：seq_len 为 0，也不返回旧的位置。", f"seq_len {cache.seq_len}, {k.shape[2]} positions")
    reference = RefCache  # looked up before own_work blocks it
    with own_work(cls, "RollingKVCache"):
        same_as_reference_module(cls, reference, (2, 3, 2, 3), FAMILIES["RollingKVCache"], "RollingKVCache")


def check_attention_with_sinks(attention_with_sinks):
    fn = attention_with_sinks
    q, k, v = randn(2, 3, 4, 8, seed=130), randn(2, 3, 6, 8, seed=131), randn(2, 3, 6, 5, seed=132)
    sinks = torch.tensor([-1.5, 0.3, 2.0])
    blocked = torch.ones(4, 6, dtype=torch.bool)
    blocked[1:, 1:5] = False  # row 0 fully blocked
    for mask in (None, blocked, blocked.expand(2, 1, 4, 6), ref_mask(4, 6, 3)):
        args = (q.clone(), k.clone(), v.clone(), sinks.clone(), None if mask is None else mask.clone())
        with own_work(fn, "attention_with_sinks"):
            got = call(fn, *args, name="attention_with_sinks")
        want = ref_sinks(q, k, v, sinks, mask)
        expect_known(got, want, lambda: _sink_mistakes(q, k, v, sinks, mask),
                     "attention_with_sinks is wrong: scores scaled by 1/sqrt(d), the sink logit as an extra column, softmax, drop that column, then the values.",
                     "attention_with_sinks 不对：分数按 1/sqrt(d) 缩放，sink logit 作为额外一列，softmax，去掉这一列，再乘以值。")
        expect(all(torch.equal(a, b) for a, b in zip(args, (q, k, v, sinks))), "attention_with_sinks must not change its inputs in place.",
               "attention_with_sinks 不能原地修改它的输入。")
    _expect_sink_gradient_and_dtype(fn, q, k, v, sinks)
    reference = ref_sinks  # looked up before own_work blocks it
    with own_work(fn, "attention_with_sinks"):
        same_as_reference(fn, reference, FAMILIES["attention_with_sinks"], "attention_with_sinks", grads=True)


def _expect_sink_gradient_and_dtype(fn, q, k, v, sinks):
    """The sinks are learned: a gradient must reach them; float64 inputs stay float64."""
    learned = sinks.clone().requires_grad_(True)
    with own_work(fn, "attention_with_sinks"):
        out = call(fn, q, k, v, learned, name="attention_with_sinks")
    expect(isinstance(out, torch.Tensor) and out.requires_grad,
           "The sinks are learned parameters: compute with the sinks tensor itself (no .item(), no new tensor built from it) so that a gradient reaches it.",
           "sink 是可学习的参数：要直接用 sinks 张量计算（不要 .item()，也不要用它新建张量），这样梯度才能传到它。")
    try:
        out.sum().backward()
    except RuntimeError as e:
        fail("attention_with_sinks's output cannot be backpropagated through: check for in-place writes into tensors autograd needs.",
             "无法对 attention_with_sinks 的输出做反向传播：检查是否对自动求导需要的张量做了原地写入。", f"{type(e).__name__}: {e}")
    expect(learned.grad is not None and bool(learned.grad.abs().gt(0).all()),
           "The sinks are learned parameters: compute with the sinks tensor itself (no .item(), no new tensor built from it) so that a gradient reaches it.",
           "sink 是可学习的参数：要直接用 sinks 张量计算（不要 .item()，也不要用它新建张量），这样梯度才能传到它。", f"grad {learned.grad}")
    with own_work(fn, "attention_with_sinks"):
        out = call(fn, q.double(), k.double(), v.double(), sinks.double(), name="attention_with_sinks")
    expect_close(out, ref_sinks(q.double(), k.double(), v.double(), sinks.double()),
                 "attention_with_sinks must work in the dtype of its inputs (float64 here): build the sink column with the scores' dtype.",
                 "attention_with_sinks 必须在输入的 dtype（这里是 float64）下工作：用分数的 dtype 构造 sink 这一列。")
    expect(out.dtype == torch.float64, "attention_with_sinks must keep the dtype of its inputs (float64 here).",
           "attention_with_sinks 必须保持输入的 dtype（这里是 float64）。", f"dtype {out.dtype}")


def _sink_mistakes(q, k, v, sinks, mask):
    return [(out, *mis.SINK_MISTAKES[name]) for name, out in mis.sink_variants(q, k, v, sinks, mask).items()]


def _finite(scores):
    return scores.masked_fill(torch.isneginf(scores), 0.0)  # the future is checked on its own


def _indexer_mistakes(state, x, qr, start, end, got, want):
    def outputs():
        for name, (en, zh) in mis.INDEX_MISTAKES.items():
            yield _finite(mis.index_scores(state, INDEX_CFG, x[:, :end], qr[:, :end], torch.arange(end), name)[:, start:end]), en, zh
        restart = torch.cat([torch.arange(e - s) for s, e in SEGMENTS])[:end]
        yield (_finite(mis.index_scores(state, INDEX_CFG, x[:, :end], qr[:, :end], restart)[:, start:end]),
               "At decode the rope positions must continue from start_pos; yours restart at 0.",
               "解码时 rope 的位置必须从 start_pos 接着数；你的位置又从 0 开始了。")
        ratio = float((got * want).sum() / (want * want).sum().clamp_min(1e-30))  # any other constant factor
        if abs(ratio - 1) > 1e-3:
            yield (want * ratio, f"Your index scores are the right ones times {ratio:.4g}: the head weights are weights_proj(x) * index_n_heads**-0.5 * index_head_dim**-0.5, no other factor.",
                   f"你的索引分数是正确分数乘以 {ratio:.4g}：头权重是 weights_proj(x) * index_n_heads**-0.5 * index_head_dim**-0.5，没有别的因子。")
    return outputs


def check_LightningIndexer(LightningIndexer):
    cls, cfg = LightningIndexer, INDEX_CFG
    with own_work(cls, "LightningIndexer"):
        module = own_module(cls, cfg)
    wk = getattr(module, "wk", None)
    if isinstance(wk, torch.nn.Linear) and wk.out_features == cfg.index_n_heads * cfg.index_head_dim:
        fail("The indexer has ONE key per token shared by all index heads: wk maps dim to index_head_dim, not a key per head.",
             "索引器每个词元只有一个键，由所有索引头共享：wk 把 dim 映射到 index_head_dim，而不是每个头一个键。", f"wk has {wk.out_features} outputs")
    expect(isinstance(getattr(module, "k_norm", None), torch.nn.LayerNorm), "k_norm must be nn.LayerNorm(index_head_dim, eps=1e-6), as in V3.2's Indexer.",
           "k_norm 必须是 nn.LayerNorm(index_head_dim, eps=1e-6)，与 V3.2 的 Indexer 一致。", f"got {type(getattr(module, 'k_norm', None)).__name__}")
    reference = ref.LightningIndexer(cfg)
    state = seeded_state(reference, 133)
    reference.load_state_dict(state)
    load_state(module, state, "LightningIndexer")
    x, qr = randn(2, 9, cfg.dim, seed=134), randn(2, 9, cfg.q_lora_rank, seed=135)
    with torch.no_grad():
        expected = reference(x, qr)
    for start, end in SEGMENTS:
        with torch.no_grad(), own_work(cls, "LightningIndexer"):
            got = call(module, x[:, start:end], qr[:, start:end], start, name="LightningIndexer.forward")
        expect_tensor(got, "The index scores", "索引分数")
        want = expected[:, start:end, :end]
        expect(tuple(got.shape) == tuple(want.shape), "The index scores have shape (B, T, start_pos + T): one per cached position and the new ones.",
               "索引分数的形状是 (B, T, start_pos + T)：每个缓存位置和新位置各一个。", f"shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        future = torch.isinf(want) & (want < 0)
        expect(bool((got[future] == float("-inf")).all()), "Positions after a query must get -inf in its index scores (they may never be selected).",
               "查询之后的位置在它的索引分数中必须是 -inf（它们永远不能被选中）。")
        got, want = got.masked_fill(future, 0.0), want.masked_fill(future, 0.0)
        expect_known(got, want, _indexer_mistakes(state, x, qr, start, end, got, want),
                     "LightningIndexer's scores are wrong: compare each step with the description above the exercise.",
                     "LightningIndexer 的分数不对：请对照练习上方的说明逐步检查。")
    with torch.no_grad(), own_work(cls, "LightningIndexer"):  # start_pos 0 starts a new text, here of another batch size
        got = call(module, x[:1, 4:7], qr[:1, 4:7], 0, name="LightningIndexer.forward")
        with course_runs():
            want = reference(x[:1, 4:7], qr[:1, 4:7])
    expect_close(got.masked_fill(torch.isneginf(want), 0.0), want.masked_fill(torch.isneginf(want), 0.0),
                 "With start_pos=0 the indexer starts a new text (of any batch size): no key of the previous text may remain.",
                 "start_pos=0 时索引器开始一段新文本（批大小任意）：不能留下上一段文本的任何键。")
    reference = ref.LightningIndexer  # looked up before own_work blocks it
    with own_work(cls, "LightningIndexer"):
        same_as_reference_module(cls, reference, (cfg,), FAMILIES["LightningIndexer"], "LightningIndexer", grads=True, state_seed=133)


def _call_topk(fn, scores, topk):
    if topk <= scores.shape[-1]:
        return call(fn, scores, topk, name="topk_key_mask")
    try:  # a query may have fewer positions than topk: torch.topk refuses k > size
        return fn(scores, topk)
    except (AssertionError, NotImplementedError):
        raise
    except Exception as e:
        fail(f"topk may exceed the number of positions (here topk={topk}, {scores.shape[-1]} positions): select min(topk, positions) keys.",
             f"topk 可能超过位置数（这里 topk={topk}，共 {scores.shape[-1]} 个位置）：选 min(topk, 位置数) 个键。", f"{type(e).__name__}: {e}")


def _topk_across_batch(scores, topk):  # the mistake: one top-k over the whole batch for each t
    flat = scores.transpose(0, 1).flatten(1)  # (T, B * S)
    keep = torch.zeros_like(flat, dtype=torch.bool).scatter(-1, flat.topk(min(topk, flat.shape[-1]), -1).indices, True)
    return ~(keep & torch.isfinite(flat)).view(scores.shape[1], scores.shape[0], -1).transpose(0, 1)


def _own_topk(fn):
    """utils.dsa.topk_indices, the exercise's selection, is refused through shortcuts.OWN_HELPERS."""
    return own_work(fn, "topk_key_mask")


def check_topk_key_mask(topk_key_mask):
    fn = topk_key_mask
    scores = torch.linspace(-2, 3, 2 * 5 * 7)[torch.randperm(70, generator=torch.Generator().manual_seed(136))].view(2, 5, 7)
    scores = scores.masked_fill(torch.ones(5, 7, dtype=torch.bool).triu(3), float("-inf"))  # row t has t + 3 finite
    for topk in (1, 3, 5, 7, 20):
        given = scores.clone() if topk != 5 else scores.double().transpose(0, 1).contiguous().transpose(0, 1)  # float64, not contiguous
        with _own_topk(fn):
            got = _call_topk(fn, given, topk)
        expect_tensor(got, "topk_key_mask's result", "topk_key_mask 的结果")
        expect(got.dtype == torch.bool and got.shape == scores.shape, "The mask is boolean, shaped like the scores (B, T, S), True = blocked.",
               "掩码是布尔型，形状与分数相同 (B, T, S)，True 表示屏蔽。", f"{got.dtype}, shape {tuple(got.shape)}")
        expect(torch.equal(given.to(scores.dtype), scores), "topk_key_mask must not change the scores in place.", "topk_key_mask 不能原地修改分数。")
        want = ref.topk_key_mask(scores, topk)
        if torch.equal(got, want):
            continue
        evidence = f"topk={topk}: kept {(~got).sum(-1).tolist()} keys per query, expected {(~want).sum(-1).tolist()}"
        if torch.equal(got, ~want):
            fail("True means BLOCKED: the mask is True for the keys NOT selected.", "True 表示屏蔽：未被选中的键在掩码中为 True。", evidence)
        if torch.equal(got, _topk_across_batch(scores, topk)):
            fail("The top-k is per query: each query (b, t) keeps its own best keys, not the best of the whole batch.",
                 "top-k 是按查询进行的：每个查询 (b, t) 保留它自己最好的键，而不是整个批次中最好的。", evidence)
        if bool((~got & torch.isinf(scores)).any()):
            fail("A -inf score (a future or masked position) may never be selected: keep min(topk, number of finite scores) keys.",
                 "分数为 -inf 的位置（未来或被屏蔽的位置）永远不能被选中：只保留 min(topk, 有限分数的个数) 个键。", evidence)
        fail("topk_key_mask must keep, for each query, its min(topk, finite) highest scores and block all the others.",
             "topk_key_mask 必须为每个查询保留它最高的 min(topk, 有限分数个数) 个分数，屏蔽其余的。", evidence)
    reference = _kept(ref.topk_key_mask)  # looked up before own_work blocks it
    with _own_topk(fn):
        same_as_reference(_kept(fn), reference, FAMILIES["topk_key_mask"], "topk_key_mask", explain=_explain_kept)


def check_SparseMLA(SparseMLA):
    cls, cfg = SparseMLA, SPARSE_CFG
    with own_work(cls, "SparseMLA"):
        module = own_module(cls, cfg)
    reference = ref.SparseMLA(cfg).eval()
    state = seeded_state(reference, 137)
    reference.load_state_dict(state)
    load_state(module, state, "SparseMLA")
    x = randn(2, 9, cfg.dim, seed=138)
    with torch.no_grad():
        expected = reference(x)
        mistakes = [(mis.sparse_mla(reference, x, cfg.index_topk, name), en, zh) for name, (en, zh) in mis.SPARSE_MISTAKES.items()]
    for absorb in (False, True):
        for start, end in SEGMENTS:
            with torch.no_grad(), own_work(cls, "SparseMLA"):
                got = call(module, x[:, start:end], start, absorb, name="SparseMLA.forward")
            step = "prefill" if start == 0 else f"start_pos={start}"
            expect_known(got, expected[:, start:end], [(out[:, start:end], en, zh) for out, en, zh in mistakes],
                         f"SparseMLA's output is wrong ({'absorbed' if absorb else 'naive'} path, {step}): each query attends with 09's MLA to its index_topk selected keys only.",
                         f"SparseMLA 的输出不对（{'吸收' if absorb else '朴素'}路径，{step}）：每个查询用 09 的 MLA 只关注它被选中的 index_topk 个键。")
    reference = ref.SparseMLA  # looked up before own_work blocks it
    with own_work(cls, "SparseMLA"):
        same_as_reference_module(cls, reference, (cfg,), FAMILIES["SparseMLA"], "SparseMLA", grads=True, state_seed=137)


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
