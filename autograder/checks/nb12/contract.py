"""Notebook 12's contracts and input families (checks/harness.py): the learner's code against
utils.mini_deepseek / utils.mtp. The spaces' builders are in `capstone_spaces.py`."""
import torch

from autograder.checks import randn
from autograder.checks.core import rules
from autograder.checks.nb12 import capstone_spaces as cs
from autograder.checks.nb12.capstone_parts import CFG
from autograder.checks.core.harness import Family, Probe
from autograder.checks.core.rules import Contract, Forbid
from autograder.checks.core.space import LAYOUTS, Space

_WHOLE = ("it computes this whole exercise", "它会完成本练习的全部工作")
_ABSORB = ("Grading looks at which MLA cache a call filled: with `absorb=True` only the latent one (`kv_cache`, `pe_cache`), "
           "with `absorb=False` (the default) the per-head keys and values.",
           "评分会查看一次调用填充了哪个 MLA 缓存：`absorb=True` 时只有潜在缓存（`kv_cache`、`pe_cache`），"
           "`absorb=False`（默认）时是每个头的键和值。")
CONTRACTS = rules.register("12", [
    Contract("RMSNorm", forbids=(Forbid("torch.nn.functional.rms_norm", *_WHOLE), Forbid("torch.rms_norm", *_WHOLE),
                                 Forbid("torch.nn.RMSNorm", "its forward calls `F.rms_norm`; subclassing it is refused too",
                                        "它的 forward 调用 `F.rms_norm`；继承它也会被拒绝")),
             dtypes=("float32", "float64", "bfloat16", "float16"),
             dtype=("the output has x's dtype, computed in float32 (also when the norm is moved with `.to(dtype)`)",
                    "输出与 x 的 dtype 相同，用 float32 计算（用 `.to(dtype)` 转换过的归一化层也一样）"),
             notes=(("`weight` is the only parameter, shape `(dim,)`, ones at the start; `eps` is `1e-6` unless it is given.",
                     "`weight` 是唯一的参数，形状为 `(dim,)`，初始为全 1；除非另行给出，`eps` 为 `1e-6`。"),)),
    Contract("Block", notes=(_ABSORB,)),
    Contract("MiniDeepSeek", notes=(_ABSORB, ("The head keeps a weight of its own (not tied to the embedding).",
                                             "输出头有自己的权重（不与嵌入层绑定）。"))),
    Contract("next_token_loss", dtypes=("float32", "float64")),
    Contract("MTPModule", notes=(("No embedding or output head of its own: the main model's are shared.",
                                  "没有自己的嵌入层或输出头：共享主模型的。"),)),
    Contract("mtp_forward", notes=(("Every depth's logits keep their graph: the gradient reaches every parameter of `model` "
                                    "(through h^0 too) and of `mtp_modules`.",
                                    "每个深度的 logits 都保留计算图：梯度到达 `model`（也经由 h^0）和 `mtp_modules` 的每个参数。"),)),
    Contract("mtp_loss", dtypes=("float32", "float64")),
])
_GRADED = ("values", "shape", "dtype", "device", "inputs", "grads")
_F32 = ("float32",)
# Token ids are the one input that a learner's code reads itself (mtp_forward's weights are the
# modules' own): a column-major copy and a strided one, read through the gaps, are the two ways to
# get a non-contiguous (B, T) wrong; "mixed" is column-major for one input.
_ONE_INPUT = ("contiguous", "strided")

SPACES = {
    "RMSNorm": Space({"shape": tuple(cs.NORMS), "arguments:eps": (None, 0.25), "values": ("mean far from 0", "near eps", "large", "a zero row"),
                      "dtype": CONTRACTS["RMSNorm"].dtypes, "layout": ("contiguous", "column-major", "strided")}, cs.norm_point),
    "Block": Space({"shape": tuple(cs.SEQUENCES), "arguments:layer_id": (0, 2), "flag:absorb": (False, True),
                    "sequence": ("one call", "a prefill, then the rest at start_pos"), "values": ("mean far from 0", "centred"),
                    "dtype": _F32, "layout": ("contiguous", "column-major", "strided")}, cs.block_point, valid=cs.prefill_fits),
    # The model's, its MTP module's and the chain's probes are the capstone's most costly (a 3-layer model, forward,
    # backward and a deep copy each): their spaces hold what the hand-written checks do not. MiniDeepSeek's check runs a
    # prefill and the rest at start_pos with either absorb and looks at the caches; mtp_forward's runs the chain in
    # train(), the family in eval(), so a forward that switches the caller's modules either way shows.
    "MiniDeepSeek": Space({"shape": tuple(cs.TOKENS), "flag:absorb": (False, True), "values": ("random ids",), "dtype": _F32,
                           "layout": _ONE_INPUT}, cs.model_point),
    "next_token_loss": Space({"shape": tuple(cs.LOSSES), "values": ("normal", "order 300", "ties", "sure"),
                              "dtype": CONTRACTS["next_token_loss"].dtypes, "layout": LAYOUTS}, cs.loss_point,
                             no_grads=lambda p: p["values"] in ("order 300", "sure")),
    "MTPModule": Space({"shape": tuple(cs.MODULE_SEQUENCES), "sequence": ("one call", "a prefill, then the rest at start_pos"),
                        "values": ("different scales",), "dtype": _F32, "layout": ("contiguous", "mixed")},
                       cs.mtp_module_point),
    "mtp_forward": Space({"shape": tuple(cs.CHAINS), "values": ("random ids",), "dtype": _F32, "layout": _ONE_INPUT}, cs.chain_point),
    "mtp_loss": Space({"shape": tuple(cs.DEPTHS), "arguments:lam": (None, 0.1, 0.5), "values": ("normal", "order 300", "ties"),
                       "dtype": CONTRACTS["mtp_loss"].dtypes, "layout": LAYOUTS}, cs.depths_point,
                      no_grads=lambda p: p["values"] == "order 300"),
}


def _tokens(B, T, V, seed):
    return cs.tokens(B, T, V, seed)


def _depths(B, T, V, D, seed, scale=2.0):
    """mtp_loss's inputs as separate arguments (the harness compares each one's gradient):
    depth k's logits (B, T - k, V) for k = 1..D, then the tokens."""
    return (*[randn(B, T - k, V, seed=seed + k) * scale for k in range(1, D + 1)], _tokens(B, T, V, seed))


FAMILIES = {
    "RMSNorm": Family([
        Probe("batch", "(2, 3, 6) inputs whose rows differ, with a mean far from 0", lambda: ((randn(2, 3, 6, seed=1201) * 0.4 + 0.3,), {}),
              "各行不同、均值远离 0 的 (2, 3, 6) 输入"),
        Probe("edges", "inputs near 1e-3 (eps shows)", lambda: ((randn(4, 6, seed=1202) * 1e-3,), {}), "接近 1e-3 的输入（eps 的作用显现）"),
        Probe("extreme", "float16 inputs whose squares pass 65504", lambda: (((randn(2, 3, 6, seed=1203) * 250).half(),), {}),
              "平方超过 65504 的 float16 输入"),
        # inputs of another dtype into a norm whose weight stays float32 (the space's dtype points move the norm too):
        # the weight multiplies in float32, not rounded to x's dtype first
        *[Probe("dtype", f"{name} inputs, the weight in float32", lambda dt=dt: ((randn(2, 3, 6, seed=1204).to(dt),), {}),
                f"{name} 输入，权重为 float32") for dt, name in ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))],
    ], compares=_GRADED, space=SPACES["RMSNorm"]),
    # The pinned probes of the layers and the chain are points of their spaces now: a probe of a
    # 3-layer model costs a submit about as much as all of next_token_loss's.
    "Block": Family([], compares=_GRADED + ("state",), space=SPACES["Block"]),
    "MiniDeepSeek": Family([], compares=_GRADED + ("state",), space=SPACES["MiniDeepSeek"]),
    "MTPModule": Family([], compares=_GRADED + ("state",), space=SPACES["MTPModule"]),
    "next_token_loss": Family([
        Probe("batch", "(3, 6, 7) logits whose batch items differ", lambda: ((randn(3, 6, 7, seed=1221) * 2, _tokens(3, 6, 7, 1221)), {}),
              "批次项各不相同的 (3, 6, 7) logits"),
        Probe("extreme", "logits of order 300", lambda: ((randn(2, 5, 7, seed=1223) * 300, _tokens(2, 5, 7, 1223)), {}),
              "数量级为 300 的 logits"),
        Probe("dtype", "float64 logits", lambda: ((randn(2, 5, 7, seed=1225).double(), _tokens(2, 5, 7, 1225)), {}), "float64 logits"),
    ], compares=_GRADED, space=SPACES["next_token_loss"]),
    # every gradient: each parameter of the model (the shared embedding, final norm and head) and of
    # the MTP modules is an argument of the call (capstone_parts.with_weights)
    "mtp_forward": Family([], compares=_GRADED, space=SPACES["mtp_forward"]),
    "mtp_loss": Family([
        Probe("batch", "3 depths whose batch items differ, lam=0.1", lambda: (_depths(2, 9, 7, 3, 1231), {"lam": 0.1}),
              "3 个深度、批次项各不相同，lam=0.1"),
        Probe("extreme", "logits of order 300", lambda: (_depths(2, 7, 6, 2, 1234, scale=300.0), {"lam": 0.3}), "数量级为 300 的 logits"),
    ], compares=_GRADED, space=SPACES["mtp_loss"]),
}

# Mutants of the model answers that no input the contracts allow can tell apart (python -m autograder
# mutants 12), with the reason.
EQUIVALENT = {
    "RMSNorm": {"line 13: .float(...) dropped (an alias or the old dtype)":
                "y is float32 already: a bfloat16 or float16 weight is promoted to float32 in y * weight, and a float64 one "
                "gives a product within float32's tolerance"},
}
