"""Solutions of notebook 10 written as an adversarial learner would, second round (merged into nb10's
WRONG and RIGHT): state across calls, tensors made on the CPU, a module that computes in float32
whatever its dtype, counts right only for one shared expert, and right solutions written differently."""
import torch, math
import torch.nn.functional as F
from torch import nn
import utils.moe as R

# topk_router: caches the last result by shape (state across calls)
_cache = {}
def router_cached(logits, k):
    key = (tuple(logits.shape), k)
    if key not in _cache:
        p = torch.softmax(logits, -1); t, i = p.topk(k, -1)
        _cache[key] = (t / t.sum(-1, keepdim=True), i)
    return _cache[key]
def router_sort_gather(logits, k):  # right: full sort, take the first k
    p = torch.softmax(logits, -1)
    s, i = p.sort(-1, descending=True)
    t = s[..., :k]
    return t / t.sum(-1, keepdim=True), i[..., :k]
def router_eps(logits, k):  # renormalised by sum + 1e-3: off by 1e-3
    p = torch.softmax(logits, -1); t, i = p.topk(k, -1)
    return t / (t.sum(-1, keepdim=True) + 1e-3), i
# load_balancing_loss
def lb_first_choice(router_probs, expert_indices, num_experts):  # Switch's top-1 count only
    f = torch.bincount(expert_indices[:, 0], minlength=num_experts).to(router_probs.dtype) / expert_indices.shape[0]
    return num_experts * (f * router_probs.mean(0)).sum()
def lb_scatter_cpu(router_probs, expert_indices, num_experts):  # counts made on the CPU (torch.zeros without device)
    counts = torch.zeros(num_experts, dtype=router_probs.dtype).scatter_add_(0, expert_indices.flatten(), torch.ones(expert_indices.numel(), dtype=router_probs.dtype))
    return num_experts * torch.dot(counts / expert_indices.numel(), router_probs.mean(0))
def lb_scatter(router_probs, expert_indices, num_experts):  # right: scatter_add counts, dot product
    counts = router_probs.new_zeros(num_experts).scatter_add_(0, expert_indices.flatten(), router_probs.new_ones(expert_indices.numel()))
    return num_experts * torch.dot(counts / expert_indices.numel(), router_probs.mean(0))
# update_expert_bias
def bias_median(bias, tokens_per_expert, gamma=0.001):
    load = tokens_per_expert.to(bias.dtype)
    return bias - gamma * torch.sign(load - load.median())
def bias_multiplicative(bias, tokens_per_expert, gamma=0.001):
    load = tokens_per_expert.to(bias.dtype)
    return bias * (1 - gamma * torch.sign(load - load.mean()))
def bias_compare(bias, tokens_per_expert, gamma=0.001):  # right: comparisons
    load = tokens_per_expert.to(bias.dtype); mean = load.mean()
    return bias - gamma * ((load > mean).to(bias.dtype) - (load < mean).to(bias.dtype))
# Expert
class ExpertTied(nn.Module):  # w3 is the same layer as w1
    def __init__(self, dim, inter_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, inter_dim, bias=False); self.w2 = nn.Linear(inter_dim, dim, bias=False); self.w3 = self.w1
    def forward(self, x): return self.w2(F.silu(self.w1(x)) * self.w3(x))
class ExpertFloat32(nn.Module):  # computes in float32 whatever x is
    def __init__(self, dim, inter_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, inter_dim, bias=False); self.w2 = nn.Linear(inter_dim, dim, bias=False); self.w3 = nn.Linear(dim, inter_dim, bias=False)
    def forward(self, x):
        x = x.float()
        return F.linear(F.silu(F.linear(x, self.w1.weight.float())) * F.linear(x, self.w3.weight.float()), self.w2.weight.float())
class ExpertGluChunk(nn.Module):  # right: silu(a) * b written with sigmoid, via chunk of a cat
    def __init__(self, dim, inter_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, inter_dim, bias=False); self.w2 = nn.Linear(inter_dim, dim, bias=False); self.w3 = nn.Linear(dim, inter_dim, bias=False)
    def forward(self, x):
        a, b = F.linear(x, torch.cat([self.w1.weight, self.w3.weight])).chunk(2, -1)
        return self.w2(a * torch.sigmoid(a) * b)
# Gate
def gate_cls(mistake=None):
    class Gate(R.Gate.__base__):
        def __init__(self, dim, n_routed_experts, n_activated_experts, n_expert_groups=1, n_limited_groups=1, score_func="sigmoid", route_scale=1.0):
            super().__init__()
            if score_func not in ("sigmoid", "softmax"): raise ValueError(score_func)
            self.topk, self.n_groups, self.topk_groups = n_activated_experts, n_expert_groups, n_limited_groups
            self.score_func, self.route_scale = score_func, route_scale
            self.weight = nn.Parameter(torch.randn(n_routed_experts, dim) * 0.1)
            self.bias = nn.Parameter(torch.zeros(n_routed_experts), requires_grad=False)
        def forward(self, x):
            logits = F.linear(x, self.weight)
            aff = logits.softmax(-1, dtype=torch.float32) if self.score_func == "softmax" else logits.sigmoid()
            scores = aff + self.bias
            if self.n_groups > 1:
                N = x.shape[0]
                src = aff if mistake == "groups without bias" else scores
                g = src.view(N, self.n_groups, -1)
                if mistake == "top-2 sum for softmax too" or self.score_func == "sigmoid":
                    gs = g.topk(2, -1).values.sum(-1)
                else:
                    gs = g.amax(-1)
                keep = gs.topk(self.topk_groups, -1).indices
                mask = torch.zeros_like(gs, dtype=torch.bool).scatter(1, keep, True)
                scores = scores.view(N, self.n_groups, -1).masked_fill(~mask[..., None], -1e30).flatten(1) if mistake is None else \
                    scores.view(N, self.n_groups, -1).masked_fill(~mask[..., None], float("-inf")).flatten(1)
            idx = scores.topk(self.topk, -1).indices
            w = aff.gather(1, idx)
            if self.score_func == "sigmoid": w = w / w.sum(-1, keepdim=True)
            return (w * self.route_scale).to(x.dtype), idx
    return Gate
# MoE
def moe_cls(mistake=None):
    class MoE(nn.Module):
        def __init__(self, dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts=0, n_expert_groups=1, n_limited_groups=1, score_func="sigmoid", route_scale=1.0):
            super().__init__()
            self.dim = dim
            self.gate = R.Gate(dim, n_routed_experts, n_activated_experts, n_expert_groups, n_limited_groups, score_func, route_scale)
            self.experts = nn.ModuleList(R.Expert(dim, moe_inter_dim) for _ in range(n_routed_experts))
            inter = moe_inter_dim if mistake == "shared inter dim" else n_shared_experts * moe_inter_dim
            self.shared_experts = R.Expert(dim, inter) if n_shared_experts > 0 else None
        def forward(self, x):
            shape = x.shape; x = x.reshape(-1, self.dim)
            w, idx = self.gate(x)
            flat = idx.flatten(); order = flat.argsort()
            tok = order // idx.shape[1]
            counts = torch.bincount(flat, minlength=len(self.experts)).tolist()
            ys = []
            for e, (rows, ws) in enumerate(zip(tok.split(counts), w.flatten()[order].split(counts))):
                ys.append(self.experts[e](x[rows]) * ws[:, None] if len(rows) else x.new_zeros(0, self.dim))
            out = torch.cat(ys)
            y = torch.zeros_like(x).index_add(0, tok, out)
            if mistake == "shared on the routed output":
                y = y + self.shared_experts(y) if self.shared_experts is not None else y
            elif self.shared_experts is not None:
                y = y + self.shared_experts(x)
            return y.reshape(shape)
    return MoE
# moe_parameter_counts
def counts_one_shared(dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts):
    e = 3 * dim * moe_inter_dim; g = n_routed_experts * dim + n_routed_experts
    s = 1 if n_shared_experts else 0
    return (n_routed_experts + s) * e + g, (n_activated_experts + s) * e + g
def counts_float(dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts):  # floats, not ints
    e = 3.0 * dim * moe_inter_dim; g = n_routed_experts * (dim + 1.0)
    return (n_routed_experts + n_shared_experts) * e + g, (n_activated_experts + n_shared_experts) * e + g
def counts_modules(dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts):  # right: built on meta
    with torch.device("meta"):
        layer = R.MoE(dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts)
    total = sum(p.numel() for p in layer.parameters())
    one = sum(p.numel() for p in layer.experts[0].parameters())
    return total, total - (n_routed_experts - n_activated_experts) * one

WRONG = {
    "topk_router": {
        # state across calls: the second call with the same shape gets the first's answer / 跨调用的状态
        "caches the result by shape": (router_cached, "carry the gradient back"),
        "renormalised by sum + 1e-3": (router_eps, "divide them by their sum"),
    },
    "load_balancing_loss": {
        "counts the first choice only (Switch's top-1)": (lb_first_choice, "f_i the share of assignments"),
        "counts made on the CPU": (lb_scatter_cpu, "on another device"),
    },
    "update_expert_bias": {
        "median load": (bias_median, "unchanged at the mean"),
        "multiplicative step": (bias_multiplicative, "unchanged at the mean"),
    },
    "Expert": {
        "w3 is the same layer as w1": (ExpertTied, "names of the contract"),
        # a model in float64 or bfloat16 gets float32 back / 在 float64 或 bfloat16 的模型中返回 float32
        "computes in float32 whatever its dtype": (ExpertFloat32, "must follow its input's dtype (torch.float64)"),
    },
    "Gate": {
        "groups ranked without the bias": (gate_cls("groups without bias"), "rank by score + bias within the kept groups"),
        "top-2 group sum for softmax too": (gate_cls("top-2 sum for softmax too"), "not the sum of its top two"),
    },
    "MoE": {
        "shared experts one expert wide": (moe_cls("shared inter dim"), "has the wrong shape"),
        "shared experts on the routed output": (moe_cls("shared on the routed output"), "plus the shared experts"),
    },
    "moe_parameter_counts": {
        "one shared expert counted whatever n_shared": (counts_one_shared, "(routed + shared) experts"),
        "floats": (counts_float, "must return an int"),
    },
}

RIGHT = {
    "topk_router": {"full sort, first k": router_sort_gather},
    "load_balancing_loss": {"scatter_add counts, dot": lb_scatter},
    "update_expert_bias": {"comparisons": bias_compare},
    "Expert": {"fused w1|w3, x * sigmoid(x)": ExpertGluChunk},
    "Gate": {"-1e30 mask, F.linear": gate_cls()},
    "MoE": {"argsort, split, cat": moe_cls()},
    "moe_parameter_counts": {"built on the meta device": counts_modules},
}
