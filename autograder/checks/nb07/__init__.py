"""Hidden checks of notebook 07, the KV cache, MQA and GQA.

Weights are built from seeds (seeded_state of the reference module) and loaded by name; the
learner's layers run with utils.kv_cache.KVCache and the learner's generate drives utils.gpt.
Outputs are compared with utils.kv_cache and, when they differ, with the usual mistakes; the
probes shared with other cached layers live in autograder/checks/nb07/cached_layers.py.
"""
import torch

import utils.kv_cache as ref
from autograder.checks import (graded_checks, call, expect, expect_close, expect_known, expect_raises, expect_tensor, fail,
                               load_state, own_module, own_work, randn, seeded_state)
from autograder.checks.nb07.cached_layers import (attend, expect_attributes, expect_gradients, expect_probes, expect_steps,
                                             in_float64, run_steps)
from autograder.checks.nb07.contract import B, CONTEXT, D_IN, FAMILIES, seeded_gpt
from autograder.checks.core import elsewhere
from autograder.checks.core.harness import same_as_reference, same_as_reference_module
from utils.gpt import GPTModel
from utils.multihead import merge_heads, split_heads

X = randn(B, 7, D_IN, seed=70)  # 3 prompt tokens, then 1, 1 and a chunk of 2


# KVCache ----------------------------------------------------------------------------------
def _snap(result):
    """update returns views of the buffers, which later writes change: keep copies."""
    if isinstance(result, tuple):
        return tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in result)
    return result


def check_KVCache(KVCache):
    k1, v1 = randn(2, 3, 2, 4, seed=71), randn(2, 3, 2, 4, seed=72)
    k2, v2 = randn(2, 2, 3, 4, seed=73).transpose(1, 2), randn(2, 2, 3, 4, seed=74).transpose(1, 2)  # not contiguous
    with own_work(KVCache, "KVCache"):
        cache = call(KVCache, 2, 6, 3, 4, name="KVCache")
        k, v = getattr(cache, "k", None), getattr(cache, "v", None)
        expect(isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor) and tuple(k.shape) == tuple(v.shape) == (2, 3, 6, 4),
               "KVCache must preallocate self.k and self.v of shape (batch_size, num_kv_heads, max_seq_len, head_dim) in __init__.",
               "KVCache 必须在 __init__ 中预先分配形状为 (batch_size, num_kv_heads, max_seq_len, head_dim) 的 self.k 和 self.v。",
               f"k: {getattr(k, 'shape', k)}")
        expect(cache.seq_len == 0, "A new KVCache holds nothing: seq_len starts at 0.", "新的 KVCache 是空的：seq_len 从 0 开始。")
        wide = call(KVCache, 1, 4, 2, 3, dtype=torch.float64, name="KVCache")
        expect(wide.k.dtype == torch.float64, "KVCache must create its tensors with the dtype it is given.",
               "KVCache 必须用传入的 dtype 创建张量。", f"dtype {wide.k.dtype}")
        with elsewhere.pretence() as there:  # another device, emulated on the CPU
            other = call(KVCache, 1, 4, 2, 3, device=elsewhere.ELSEWHERE, name="KVCache")
        stray = [name for name in ("k", "v") if not there(getattr(other, name, None))]
        expect(not stray, "KVCache must create its tensors on the device it is given (device=...).",
               "KVCache 必须在给定的设备（device=...）上创建张量。",
               f"{', '.join(stray)} not made on device={elsewhere.ELSEWHERE} (emulated on the CPU)")
        first = _snap(call(cache.update, k1, v1, name="KVCache.update"))
        seq_after_first = cache.seq_len
        try:
            raw = call(cache.update, k2, v2, name="KVCache.update")
        except AssertionError as e:
            if "crashed" not in str(e):
                raise
            fail("KVCache.update crashed on keys that are not contiguous (split_heads gives a transposed view): write with slice assignment or copy_, and use reshape, not view.",
                 "KVCache.update 在不连续的键上报错（split_heads 给出的是转置后的视图）：请用切片赋值或 copy_ 写入，并用 reshape 而不是 view。",
                 str(e).split("[")[-1].rstrip("]"))
        second, seq_after_second = _snap(raw), cache.seq_len
        # the same storage, not the same Python object: k and v may be properties over one buffer
        in_place = ((cache.k.data_ptr(), cache.v.data_ptr()) == (k.data_ptr(), v.data_ptr()), k[:, :, :4].clone(), v[:, :, :4].clone(),
                    isinstance(raw, tuple) and all(isinstance(t, torch.Tensor) for t in raw)
                    and (raw[0].data_ptr(), raw[1].data_ptr()) == (k.data_ptr(), v.data_ptr()))
        if isinstance(second, tuple) and getattr(second[0], "shape", None) == (2, 3, 4, 4):
            try:  # fills the cache exactly: allowed
                call(cache.update, v1, k1, name="KVCache.update")
            except AssertionError as e:
                if "crashed with ValueError" not in str(e):
                    raise
                fail("A write that fills the cache exactly (seq_len + T_new == max_seq_len) must be allowed: raise ValueError only past max_seq_len.",
                     "恰好填满缓存的写入（seq_len + T_new == max_seq_len）必须允许：只有超过 max_seq_len 时才抛出 ValueError。", str(e))
            expect_raises(ValueError, cache.update, k1[:, :, :1], v1[:, :, :1], name="KVCache.update",
                          en="Writing past max_seq_len must raise ValueError: all 6 positions are filled, and 1 more does not fit.",
                          zh="写入超过 max_seq_len 的位置必须抛出 ValueError：6 个位置已全部填满，再放 1 个放不下。")
        call(cache.reset, name="KVCache.reset")
        seq_after_reset = cache.seq_len
        try:
            third = _snap(cache.update(k2, v2))
        except ValueError:
            third = None  # still full: reset() did not empty it
        except Exception:
            third = call(cache.update, k2, v2, name="KVCache.update")
        expect(seq_after_reset == 0 and third is not None,
               "reset() must empty the cache (seq_len = 0), or the next prompt attends to the previous prompt's keys: the cache was not reset.",
               "reset() 必须清空缓存（seq_len = 0），否则下一个提示会关注上一个提示的键：缓存没有被重置。",
               f"seq_len after reset {seq_after_reset}")
    for got in (first, second, third):
        expect(isinstance(got, tuple) and len(got) == 2, "update must return a tuple (keys, values).",
               "update 必须返回一个元组 (keys, values)。", f"got {type(got).__name__}")
    (fk, fv), (sk, sv), (tk, tv) = first, second, third
    expect_tensor(fk, "The keys update returns", "update 返回的键")
    if tuple(fk.shape) == (2, 3, 6, 4):
        fail("update returns the whole preallocated buffer: return only the filled part, self.k[:, :, :seq_len] (the zeros after it would get attention weight).",
             "update 返回了整个预分配的缓冲区：只返回已填的部分 self.k[:, :, :seq_len]（后面的零也会分到注意力权重）。")
    expect(seq_after_first == 2 and seq_after_second == 4,
           "seq_len must count the filled positions (2, then 4): the model reads it as the position of the next token, so otherwise positions restart at 0.",
           "seq_len 必须等于已填的位置数（先 2，后 4）：模型把它当作下一个词元的位置，否则位置会从 0 重新开始。",
           f"seq_len {seq_after_first}, then {seq_after_second}")
    want_k, want_v = torch.cat((k1, k2), dim=2), torch.cat((v1, v2), dim=2)
    if isinstance(sk, torch.Tensor) and tuple(sk.shape) == tuple(k2.shape):
        fail("update returned only the keys just written: return every filled position, self.k[:, :, :seq_len], which the new queries attend to.",
             "update 只返回了刚写入的键：要返回所有已填的位置 self.k[:, :, :seq_len]，新的查询要关注它们全部。",
             f"shape {tuple(sk.shape)}, expected {tuple(want_k.shape)}")
    if isinstance(sk, torch.Tensor) and tuple(sk.shape) != tuple(want_k.shape):
        fail("The new keys were added along the wrong axis: tokens are axis 2 of (B, H_kv, T, hd), so write (or cat) along dim=2.",
             "新的键沿错误的轴加入了：词元是 (B, H_kv, T, hd) 的第 2 轴，所以要沿 dim=2 写入（或拼接）。",
             f"shape {tuple(sk.shape)}, expected {tuple(want_k.shape)}")
    expect_close(fk, k1, "After the first update the cache must return exactly the keys written.",
                 "第一次 update 之后，缓存必须恰好返回写入的键。")
    expect_close(sk, want_k, "After two updates the keys must be the old ones followed by the new ones along the token axis (dim=2).",
                 "两次 update 之后，键必须是旧键后面接着新键（沿词元轴 dim=2）。")
    expect_close(sv, want_v, "The values must be cached like the keys: old values, then new ones along dim=2.",
                 "值必须像键一样缓存：旧值之后接新值，沿 dim=2。")
    same, held_k, held_v, views = in_place
    expect(same and torch.equal(held_k, want_k) and torch.equal(held_v, want_v),
           "update must write into the preallocated self.k and self.v (self.k[:, :, start:end] = k_new), not replace them: a new tensor per step copies the whole cache, the cost preallocation exists to avoid.",
           "update 必须写入预先分配的 self.k 和 self.v（self.k[:, :, start:end] = k_new），而不是替换它们：每一步新建张量就要复制整个缓存，而预先分配正是为了避免这个代价。",
           f"self.k and self.v still in the storage made in __init__: {same}")
    expect(views, "update must return views of the buffers (self.k[:, :, :seq_len]), not copies: copying the filled part every step costs what torch.cat costs.",
           "update 必须返回缓冲区的视图（self.k[:, :, :seq_len]），而不是副本：每一步复制已填的部分，代价和 torch.cat 一样。")
    expect(seq_after_reset == 0 and isinstance(tk, torch.Tensor) and tuple(tk.shape) == tuple(k2.shape),
           "reset() must empty the cache (seq_len = 0), or the next prompt attends to the previous prompt's keys: the cache was not reset.",
           "reset() 必须清空缓存（seq_len = 0），否则下一个提示会关注上一个提示的键：缓存没有被重置。",
           f"seq_len after reset {seq_after_reset}, keys after reset {getattr(tk, 'shape', tk)}")
    expect_close(tv, v2, "After reset() the cache must hold only what was written since.", "reset() 之后缓存只能包含此后写入的内容。")
    with own_work(KVCache, "KVCache"):
        same_as_reference_module(KVCache, ref.KVCache, (2, 6, 3, 4), FAMILIES["KVCache"], "KVCache")


# Attention layers ----------------------------------------------------------------------
# The exercises teach the cache and the grouping, not the softmax: F.scaled_dot_product_attention
# with a bottom-right mask (or enable_gqa=True) is allowed; values decide.
def _check_layer(cls, name, reference, state, args, bias, heads, kv_heads, probe=True):
    """Load seeded weights into the learner's layer; run STEPS; probe it (state, float64, gradients)."""
    hd, fresh = reference.head_dim, lambda dtype=torch.float32: ref.KVCache(B, CONTEXT, kv_heads, reference.head_dim, dtype)
    with own_work(cls, name):
        module = own_module(cls, *args, qkv_bias=bias).eval()
        # the GPT reads num_kv_heads where a layer has it, else num_heads (utils.gpt.new_caches)
        expect_attributes(module, {"num_heads": heads, "head_dim": hd, "num_kv_heads": kv_heads}, name,
                          optional={"num_kv_heads": heads} if name == "CachedMultiHeadAttention" else {})
        load_state(module, state, name)
        with torch.no_grad():
            full = call(module, X, name=f"{name}.forward")
            cache = fresh()
            outs = _layer_steps(module, cache, name)
            probes = (run_steps(module, X, fresh(), name), in_float64(module, X, fresh(torch.float64), name)) if probe else None
        if probe:
            expect_gradients(module.train(), X, name)
    expect_tensor(full, f"{name}'s output", f"{name} 的输出")
    with torch.no_grad():
        want = reference(X)
        q = split_heads(reference.W_query(X), heads)
        k, v = (split_heads(layer(X), kv_heads) for layer in (reference.W_key, reference.W_value))
    return full, want, outs, cache, (q, k, v), probes


def _layer_steps(module, cache, name):
    try:
        return run_steps(module, X, cache, name)
    except AssertionError as e:
        if "crashed" in str(e) and "must match" in str(e) and cache.k.shape[1] != getattr(module, "num_heads", 0):  # a head count, not a view
            fail("The cache must hold the num_kv_groups key/value heads, before they are repeated for the query heads: that is where GQA saves memory.",
                 "缓存必须保存 num_kv_groups 个键/值头（在为查询头重复之前）：GQA 正是在这里节省内存。", str(e).split("[")[-1])
        raise


def check_CachedMultiHeadAttention(CachedMultiHeadAttention):
    name, d_out, heads = "CachedMultiHeadAttention", 6, 2
    for bias in (False, True):
        reference = ref.CachedMultiHeadAttention(D_IN, d_out, CONTEXT, heads, bias).eval()
        state = seeded_state(reference, 75 + bias)
        reference.load_state_dict(state)
        full, want, outs, cache, qkv, probes = _check_layer(CachedMultiHeadAttention, name, reference, state,
                                                            (D_IN, d_out, CONTEXT, heads), bias, heads, heads, bias)
        expect_close(full, want,
                     f"Without a cache {name} must equal notebook 06's MultiHeadAttention (qkv_bias={bias}): project, split heads, causal softmax(Q K^T / sqrt(head_dim)) V, merge, out_proj.",
                     f"没有缓存时 {name} 必须等于笔记本 06 的 MultiHeadAttention（qkv_bias={bias}）：投影，拆分头，因果 softmax(Q K^T / sqrt(head_dim)) V，合并，out_proj。")
        expect_steps(outs, want, *qkv, reference.out_proj, cache, name)
        if probes:  # after the values, so that a wrong mask is named as such
            expect_probes(*probes, outs, reference, X, name)
    with own_work(CachedMultiHeadAttention, name):
        same_as_reference_module(CachedMultiHeadAttention, ref.CachedMultiHeadAttention, (D_IN, d_out, CONTEXT, heads),
                                 FAMILIES[name], name, grads=True)


def check_GroupedQueryAttention(GroupedQueryAttention):
    name, d_out, heads = "GroupedQueryAttention", 8, 4
    for groups, bias in ((2, False), (1, True), (4, False)):
        reference = ref.GroupedQueryAttention(D_IN, d_out, CONTEXT, heads, groups, bias).eval()
        state = seeded_state(reference, 80 + groups)
        reference.load_state_dict(state)
        full, want, outs, cache, (q, k, v), probes = _check_layer(
            GroupedQueryAttention, name, reference, state, (D_IN, d_out, CONTEXT, heads, groups), bias, heads, groups, groups == 2)
        with torch.no_grad():
            tiled = reference.out_proj(merge_heads(attend(q, k.repeat(1, heads // groups, 1, 1), v.repeat(1, heads // groups, 1, 1),
                                                          torch.ones(7, 7, dtype=torch.bool).triu(1))))
        expect_known(full, want, [(tiled if 1 < groups < heads else None,
                     "Key/value heads are assigned with repeat where repeat_interleave is meant: query head h must use group h // (num_heads // num_kv_groups), so groups go (0, 0, 1, 1), not (0, 1, 0, 1).",
                     "键/值头的分配用了 repeat，而这里应该用 repeat_interleave：查询头 h 必须使用第 h // (num_heads // num_kv_groups) 组，所以顺序是 (0, 0, 1, 1)，而不是 (0, 1, 0, 1)。")],
                     f"{name} with {groups} group(s) is wrong: each query head attends with the keys and values of its group h // (num_heads // num_kv_groups).",
                     f"{name}（{groups} 组）的输出不对：每个查询头使用它所在组 h // (num_heads // num_kv_groups) 的键和值。")
        expect_steps(outs, want, q, k, v, reference.out_proj, cache, name)
        if probes:
            expect_probes(*probes, outs, reference, X, name)
    with own_work(GroupedQueryAttention, name):
        same_as_reference_module(GroupedQueryAttention, ref.GroupedQueryAttention, (D_IN, d_out, CONTEXT, heads, 2),
                                 FAMILIES[name], name, grads=True)


# generate ------------------------------------------------------------------------------
class _RestartingPositions(GPTModel):
    """What a model computes when every new token is placed at position 0."""

    def forward(self, idx, caches=None):
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1]))
        for i, block in enumerate(self.trf_blocks):
            x = block(x, None if caches is None else caches[i])
        return self.out_head(self.final_norm(x))


def _calls(model):
    """(tokens, cache given, grad enabled) per pass, seen at the first block: model(...) and
    model.forward(...) both pass through it."""
    seen = []
    hook = model.trf_blocks[0].register_forward_pre_hook(
        lambda m, args, kwargs: seen.append((args[0].shape[1], kwargs.get("kv_cache", args[1] if len(args) > 1 else None)
                                             is not None, torch.is_grad_enabled())), with_kwargs=True)
    return seen, hook


def check_generate(generate):
    model, prompts = seeded_gpt(), [torch.tensor([[3, 17, 5], [8, 1, 20]]), torch.tensor([[11, 2, 9, 14], [0, 22, 6, 6]])]
    wants = [ref.generate(model, p, 6, use_cache=True) for p in prompts]
    restarting = ref.generate(seeded_gpt(_RestartingPositions), prompts[0], 6)
    outs, seen = {}, {}
    with own_work(generate, "generate"):
        for use_cache in (True, False):
            for i, prompt in enumerate(prompts):
                calls, hook = _calls(model)
                try:
                    torch.manual_seed(i)
                    outs[use_cache, i] = call(generate, model, prompt, 6, use_cache=use_cache, name="generate")
                finally:
                    hook.remove()
                seen[use_cache, i] = calls
        torch.manual_seed(99)
        again = call(generate, model, prompts[0], 6, use_cache=True, name="generate")
    first = outs[True, 0]
    expect_tensor(first, "generate's result", "generate 的结果")
    expect(tuple(first.shape) == (2, 9) and torch.equal(first[:, :3], prompts[0]),
           "generate must return the prompt followed by max_new_tokens new ids: shape (B, T + max_new_tokens).",
           "generate 必须返回提示后面接 max_new_tokens 个新 id：形状为 (B, T + max_new_tokens)。", f"shape {tuple(first.shape)}")
    if torch.equal(first, restarting) and not torch.equal(first, wants[0]):
        fail("Positions restart at 0 for each new token: with a cache, the new token's position is the number of cached tokens (the model reads it from the caches' seq_len).",
             "每个新词元的位置都从 0 重新开始：有缓存时，新词元的位置等于已缓存的词元数（模型从缓存的 seq_len 读取它）。")
    if torch.equal(outs[True, 0], wants[0]) and not torch.equal(outs[True, 1], wants[1]):
        fail("The second prompt gave wrong tokens after the first was right: the cache was not reset between two prompts (make new caches in every call).",
             "第一个提示正确而第二个提示的词元错了：两个提示之间缓存没有被重置（每次调用都要新建缓存）。")
    expect(torch.equal(first, again),
           "generate gave different tokens on two runs: greedy decoding takes the argmax of the last position's logits, it does not sample.",
           "generate 两次运行给出了不同的词元：贪心解码取最后一个位置 logits 的 argmax，而不是采样。")
    for use_cache in (True, False):
        for i, want in enumerate(wants):
            expect(torch.equal(outs[use_cache, i], want),
                   f"generate(use_cache={use_cache}) gave the wrong tokens: append the argmax of the logits at the LAST position, one token per step.",
                   f"generate(use_cache={use_cache}) 给出的词元不对：每一步把最后一个位置 logits 的 argmax 接到序列后面。",
                   f"got {outs[use_cache, i].tolist()}, expected {want.tolist()}")
    expect(not any(g for calls in seen.values() for *_, g in calls),
           "generate must run the model under torch.no_grad(): otherwise every step records a graph for a backward pass that decoding never makes.",
           "generate 必须在 torch.no_grad() 下运行模型：否则每一步都会为一次解码永远不做的反向传播记录计算图。")
    cached = [c[:2] for c in seen[True, 0]]
    expect(cached and cached[0] == (3, True) and all(c == (1, True) for c in cached[1:]),
           "generate ignores use_cache=True: pass the caches (model.new_caches), feed the prompt once, then only the newest token at each step.",
           "generate 忽略了 use_cache=True：传入缓存（model.new_caches），先送入一次提示，之后每一步只送入最新的词元。",
           f"(tokens, caches given) per model call: {cached}")
    with own_work(generate, "generate"):
        same_as_reference(generate, ref.generate, FAMILIES["generate"], "generate")
    plain = [c[:2] for c in seen[False, 0]]
    expect(plain and all(not c for _, c in plain) and [t for t, _ in plain] == list(range(3, 3 + len(plain))),
           "generate ignores use_cache=False: without a cache, run the whole sequence through the model at every step, and pass no caches.",
           "generate 忽略了 use_cache=False：没有缓存时，每一步把整个序列送入模型，并且不传缓存。",
           f"(tokens, caches given) per model call: {plain}")


# kv_cache_bytes ------------------------------------------------------------------------
def check_kv_cache_bytes(kv_cache_bytes):
    cases = [(1, 1, 32, 8, 128, 2), (3, 10, 2, 4, 8, 4), (2, 1024, 12, 12, 64, 2), (1, 7, 1, 1, 2, 1)]
    with own_work(kv_cache_bytes, "kv_cache_bytes"):
        got = [call(kv_cache_bytes, *c, name="kv_cache_bytes") for c in cases]
        default = call(kv_cache_bytes, 1, 1, 32, 8, 128, name="kv_cache_bytes")
    real = ref.KVCache(3, 10, 4, 8)
    real_bytes = 2 * 2 * real.k.numel() * real.k.element_size()  # 2 layers, keys and values
    expect(all(isinstance(g, int) and not isinstance(g, bool) for g in got + [default]),
           "kv_cache_bytes must return an int (a number of bytes), not a float or a tensor: multiply integers, do not divide.",
           "kv_cache_bytes 必须返回 int（字节数），而不是浮点数或张量：只做整数乘法，不要做除法。",
           f"got {[type(g).__name__ for g in got]}")
    for c, g in zip(cases, got):
        want = ref.kv_cache_bytes(*c)
        if g == want // 2:
            fail("kv_cache_bytes counts only one of keys and values: the cache keeps both, hence the factor 2.",
                 "kv_cache_bytes 只算了键和值中的一个：缓存两者都保存，所以要乘以 2。")
        if g == want * 8:
            fail("kv_cache_bytes counts bits: multiply by bytes_per_element (2 for bf16), not by the bits per element.",
                 "kv_cache_bytes 算成了比特数：要乘以 bytes_per_element（bf16 为 2），而不是每个元素的比特数。")
        expect(g == want,
               f"kv_cache_bytes{c} is wrong: 2 (keys and values) x batch x tokens x layers x KV heads x head_dim x bytes per element.",
               f"kv_cache_bytes{c} 不对：2（键和值）x 批大小 x 词元数 x 层数 x KV 头数 x head_dim x 每个元素的字节数。",
               f"got {g}, expected {want}")
    expect(got[1] == real_bytes, "kv_cache_bytes must equal the bytes of the real cache tensors.",
           "kv_cache_bytes 必须等于真实缓存张量的字节数。", f"got {got[1]}, real tensors {real_bytes}")
    expect(default == 131072,
           "bytes_per_element defaults to 2 (bf16): Llama-3-8B (32 layers, 8 KV heads of 128) caches 131,072 bytes per token.",
           "bytes_per_element 默认为 2（bf16）：Llama-3-8B（32 层，8 个 128 维的 KV 头）每个词元缓存 131,072 字节。", f"got {default}")
    with own_work(kv_cache_bytes, "kv_cache_bytes"):
        same_as_reference(kv_cache_bytes, ref.kv_cache_bytes, FAMILIES["kv_cache_bytes"], "kv_cache_bytes")


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
