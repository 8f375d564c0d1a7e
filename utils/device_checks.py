"""Each reference kernel of utils/ run on a device against the CPU: the checks behind
`python -m utils.device_report` and utils/tests/test_devices.py.

A kernel is registered with its builder: `build()` makes its modules and inputs on the CPU (seeded),
and `run(device, *moved copies)` returns its outputs. `check_kernel(name, device)` runs it on the
CPU and on `device`; every output must be on the device and within its dtype's tolerance of the
CPU's (integers: equal). During the device run a tensor factory called from utils/ without
device= makes a meta tensor (`StrayOnMeta`), which fails when it meets real data, so a CPU-only
assumption shows on any machine, the CPU included. On `meta` itself the kernels that never read a
value run on meta tensors (shapes only), and a stray tensor lands on the CPU and fails there.
Kernels that read values (.tolist(), .item(), a comparison in Python: MoE's dispatch, decoding
with a draft, training) do not run on meta. W8A8 runs on fbgemm, x86 CPUs only: `check_w8a8`
wants it to refuse any other device.
"""
import copy
import os
import sys

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors

from utils import (causal, copy_task, dropout, dsa, embeddings, fixtures, kv_cache, mha_variants, mini_deepseek, mla,
                   moe, mtp, multihead, quantize, rmsnorm, rope, scaled_attention as sa, self_attention, sliding_window,
                   train_mini, w8a8, attention as att, flash_attention as fa, linear_attention as la)
from utils.gated_deltanet import GatedDeltaNet, GatedDeltaNetConfig
from utils.gpt import GPTConfig, GPTModel

TOL = {torch.float64: (1e-10, 1e-8), torch.float32: (1e-4, 1e-4), torch.bfloat16: (3e-2, 3e-2), torch.float16: (3e-3, 3e-3)}
KERNELS = {}  # name -> (build, run, runs on meta, (atol, rtol) or None)
MLA_CFG = dict(dim=32, n_heads=4, q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
               max_seq_len=64)
_G = [None]  # the generator of the kernel being built


def kernel(build, meta=True, tol=None):
    """Register run(device, *build()) as a kernel; build makes its modules and inputs on the CPU."""
    def register(run):
        KERNELS[run.__name__] = (build, run, meta, tol)
        return run
    return register


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=_G[0], device="cpu", dtype=dtype)


def ids(high, *shape):
    return torch.randint(0, high, shape, generator=_G[0], device="cpu")


def gpt(**kw):
    return GPTModel(GPTConfig(vocab_size=97, context_length=32, emb_dim=32, n_heads=4, n_layers=2, **kw)).eval()


@kernel(lambda: (randn(2, 6, 8),))
def dot_product_attention(device, x):
    return att.self_attention(x), att.softmax(x * 50), att.context_vector(x[0, 1], x[0])


@kernel(lambda: (self_attention.SelfAttentionV1(8, 4), self_attention.SelfAttentionV2(8, 4, True), randn(2, 3, 6, 8),
                 randn(2, 3, 6, 8), randn(2, 3, 6, 5)))
def scaled_and_causal(device, v1, v2, q, k, v):
    mask = causal.causal_mask(6, device=device)
    return v1(q[0]), v2(q[0]), *sa.scaled_dot_product_attention(q, k, v, mask), causal.masked_softmax(q @ k.mT, mask)


@kernel(lambda: (causal.CausalSelfAttention(8, 8, 6), dropout.CausalAttention(8, 8, 6, 0.5).eval(), randn(2, 6, 8)))
def causal_and_dropout(device, m, d, x):
    return m(x), d(x), causal.mask_and_renormalize(torch.softmax(x @ x.mT, -1), causal.causal_mask(6, device=device))


@kernel(lambda: (), meta=False, tol=(3e-2, 3e-2))  # dropout draws from each device's own generator: statistics
def random_and_fp8_grid(device):
    g = torch.Generator().manual_seed(1)
    kept = dropout.attention_dropout(torch.ones(256, 256, device=device), 0.5)
    return (sa.random_scores(16, generator=g, device=device), sa.dot_product_variance(64, 512, generator=g, device=device),
            kept.mean(), quantize.fp8_e4m3_grid(device))  # the grid's torch.unique reads values too


@kernel(lambda: (multihead.MultiHeadAttention(16, 16, 8, 0.0, 4).eval(), randn(2, 8, 16)))
def multihead_variants(device, m, x):
    return [fn(x) for fn in mha_variants.all_variants(m, 8).values()]


@kernel(lambda: (gpt(), gpt(n_kv_groups=2), ids(97, 2, 5)))
def gpt_kv_cache_gqa(device, model, gqa, prompt):
    int8_logits = gqa(prompt, gqa.new_caches(2, 8, quantize.Int8KVCache))
    return (model(prompt), kv_cache.generate(model, prompt, 6), kv_cache.generate(model, prompt, 6, use_cache=False),
            kv_cache.generate(gqa, prompt, 6, cache_cls=kv_cache.ConcatKVCache), int8_logits)


@kernel(lambda: (rope.RoPEMultiHeadAttention(16, 16, 32, 4), rope.RoPEMultiHeadAttention(16, 16, 32, 4, interleaved=True),
                 randn(2, 7, 16)))
def rope_positions(device, m, mi, x):
    cache = kv_cache.KVCache(2, 8, 4, 4, device=device)
    return (rope.sinusoidal_positions(7, 16, device=device), rope.yarn_inverse_frequencies(16, device=device), mi(x),
            m(x), m(x[:, :5], cache), m(x[:, 5:], cache))


@kernel(lambda: (mla.MultiHeadLatentAttention(mla.MLAConfig(**MLA_CFG)), mla.LatentAttention(32, 4, 16, 8, 64), randn(2, 7, 32)))
def latent_attention(device, m, lat, x):
    return [[m(x[:, :6], 0, a), m(x[:, 6:], 6, a), lat(x[:, :6], 0, a), lat(x[:, 6:], 6, a)] for a in (False, True)]


@kernel(lambda: (moe.MoE(16, 8, 8, 2, 1, n_expert_groups=2), randn(2, 5, 16)), meta=False)
def mixture_of_experts(device, m, x):
    logits = x.reshape(-1, 16) @ m.gate.weight.T
    weights, experts = moe.topk_router(logits, 2)
    balance = moe.load_balancing_loss(logits.softmax(-1), experts, 8)
    bias = moe.update_expert_bias(m.gate.bias, torch.bincount(experts.flatten(), minlength=8))
    return m(x), moe.moe_forward_per_token(m, x), m.gate(x.reshape(-1, 16)), weights, experts, balance, bias


# index_topk 5: at the last step five index scores are exactly 0 (ReLU) and lead the rest; a top-4
# would cut through that tie, which each device's topk breaks its own way (0.16 apart on an H200).
@kernel(lambda: (dsa.SparseMLA(dsa.DSAConfig(**MLA_CFG, index_n_heads=2, index_head_dim=8, index_topk=5)), randn(1, 9, 32)))
def sparse_attention(device, m, x):
    outs = [m(x[:, :8], 0, absorb=False), m(x[:, :8], 0, absorb=True), m(x[:, 8:], 8, absorb=True)]
    dsa.fill_caches(m, 16, torch.Generator().manual_seed(2))
    return outs + [m(x[:, 8:], 16, absorb=True)]


@kernel(lambda: (sliding_window.WindowedLM(50, 32, 4, 2, window=5, sinks=True).eval(), ids(50, 1, 9)))
def sliding_window_lm(device, lm, prompt):
    return sliding_window.generate(lm, prompt, 6, chunk=3), sliding_window.generate(lm, prompt, 6, use_cache=False), lm(prompt)


@kernel(lambda: (randn(2, 2, 70, 16), randn(2, 2, 90, 16), randn(2, 2, 90, 8), randn(1, 2, 64, 16, dtype=torch.bfloat16)))
def flash(device, q, k, v, q16):
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = fa.FlashAttention.apply(q, k, v, True)
    out.sum().backward()
    return (out, q.grad, k.grad, v.grad, fa.flash_attention_forward(q, k, v, False, 32, 32), fa.naive_attention(q, k, v, True),
            fa.online_softmax(q.detach(), 16), fa.flash_attention_forward(q16, q16, q16, True, 16, 16))


@kernel(lambda: (GatedDeltaNet(GatedDeltaNetConfig(hidden_size=32, linear_num_key_heads=2, linear_num_value_heads=4,
                                                linear_key_head_dim=8, linear_value_head_dim=6), chunk_size=4),
                  randn(2, 11, 32), randn(2, 11, 2, 8), randn(2, 11, 2, 8), randn(2, 11, 4, 6), randn(2, 11, 4, 8), randn(2, 11, 4)))
def linear_attention(device, layer, x, q, k, v, g_channels, b):
    g, beta = -g_channels.abs(), b.sigmoid()
    y, state = layer(x[:, :7])
    rule = [f(q, k, v, g[..., 0], beta, initial_state=state[1], output_final_state=True, use_qk_l2norm=True, **kw)
            for f, kw in ((la.recurrent_gated_delta_rule, {}), (la.chunk_gated_delta_rule, {"chunk_size": 4}))]
    kda = [f(k, k, k, g[:, :, :2], beta[:, :, :2], output_final_state=True, **kw)
           for f, kw in ((la.recurrent_kda, {}), (la.chunk_kda, {"chunk_size": 4}))]
    return (y, state, layer(x[:, 7:8], state), rule, kda, la.linear_attention_recurrent(q, k, k),
            la.linear_attention_parallel(q, k, k))


@kernel(lambda: (nn.Embedding(10, 4).weight.detach(), rmsnorm.RMSNorm(8), ids(10, 2, 3), randn(2, 8, dtype=torch.bfloat16)))
def embeddings_rmsnorm(device, w, norm, tokens, x):
    return embeddings.embed(tokens, w), embeddings.one_hot_embed(tokens, w), norm(x), fixtures.journey_inputs(device)


@kernel(lambda: (nn.Linear(32, 16), nn.Linear(12, 5), gpt(), randn(3, 32), randn(3, 12), randn(40, 130), ids(97, 2, 5)),
        tol=(3e-2, 3e-2))  # int8 x bf16 on one device, maybe float32 on another
def quantized(device, lin, odd, model, x, xo, w, prompt):
    q = quantize.Int8WeightOnlyLinear.from_linear(lin)
    return (q(x), q.weight, quantize.Int8WeightOnlyLinear.from_linear(odd)(xo), quantize.quantize_model_(model)(prompt),
            quantize.fp8_block_dequantize(*quantize.fp8_block_quantize(w, 32), 32),
            quantize.group_roundtrip(w[:, :128], 4, 32), quantize.fp8_activation_quantize(w[:, :128], 64)[1])


@kernel(lambda: (), meta=False)
def copy_task_batches(device):
    g = torch.Generator().manual_seed(4)
    batch = copy_task.make_batch(3, 20, g, device=device)
    return batch, copy_task.copy_mask(batch), copy_task.copy_prompts(2, g, device=device)


@kernel(lambda: (mini_deepseek.load_checkpoint(device="cpu")[0], mtp.load_mtp_modules(device="cpu")[0],
                 copy_task.copy_prompts(1, torch.Generator().manual_seed(5)), copy_task.make_batch(2, 24, _G[0])), meta=False)
def mini_deepseek_mtp(device, model, draft, prompts, tokens):
    outs = [model(tokens), model(tokens, absorb=True), mini_deepseek.attention_maps(model, tokens), mtp.mtp_forward(model, [draft], tokens)]
    for p in prompts:
        p = p.to(device)
        outs += [mini_deepseek.generate(model, p, 8), mini_deepseek.generate(model, p, 8, use_cache=False),
                 mtp.speculative_generate(model, draft, p, 10), mtp.greedy_generate(model, p, 10)]
    return outs


@kernel(lambda: mini_deepseek_tiny(), meta=False, tol=(1e-2, 1e-2))  # 3 AdamW steps: a sign can differ
def train_steps(device, model, mtp_modules):
    history = train_mini.train(model, mtp_modules, steps=3, batch_size=4)
    held_out = train_mini.evaluate(model, mtp_modules, batch_size=8)
    return history["loss"], [v for k, v in held_out.items() if "loss" in k]  # an accuracy moves in steps of a token


def mini_deepseek_tiny():
    cfg = mini_deepseek.MiniDeepSeekConfig(dim=32, inter_dim=64, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
                                           v_head_dim=8, moe_inter_dim=16)
    return mini_deepseek.MiniDeepSeek(cfg), mtp.make_mtp_modules(cfg)


def build(name):
    torch.manual_seed(0)
    _G[0] = torch.Generator().manual_seed(0)
    with torch.device("cpu"):
        return KERNELS[name][0]()


def flat(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple, dict)):
        return [t for o in (out.values() if isinstance(out, dict) else out) for t in flat(o)]
    return [torch.tensor(float(out), dtype=torch.float64, device="cpu")]


def moved(arg, device):
    return copy.deepcopy(arg).to(device) if isinstance(arg, (torch.Tensor, nn.Module)) else arg


class StrayOnMeta(TorchFunctionMode):
    """A tensor factory (torch.zeros, arange, randn, ...) called from utils/ without device= makes a
    meta tensor, which fails as soon as it meets real data: a CPU-only assumption shows on a CPU.
    Torch's own code (optimizers, nn layers) is left alone."""
    utils = os.path.dirname(os.path.abspath(__file__)) + os.sep

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        caller = sys._getframe(1).f_code.co_filename
        if kwargs.get("device") is None and func in _device_constructors() and caller.startswith(self.utils) \
                and not caller.startswith(self.utils + "tests"):
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


def watched(device):
    """StrayOnMeta, except on meta itself, where a stray tensor lands on the CPU and fails."""
    return StrayOnMeta() if torch.device(device).type != "meta" else torch.device("cpu")


def check_kernel(name, device) -> tuple[str, float, str]:
    """(status, largest difference, note) of one kernel on `device` against the CPU."""
    _, run, meta_ok, tol = KERNELS[name]
    device, cpu = torch.device(device), torch.device("cpu")
    if device.type == "meta" and not meta_ok:
        return "skip", 0.0, "reads values: no meta run"
    expected = flat(run(cpu, *build(name)))
    args = [moved(a, device) for a in build(name)]
    with watched(device):
        got = flat(run(device, *args))
    worst, bad = 0.0, []
    for i, (e, g) in enumerate(zip(expected, got)):
        scalar = g.device.type == "cpu" and g.dtype == torch.float64 and g.dim() == 0  # a Python number
        if g.device.type != device.type and not scalar:
            bad.append(f"output {i} on {g.device}")
        elif g.shape != e.shape or g.dtype != e.dtype:
            bad.append(f"output {i}: {g.dtype}{tuple(g.shape)} vs {e.dtype}{tuple(e.shape)}")
        elif device.type != "meta":
            g, e = g.detach().cpu(), e.detach()
            if e.is_floating_point():
                atol, rtol = tol or TOL.get(e.dtype, TOL[torch.float32])
                ok = torch.allclose(g.double(), e.double(), atol=atol, rtol=rtol, equal_nan=True)
            else:
                ok = torch.equal(g, e)
            gap = (g.double() - e.double()).nan_to_num(0.0).abs()
            worst = max(worst, gap.max().item() if gap.numel() else 0.0)
            if not ok:
                bad.append(f"output {i} differs by {gap.max().item():.3g}")
    if len(got) != len(expected):
        bad.append(f"{len(got)} outputs, {len(expected)} on the CPU")
    return ("ok" if not bad else "FAIL"), worst, "; ".join(bad[:3]) or f"{len(got)} outputs"


def check_w8a8(device) -> tuple[str, float, str]:
    """W8A8 (fbgemm) is CPU-only: it must work on the CPU and refuse any other device with a ValueError."""
    linear = nn.Linear(16, 8)
    if torch.device(device).type == "cpu":
        x = torch.randn(3, 16, device="cpu")
        gap = (w8a8.W8A8Linear.from_linear(linear)(x) - linear(x)).abs().max().item()
        return ("ok" if gap < 0.05 else "FAIL"), gap, "against float32"
    try:
        w8a8.W8A8Linear.from_linear(linear.to(device))
    except ValueError as e:
        return "ok", 0.0, f"refused: {str(e)[:60]}..."
    return "FAIL", 0.0, "built on a device fbgemm does not run on"

