"""Hidden checks of notebook 09, multi-head latent attention.

Weights are a state_dict in DeepSeek-V3's MLA layout (wkv_a's output [latent | rope key],
wkv_b's rows per head [nope keys | values], query heads [nope | rope], rope pairs adjacent),
built from seeds by parameter name and loaded into the learner's module. Outputs are compared
with utils.mla at prefill, at a one-token decode step and at a chunk with start_pos > 0, on
both paths; when they differ, a restatement of MLA with one known mistake at a time names it
(mla_mistakes.py).
Values cannot tell the two paths apart, so the caches of both are read back, and an absorbed
decode step's multiply-adds (autograder.checks.core.cost, counted at every torch matrix product) are
bounded: a module whose `absorb` flag changes nothing, or that re-expands the cached latents
through wkv_b at every step, does the naive path's work or more.
"""
import torch
from torch import nn

import utils.mla as ref
from autograder.checks import (graded_checks, call, expect, expect_close, expect_known, fail, load_state, matches, own_module, own_work,
                               randn, seeded_state)
from autograder.checks.core.cost import MatmulCost
from autograder.checks.nb09.contract import CONFIGS, FAMILIES, N, SEGMENTS
from autograder.checks.core.harness import same_as_reference, same_as_reference_module
from autograder.checks.nb09.mla_mistakes import _mistakes
from autograder.checks.core.saturated import split_saturated
from autograder.checks.core.probes import attempt, expect_dtype, expect_gradients
from utils.rope import apply_rope

# Heads wide against the latent, so that the naive path reads far more per cached position than
# the absorbed one (H * (nope + rope + v) = 272 against H * (2 * c + rope) = 80).
COST_CFG = ref.MLAConfig(dim=16, n_heads=8, q_lora_rank=8, kv_lora_rank=4, qk_nope_head_dim=16, qk_rope_head_dim=2,
                         v_head_dim=16, max_seq_len=72, rope_theta=100.0)
COST_CONTEXT, COST_SLACK = 64, 1.25

def _expect_layers(module, cfg):
    who = "MultiHeadLatentAttention"
    wkv_a = getattr(module, "wkv_a", None)
    if isinstance(wkv_a, nn.Linear) and wkv_a.out_features == cfg.kv_lora_rank + cfg.n_heads * cfg.qk_rope_head_dim:
        fail("There is one rope key per token, shared by all heads: wkv_a maps dim to kv_lora_rank + qk_rope_head_dim, not a rope key per head.",
             "每个词元只有一个 rope 键，由所有头共享：wkv_a 把 dim 映射到 kv_lora_rank + qk_rope_head_dim，而不是每个头一个 rope 键。",
             f"wkv_a has {wkv_a.out_features} outputs")
    norm = getattr(module, "kv_norm", None)
    weight = getattr(norm, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.numel() == cfg.kv_lora_rank + cfg.qk_rope_head_dim:
        fail("kv_norm normalises the latent only (kv_lora_rank numbers), never the rope key: RMSNorm(kv_lora_rank).",
             "kv_norm 只归一化潜在向量（kv_lora_rank 个数），绝不归一化 rope 键：RMSNorm(kv_lora_rank)。",
             f"kv_norm has {weight.numel()} weights")
    biased = [name for name, m in module.named_modules() if isinstance(m, nn.Linear) and m.bias is not None]
    expect(not biased, "All linear layers of MLA are without bias, as in DeepSeek-V3: nn.Linear(..., bias=False).",
           "MLA 的所有线性层都不带偏置，与 DeepSeek-V3 一致：nn.Linear(..., bias=False)。", f"with a bias: {biased}")
    return who


def _run(cls, module, x, start, absorb):
    with torch.no_grad(), own_work(cls, "MultiHeadLatentAttention"):
        return call(module, x, start, absorb, name="MultiHeadLatentAttention.forward")


def _expect_cache(module, reference, x, cfg):
    buffers = dict(module.named_buffers())
    expect("kv_cache" in buffers and "pe_cache" in buffers,
           "The absorbed path must cache in buffers named kv_cache (the latent) and pe_cache (the rope key), as DeepSeek-V3 does.",
           "吸收路径必须缓存在名为 kv_cache（潜在向量）和 pe_cache（rope 键）的缓冲区中，与 DeepSeek-V3 一致。",
           f"buffers: {sorted(buffers)}")
    kv_cache, pe_cache = buffers["kv_cache"], buffers["pe_cache"]
    expect(kv_cache.shape[-1] == cfg.kv_lora_rank and pe_cache.shape[-1] == cfg.qk_rope_head_dim and kv_cache.dim() == 3,
           "The absorbed cache holds kv_lora_rank + qk_rope_head_dim numbers per token: kv_cache (B, max_seq_len, kv_lora_rank), pe_cache (B, max_seq_len, qk_rope_head_dim).",
           "吸收路径的缓存每个词元保存 kv_lora_rank + qk_rope_head_dim 个数：kv_cache (B, max_seq_len, kv_lora_rank)，pe_cache (B, max_seq_len, qk_rope_head_dim)。",
           f"kv_cache {tuple(kv_cache.shape)}, pe_cache {tuple(pe_cache.shape)}")
    with torch.no_grad():
        latent, k_pe = reference.wkv_a(x).split([cfg.kv_lora_rank, cfg.qk_rope_head_dim], dim=-1)
        normalised = reference.kv_norm(latent)
        rotated = apply_rope(k_pe, torch.arange(x.shape[1]), cfg.rope_theta, interleaved=True)
    cached = kv_cache[:x.shape[0], :x.shape[1]]
    if matches(cached, latent):
        fail("The absorbed path caches the un-normalised latent: store kv_norm(latent) in kv_cache, as DeepSeek-V3 does.",
             "吸收路径缓存了未归一化的潜在向量：请像 DeepSeek-V3 那样把 kv_norm(latent) 存入 kv_cache。")
    expect_close(cached, normalised, "kv_cache must hold kv_norm(latent) of every token written so far.",
                 "kv_cache 必须保存到目前为止每个词元的 kv_norm(latent)。")
    expect_close(pe_cache[:x.shape[0], :x.shape[1]], rotated, "pe_cache must hold the rope key of every token, already rotated to its position.",
                 "pe_cache 必须保存每个词元的 rope 键，并且已经按其位置旋转。")


def _expect_naive_cache(module, reference, x, cfg):
    buffers = dict(module.named_buffers())
    expect("k_cache" in buffers and "v_cache" in buffers,
           "The naive path must cache the expanded keys in k_cache and the values in v_cache (absorb=False), as DeepSeek-V3 does.",
           "朴素路径（absorb=False）必须把展开后的键缓存在 k_cache、把值缓存在 v_cache 中，与 DeepSeek-V3 一致。",
           f"buffers: {sorted(buffers)}")
    B, n = x.shape[:2]
    with torch.no_grad():
        latent, k_pe = reference._latent_and_rope_key(x, torch.arange(n))
        keys, values = reference._expand(latent, k_pe)  # (B, n, H, nope + rope), (B, n, H, dv)
    k_cache, v_cache = buffers["k_cache"], buffers["v_cache"]
    expect(k_cache.dim() == 4 and k_cache.shape[1:] == (cfg.max_seq_len, *keys.shape[2:])
           and v_cache.shape[1:] == (cfg.max_seq_len, *values.shape[2:]),
           "The naive path caches every head's key [k_nope | k_pe] and value: k_cache (B, max_seq_len, n_heads, qk_nope_head_dim + qk_rope_head_dim), v_cache (B, max_seq_len, n_heads, v_head_dim).",
           "朴素路径缓存每个头的键 [k_nope | k_pe] 和值：k_cache (B, max_seq_len, n_heads, qk_nope_head_dim + qk_rope_head_dim)，v_cache (B, max_seq_len, n_heads, v_head_dim)。",
           f"k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)}")
    expect_close(k_cache[:B, :n], keys, "k_cache must hold, for every token written so far, each head's key: wkv_b's key rows times the latent, then the rotated rope key.",
                 "k_cache 必须为到目前为止的每个词元保存每个头的键：wkv_b 的键行乘以潜在向量，再接上旋转后的 rope 键。")
    expect_close(v_cache[:B, :n], values, "v_cache must hold, for every token written so far, each head's value (wkv_b's value rows times the latent).",
                 "v_cache 必须为到目前为止的每个词元保存每个头的值（wkv_b 的值行乘以潜在向量）。")


def _decode_cost(run, x, absorb):
    """Multiply-adds of one decode step after COST_CONTEXT cached tokens, on the given path."""
    run(x[:, :COST_CONTEXT], 0, absorb)
    with MatmulCost() as cost:
        run(x[:, COST_CONTEXT:], COST_CONTEXT, absorb)
    return cost.macs


def _expect_absorbed_cost(cls):
    cfg = COST_CFG
    with own_work(cls, "MultiHeadLatentAttention"):
        module = own_module(cls, cfg)
    reference = ref.MultiHeadLatentAttention(cfg)
    state = seeded_state(reference, 97)
    reference.load_state_dict(state)
    load_state(module, state, "MultiHeadLatentAttention")
    x = randn(1, COST_CONTEXT + 1, cfg.dim, seed=98)
    with torch.no_grad():
        bound = COST_SLACK * _decode_cost(reference, x, True)
    learner = lambda x, start, absorb: _run(cls, module, x, start, absorb)
    absorbed = _decode_cost(learner, x, True)
    if absorbed <= bound:
        return
    naive = _decode_cost(learner, x, False)
    evidence = f"{absorbed:,} multiply-adds at absorb=True, {naive:,} at absorb=False, at most {bound:,.0f} expected"
    if absorbed <= 1.05 * naive:
        fail("With absorb=True your decode step does the naive path's work: score the query, folded through wkv_b's key rows, against the cached latents, and apply the value rows after attending over them.",
             "absorb=True 时你的解码步骤做的是朴素路径的计算：应把经 wkv_b 键行折叠后的查询与缓存的潜在向量打分，并在对潜在向量做注意力之后再乘以值行。", evidence)
    fail("Your absorbed decode step multiplies every cached latent by wkv_b again (re-expanding keys or values of the whole prefix): fold wkv_b into the query and the output instead, so a step's work per cached position is kv_lora_rank + qk_rope_head_dim per head.",
         "你的吸收路径解码步骤又把每个缓存的潜在向量乘了一遍 wkv_b（把整个前缀的键或值重新展开）：应把 wkv_b 折叠进查询和输出，使每一步在每个缓存位置、每个头上的计算量为 kv_lora_rank + qk_rope_head_dim。",
         evidence)


def _expect_training_and_dtype(cls):
    """Gradients reach every weight on both paths; float64 in, float64 out, right."""
    who = "MultiHeadLatentAttention"
    cfg, seed = CONFIGS[0]
    reference = ref.MultiHeadLatentAttention(cfg)
    state = seeded_state(reference, seed)
    reference.load_state_dict(state)
    x = randn(2, 6, cfg.dim, seed=99)
    for absorb in (False, True):
        with own_work(cls, who):
            module = load_state(own_module(cls, cfg), state, who)
            call(module, x, 0, absorb, name=f"{who}.forward").square().sum().backward()
        expect_gradients(module, f"{who} (absorb={absorb})")
        with torch.no_grad(), own_work(cls, who):  # a fresh module: no cache yet, so it is made for float64 inputs
            module = load_state(own_module(cls, cfg), state, who).double()
            wide = attempt(module, x.double(), 0, absorb,
                           en=f"{who} must work in the dtype of its input (float64 here): after the float32 softmax, cast the weights back with .type_as(x).",
                           zh=f"{who} 必须使用输入的 dtype 计算（这里是 float64）：float32 的 softmax 之后，用 .type_as(x) 把权重转换回来。")
        expect_dtype(wide, torch.float64, who)
        with torch.no_grad():
            want = reference.double()(x.double(), 0, absorb)
        expect_close(wide, want, f"{who} is wrong on float64 inputs (absorb={absorb}).", f"{who} 在 float64 输入上的结果不对（absorb={absorb}）。")
        # float64 tolerances are float32's: a cache kept in float32 shows in its dtype, not in the values
        narrow = {name: b.dtype for name, b in module.named_buffers() if name.endswith("_cache") and b.dtype != torch.float64}
        expect(not narrow, f"{who}'s caches must hold the dtype of what they cache (float64 here, absorb={absorb}): allocate them from the new entries (new.new_zeros), as the given _write does.",
               f"{who} 的缓存必须使用所缓存内容的 dtype（这里是 float64，absorb={absorb}）：像给出的 _write 那样按新条目分配（new.new_zeros）。",
               f"buffers {narrow}")


def check_MultiHeadLatentAttention(MultiHeadLatentAttention):
    cls = MultiHeadLatentAttention
    for cfg, seed in CONFIGS:
        with own_work(cls, "MultiHeadLatentAttention"):
            module = own_module(cls, cfg)
        who = _expect_layers(module, cfg)
        reference = ref.MultiHeadLatentAttention(cfg)
        state = seeded_state(reference, seed)
        reference.load_state_dict(state)
        load_state(module, state, who)
        x = randn(2, N, cfg.dim, seed=seed + 1)
        with torch.no_grad():
            expected = reference(x)
        for absorb in (False, True):
            path = "absorbed" if absorb else "naive"
            for start, end in SEGMENTS:
                out = _run(cls, module, x[:, start:end], start, absorb)
                step = "prefill" if start == 0 else f"decoding at start_pos={start}"
                expect_known(out, expected[:, start:end], _mistakes(state, cfg, x, start, end),
                             f"MultiHeadLatentAttention's output is wrong ({path} path, {step}, q_lora_rank={cfg.q_lora_rank}): "
                             "compare each step with the description of the two paths above the exercise.",
                             f"MultiHeadLatentAttention 的输出不对（{path} 路径，{step}，q_lora_rank={cfg.q_lora_rank}）：请对照练习上方对两条路径的说明逐步检查。")
            (_expect_cache if absorb else _expect_naive_cache)(module, reference, x, cfg)
    _expect_absorbed_cost(cls)
    _expect_training_and_dtype(cls)
    reference_cls, who = ref.MultiHeadLatentAttention, "MultiHeadLatentAttention"  # looked up before own_work blocks it
    (cfg, seed), (graded, steep) = CONFIGS[0], split_saturated(FAMILIES[who])
    with own_work(cls, who):
        for part, grads in ((graded, True), (steep, False)):  # the space's points bring their own configuration
            same_as_reference_module(cls, reference_cls, (cfg,), part, who, grads=grads, state_seed=seed)


def _expect_int(got, who):
    expect(isinstance(got, int) and not isinstance(got, bool),
           f"{who} must return an int (a number of elements), not a float or a tensor: multiply integers only.",
           f"{who} 必须返回 int（元素个数），而不是浮点数或张量：只做整数乘法。", f"got {type(got).__name__} {got!r}")


def check_mla_cache_elements_per_token(mla_cache_elements_per_token):
    fn = mla_cache_elements_per_token
    for args in ((61, 512, 64), (60, 512, 64), (3, 10, 4), (1, 7, 2)):
        with own_work(fn, "mla_cache_elements_per_token"):
            got = call(fn, *args, name="mla_cache_elements_per_token")
        want = ref.mla_cache_elements_per_token(*args)
        _expect_int(got, "mla_cache_elements_per_token")
        if got == want:
            continue
        if got == 2 * want:
            fail("The latent is shared by keys and values and cached once, not twice: n_layers * (kv_lora_rank + qk_rope_head_dim).",
                 "潜在向量由键和值共享，只缓存一次，而不是两次：n_layers * (kv_lora_rank + qk_rope_head_dim)。")
        if got == want // args[0]:
            fail("The count must cover every layer: multiply by n_layers.", "计数必须覆盖所有层：乘以 n_layers。")
        if got == args[0] * args[1]:
            fail("The shared rope key is cached too: add qk_rope_head_dim per layer.", "共享的 rope 键也要缓存：每层加上 qk_rope_head_dim。")
        fail(f"mla_cache_elements_per_token{args} is wrong: the latent and the rope key, per layer.",
             f"mla_cache_elements_per_token{args} 不对：每层是潜在向量加 rope 键。", f"got {got}, expected {want}")
    reference = ref.mla_cache_elements_per_token  # looked up before own_work blocks it
    with own_work(fn, "mla_cache_elements_per_token"):
        same_as_reference(fn, reference, FAMILIES["mla_cache_elements_per_token"], "mla_cache_elements_per_token")


def check_kv_cache_elements_per_token(kv_cache_elements_per_token):
    fn = kv_cache_elements_per_token
    for args in ((60, 128, 128), (95, 8, 128), (61, 1, 128), (3, 5, 7)):
        with own_work(fn, "kv_cache_elements_per_token"):
            got = call(fn, *args, name="kv_cache_elements_per_token")
        want = ref.kv_cache_elements_per_token(*args)
        _expect_int(got, "kv_cache_elements_per_token")
        if got == want:
            continue
        if got == want // 2:
            fail("Every KV head caches a key AND a value: multiply by 2.", "每个键值头都缓存一个键和一个值：乘以 2。")
        if got == want // args[0]:
            fail("The count must cover every layer: multiply by n_layers.", "计数必须覆盖所有层：乘以 n_layers。")
        fail(f"kv_cache_elements_per_token{args} is wrong: 2 * n_layers * n_kv_heads * head_dim.",
             f"kv_cache_elements_per_token{args} 不对：2 * n_layers * n_kv_heads * head_dim。", f"got {got}, expected {want}")
    reference = ref.kv_cache_elements_per_token  # looked up before own_work blocks it
    with own_work(fn, "kv_cache_elements_per_token"):
        same_as_reference(fn, reference, FAMILIES["kv_cache_elements_per_token"], "kv_cache_elements_per_token")


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
