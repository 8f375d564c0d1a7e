"""Notebook 13's rolling KV cache, fed keys that carry their own position, so that the order, the
count and the storage of what it returns can be read off directly."""
import torch

from autograder.checks import call, expect, expect_tensor, fail, own_work


def _tensors(obj):
    found = [v for v in vars(obj).values() if isinstance(v, torch.Tensor)]
    for v in vars(obj).values():
        if isinstance(v, (list, tuple)):
            found += [t for t in v if isinstance(t, torch.Tensor)]
    return found


def _expect_chunk(k, v, start, T, window, chunks):
    seen = start + T
    want = list(range(max(0, start - (window - 1)), seen))
    expect_tensor(k, "update's keys", "update 返回的键")
    got = k[0, 0, :, 0].tolist() if k.dim() == 4 else None
    evidence = f"window={window}, chunks {chunks}: positions returned {got}, expected {want}"
    expect(got is not None and k.shape[:2] == (2, 3) and k.shape[-1] == 4,
           "update must return keys and values shaped (B, num_kv_heads, positions, head_dim).",
           "update 必须返回形状为 (B, num_kv_heads, 位置数, head_dim) 的键和值。", f"shape {tuple(k.shape)}")
    if got == want:
        expect(torch.equal(v, -k), "update must return the values of the same positions as the keys, in the same order.",
               "update 返回的值必须与键是同样的位置，顺序也相同。", evidence)
        return
    if sorted(got) == want:
        fail("update must return the positions in order, oldest first: a ring buffer's slots are not in position order once it wraps.",
             "update 必须按位置顺序返回（最早的在前）：环形缓冲区绕回之后，槽位的顺序不再是位置的顺序。", evidence)
    if T > 1 and got == list(range(max(0, seen - window), seen)) and T < window:
        fail("A chunk of several new queries loses keys: its first query still needs the window - 1 positions before the chunk, so return those and then all the new ones.",
             "一块多个新查询时丢了键：块中的第一个查询仍需要块之前的 window - 1 个位置，所以要返回这些位置，再加上所有新位置。", evidence)
    if T >= window and got[-min(T, window):] == want[-min(T, window):] and len(got) < len(want):
        fail("A chunk longer than the window must come back whole (with the window - 1 positions before it): its first queries need their own keys.",
             "比窗口还长的块必须完整返回（连同它之前的 window - 1 个位置）：块中前面的查询需要它们自己的键。", evidence)
    if got == list(range(max(0, start - window), seen)):
        fail("update returns window positions before the new ones: the first new query can see only window - 1 of them (itself is the window-th).",
             "update 在新位置之前返回了 window 个位置：第一个新查询只能看到其中 window - 1 个（它自己是第 window 个）。", evidence)
    fail("update must return, in position order, up to window - 1 positions before the new ones, then every new one.",
         "update 必须按位置顺序返回新位置之前最多 window - 1 个位置，再加上所有新位置。", evidence)


def _run_cache(cls, window, chunks, dtype=torch.float32):
    with own_work(cls, "RollingKVCache"):
        cache = call(cls, 2, window, 3, 4, dtype=dtype, name="RollingKVCache")
    total, start = sum(chunks), 0
    # (B, T, H, hd) transposed: a view that is not contiguous, as heads split from a projection are
    keys = torch.arange(total, dtype=dtype).view(1, total, 1, 1).expand(2, total, 3, 4).contiguous().transpose(1, 2)
    for T in chunks:
        with own_work(cls, "RollingKVCache"):
            k, v = call(cache.update, keys[:, :, start:start + T], -keys[:, :, start:start + T], name="RollingKVCache.update")
        _expect_chunk(k, v, start, T, window, chunks)
        start += T
        expect(cache.seq_len == start,
               "seq_len must count every position seen so far, not the positions stored: the next token's RoPE position continues from it after the window wraps.",
               "seq_len 必须统计目前见过的所有位置，而不是存储的位置数：窗口绕回之后，下一个词元的 RoPE 位置从它接着数。",
               f"seq_len {cache.seq_len} after {start} positions")
        stored = sum(t.numel() for t in _tensors(cache))
        expect(stored <= 2 * 2 * 3 * window * 4,
               "The cache must store at most window positions of keys and values, whatever the length of the text.",
               "无论文本多长，缓存最多只能存储 window 个位置的键和值。", f"{stored} numbers stored after {start} positions, window={window}")
    return cache, k
