"""What the checks of notebook 12 share: the test model's sizes, deterministic weights, the course's
parts swapped in while one exercise is graded, a probe of which MLA path filled the caches and
what a Block must contain. The checks are in nb12.py, the mistakes' outputs in capstone_mistakes.py.
"""
from dataclasses import replace

import torch

from torch import nn

import utils.mini_deepseek as ref
import utils.mtp as ref_mtp
from autograder.checks import course_versions, expect, expect_close, expect_linear, own_module, own_work, randn, seeded_state
from utils.mla import MultiHeadLatentAttention
from utils.moe import Expert, MoE

CFG = ref.MiniDeepSeekConfig(vocab_size=11, dim=12, n_layers=3, n_dense_layers=1, inter_dim=20, n_heads=2,
                             q_lora_rank=6, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6,
                             moe_inter_dim=5, n_routed_experts=4, n_activated_experts=2, n_shared_experts=1,
                             n_expert_groups=2, n_limited_groups=1, score_func="sigmoid", route_scale=1.5,
                             max_seq_len=16)
CFG_TWO_DENSE = replace(CFG, n_dense_layers=2)  # layer 1 is dense here, a MoE layer in CFG
BLOCK_NORMS = ("attn_norm.weight", "ffn_norm.weight")
MTP_NORMS = ("enorm.weight", "hnorm.weight", "block.attn_norm.weight", "block.ffn_norm.weight")


def inputs(B, T, seed, dim=CFG.dim):
    """Inputs with a mean far from 0 and a spread per feature, so norms matter."""
    return randn(B, T, dim, seed=seed) * torch.linspace(0.5, 2.0, dim) + 1.5


def state(module, seed, norms=()):
    out = seeded_state(module, seed)
    for i, name in enumerate(norms):  # every norm its own weight
        out[name] = 1.0 + (0.4 - 0.25 * i) * torch.linspace(-1.0, 1.0, out[name].numel())
    return out


def reference(cls, *args, seed, norms=()):
    module = cls(*args)
    weights = state(module, seed, norms)
    module.load_state_dict(weights)
    return module.eval(), weights


def mtp_reference(depth, seed):
    """The course's model and `depth` MTP modules with deterministic weights (norm weights not ones)."""
    model, _ = reference(ref.MiniDeepSeek, CFG, seed=seed, norms=("norm.weight",))
    modules = ref_mtp.make_mtp_modules(CFG, depth)
    for k, module in enumerate(modules, start=1):
        module.load_state_dict(state(module, seed + 10 * k, MTP_NORMS))
    return model, modules.eval()


def course_parts(fn, names=("Block", "RMSNorm")):
    """While grading one class, the learner's other classes are replaced by the course's,
    so a mistake in an earlier exercise costs points once, in that exercise."""
    return course_versions(fn, {name: getattr(ref, name) for name in names})


def rms(x, w, eps):
    """RMSNorm's formula, for expected values."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def cache_paths(module, run) -> list:
    """Empty the MLA caches inside `module`, call run(), and say per MLA layer which path wrote
    its cache: 'absorbed' (latent and rope key), 'naive' (per-head keys and values), 'both' or None."""
    layers = [m for m in module.modules() if isinstance(m, MultiHeadLatentAttention)]
    for attn in layers:
        for name, buf in list(attn.named_buffers(recurse=False)):
            setattr(attn, name, buf[:0])
    run()
    paths = []
    for attn in layers:
        naive, absorbed = attn.k_cache.shape[0] > 0, attn.kv_cache.shape[0] > 0
        paths.append("both" if naive and absorbed else "absorbed" if absorbed else "naive" if naive else None)
    return paths


def expect_path(paths, absorb, who, en_what, zh_what):
    want = "absorbed" if absorb else "naive"
    if absorb:
        en = (f"{who} must pass absorb to {en_what}: with absorb=True MLA's absorbed path caches only the latent and the rope key "
              "(kv_cache, pe_cache), and your call ran the naive path (full keys and values).")
        zh = (f"{who} 必须把 absorb 传给{zh_what}：absorb=True 时 MLA 的吸收路径只缓存潜在向量和 rope 键（kv_cache、pe_cache），"
              "而你的调用走的是朴素路径（完整的键和值）。")
    else:
        en = (f"{who} must pass absorb to {en_what}: with absorb=False (the default) MLA runs its naive path, "
              "and your call ran the absorbed one (do not fix absorb, pass it through).")
        zh = (f"{who} 必须把 absorb 传给{zh_what}：absorb=False（默认值）时 MLA 走朴素路径，"
              "而你的调用走的是吸收路径（不要写死 absorb，把它传下去）。")
    expect(all(p == want for p in paths), en, zh, f"absorb={absorb}, cache written per layer: {paths}")


def block_structure(Block, cfg, layer_id, who):
    with own_work(Block, who), course_parts(Block, ("RMSNorm",)):
        block = own_module(Block, cfg, layer_id)
    for name in ("attn_norm", "ffn_norm"):
        expect(isinstance(getattr(block, name, None), nn.Module),
               f"Block needs its own {name} (an RMSNorm(dim)).", f"Block 需要自己的 {name}（一个 RMSNorm(dim)）。")
    expect(isinstance(getattr(block, "attn", None), MultiHeadLatentAttention),
           "Block.attn must be MultiHeadLatentAttention(cfg.mla()) from notebook 09.",
           "Block.attn 必须是笔记本 09 的 MultiHeadLatentAttention(cfg.mla())。",
           f"got {type(getattr(block, 'attn', None)).__name__}")
    ffn, evidence = getattr(block, "ffn", None), f"layer_id {layer_id}, n_dense_layers {cfg.n_dense_layers}"
    if layer_id < cfg.n_dense_layers:
        expect(isinstance(ffn, Expert) and ffn.w1.out_features == cfg.inter_dim,
               "A layer with layer_id < n_dense_layers has a dense feed-forward layer: ffn = Expert(dim, inter_dim).",
               "layer_id < n_dense_layers 的层使用稠密前馈层：ffn = Expert(dim, inter_dim)。", f"{evidence}, got {type(ffn).__name__}")
    else:
        expect(isinstance(ffn, MoE),
               "A layer with layer_id >= n_dense_layers uses a mixture of experts: ffn = MoE(dim, moe_inter_dim, ...) with the config's MoE sizes.",
               "layer_id >= n_dense_layers 的层使用混合专家：ffn = MoE(dim, moe_inter_dim, ...)，使用配置中的 MoE 大小。",
               f"{evidence}, got {type(ffn).__name__}")
    return block


def expect_precision_and_gradients(norm, x, x_grad, graded, half, half16, loud, ramp):
    """RMSNorm's outputs for a bfloat16 and a loud float16 input (computed in float32, returned in
    x's dtype), and its gradients with respect to x and weight, against autograd on the formula."""
    for result, dtype in ((half, torch.bfloat16), (half16, torch.float16)):
        expect(isinstance(result, torch.Tensor) and result.dtype == dtype,
               "RMSNorm must return x's dtype: compute in float32, then .to(x.dtype) (a bfloat16 input gives a bfloat16 output).",
               "RMSNorm 必须返回与 x 相同的数据类型：用 float32 计算，再 .to(x.dtype)（bfloat16 输入得到 bfloat16 输出）。",
               f"input {dtype}, output {getattr(result, 'dtype', None)}")
    expect_close(half.float(), rms(x.to(torch.bfloat16).float(), ramp, 1e-6).to(torch.bfloat16).float(),
                 "With a bfloat16 input RMSNorm must compute in float32 and round once at the end.",
                 "输入为 bfloat16 时，RMSNorm 必须用 float32 计算，只在最后舍入一次。", atol=2e-2, rtol=2e-2)
    expect_close(half16.float(), rms(loud.float(), ramp, 1e-6).to(torch.float16).float(),
                 "With a float16 input whose squares pass 65504 (float16's largest number), x**2 and its mean must be computed in float32: x.float() first, .to(x.dtype) at the end.",
                 "输入为 float16 且平方超过 65504（float16 能表示的最大数）时，x**2 及其均值必须用 float32 计算：先 x.float()，最后再 .to(x.dtype)。",
                 atol=2e-2, rtol=2e-2)
    expect(isinstance(graded, torch.Tensor) and graded.requires_grad,
           "No gradient flows through RMSNorm: use self.weight itself in forward (not self.weight.data or a detached copy), outside torch.no_grad().",
           "梯度无法流过 RMSNorm：在 forward 中直接使用 self.weight（不要用 self.weight.data 或分离出来的副本），也不要放在 torch.no_grad() 里。")
    probe = torch.linspace(-1.0, 2.0, graded.numel()).view_as(graded)
    grads = torch.autograd.grad((graded.float() * probe).sum(), [x_grad, norm.weight], allow_unused=True)
    ref_x, ref_w = x.clone().requires_grad_(True), ramp.clone().requires_grad_(True)
    want = torch.autograd.grad((rms(ref_x, ref_w, 1e-6) * probe).sum(), [ref_x, ref_w])
    for got, expected, what in zip(grads, want, ("x", "weight")):
        expect(got is not None, f"No gradient reaches RMSNorm's {what}: keep it in the graph in forward (no .data, .detach() or torch.no_grad()).",
               f"梯度传不到 RMSNorm 的 {what}：在 forward 中让它留在计算图里（不要用 .data、.detach() 或 torch.no_grad()）。")
        expect_close(got, expected, f"The gradient of RMSNorm with respect to {what} is wrong: keep every step of y = x * rsqrt(mean(x**2) + eps) * weight differentiable.",
                     f"RMSNorm 对 {what} 的梯度不对：让 y = x * rsqrt(mean(x**2) + eps) * weight 的每一步都保持可微。", atol=1e-4, rtol=1e-3)


def mtp_module_structure(module, who):
    """No embedding or head of its own; enorm, hnorm, eh_proj without bias, a Block with a MoE."""
    own = [n for n, m in module.named_modules() if isinstance(m, nn.Embedding)
           or (isinstance(m, nn.Linear) and m.out_features == CFG.vocab_size)]
    expect(not own, "MTPModule must not have an embedding or output head of its own: it uses the main model's, shared (DeepSeek-V3 shares them between the model and its MTP module).",
           "MTPModule 不能有自己的嵌入层或输出头：它使用主模型的，二者共享（DeepSeek-V3 的主模型与 MTP 模块共享它们）。", f"found {own}")
    for name in ("enorm", "hnorm"):
        expect(isinstance(getattr(module, name, None), nn.Module),
               f"MTPModule needs {name} = RMSNorm(dim).", f"MTPModule 需要 {name} = RMSNorm(dim)。")
    expect_linear(module, "eh_proj", 2 * CFG.dim, CFG.dim, False, who,
                  "eh_proj has no bias: nn.Linear(2 * dim, dim, bias=False).", "eh_proj 没有偏置：nn.Linear(2 * dim, dim, bias=False)。")
    expect(isinstance(getattr(getattr(module, "block", None), "ffn", None), MoE),
           "MTPModule.block must be Block(cfg, layer_id) (with layer_id >= n_dense_layers it has a MoE, as V3's MTP layer 61).",
           "MTPModule.block 必须是 Block(cfg, layer_id)（layer_id >= n_dense_layers 时它含 MoE，与 V3 的 MTP 第 61 层相同）。")


def with_weights(mtp_forward):
    """mtp_forward(model, mtp_modules, tokens) as f(tokens, model, mtp_modules, **weights): every
    parameter of the model (the shared embedding, final norm and head included) and of the MTP
    modules is a keyword argument, used in place of the module's own for the call, so the harness
    compares each one's gradient. The output is flat, (logits, depth 1's, ..., depth D's): the
    harness's loss sums the tensors of a flat result."""
    def run(tokens, model, mtp_modules, **weights):
        both = nn.ModuleDict({"model": model, "mtp": nn.ModuleList(mtp_modules)})
        with torch.nn.utils.stateless._reparametrize_module(both, weights):
            result = mtp_forward(model, mtp_modules, tokens)
        if isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[1], (tuple, list)):
            return (result[0], *result[1])
        return result
    return run


def mtp_probe(B, T, depth, seed):
    """(tokens, model, mtp_modules) and every weight by name, for with_weights: the course's model
    and MTP modules (norm weights not ones), tokens that differ per batch item."""
    model, modules = mtp_reference(depth, seed)
    both = nn.ModuleDict({"model": model, "mtp": modules})
    weights = {name: p.detach().clone() for name, p in both.named_parameters()}
    tokens = torch.randint(0, CFG.vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))
    return (tokens, model, modules), weights


def listed(fn):
    """mtp_loss(*depths, tokens, lam) as mtp_loss([depths...], tokens, lam): each depth its own argument."""
    def mtp_loss(*args, **kwargs):
        return fn(list(args[:-1]), args[-1], **kwargs)
    return mtp_loss
