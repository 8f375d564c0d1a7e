"""Notebook 10's contracts and input families (mixture of experts): what the harness runs each
exercise and the course's utils.moe on, as data (autograder/checks/core/harness.py). The input spaces
are in nb10_spaces.py."""
import torch

from autograder.checks import randn
from autograder.checks.core import rules
from autograder.checks.nb10.spaces import router_logits, spaced_logits, spaces
from autograder.checks.core.harness import Family, Probe
from autograder.checks.core.rules import Contract

_CHOICE = ("no tie at the k-th place of a token's choice scores (a tie there may go either way)",
           "每个词元的选择分数在第 k 位上没有并列（并列时选哪个都可以）")
_LAYER = ("the layer moved with `.to(dtype)` computes in that dtype", "用 `.to(dtype)` 转换后的层用该 dtype 计算")
_GATE_SIZES = ("`score_func` is \"sigmoid\" or \"softmax\"; the groups divide the experts, at least 2 experts each, "
               "`n_limited_groups <= n_expert_groups`, and the kept groups hold at least `n_activated_experts` experts",
               "`score_func` 为 \"sigmoid\" 或 \"softmax\"；组能整除专家数、每组至少 2 个专家，`n_limited_groups <= n_expert_groups`，"
               "且保留的组里至少有 `n_activated_experts` 个专家")
_INT_PAIR = ("a tuple of two `int`s", "由两个 `int` 组成的元组")

CONTRACTS = rules.register("10", [
    Contract("Expert", dtypes=("float32", "float64"), dtype=_LAYER),
    Contract("topk_router", dtypes=("float32", "float64", "bfloat16"),
             dtype=("the weights have the logits' dtype; the indices are integers", "权重与 logits 的 dtype 相同；索引为整数"),
             preconditions=(("1 <= k <= E", "1 <= k <= E"), _CHOICE),
             notes=(("A token's k experts may come in any order (each token's pairs are compared sorted by expert).",
                     "一个词元的 k 个专家可以按任意顺序给出（每个词元的（权重，专家）对按专家编号排序后比较）。"),)),
    Contract("load_balancing_loss", dtypes=("float32",), dtype=("a scalar (one number)", "标量（一个数）"),
             preconditions=(("every entry of expert_indices is an expert number below num_experts; router_probs has num_experts columns",
                             "expert_indices 的每个元素都是小于 num_experts 的专家编号；router_probs 有 num_experts 列"),)),
    Contract("Gate", dtypes=("float32", "float64"), dtype=_LAYER,
             preconditions=(_GATE_SIZES, _CHOICE),
             notes=(("A token's k experts may come in any order (compared sorted by expert).",
                     "一个词元的 k 个专家可以按任意顺序给出（按专家编号排序后比较）。"),)),
    Contract("update_expert_bias", dtypes=("float32", "float64"), may_change=("bias",),
             dtype=("the new bias has the bias's dtype, whatever the dtype of tokens_per_expert", "新的偏置与 bias 的 dtype 相同，无论 tokens_per_expert 是什么 dtype"),
             notes=(("Returning the bias updated in place is fine too.", "原地更新 bias 并返回它也可以。"),)),
    Contract("MoE", dtypes=("float32", "float64"), dtype=_LAYER, helpers=("dispatch", "moe_forward_per_token"),
             preconditions=(_GATE_SIZES, _CHOICE),
             notes=(("Graded with the course's `Gate` and `Expert` in place of yours; the arithmetic of `forward` is counted (each routed "
                     "expert runs once, on its tokens only: no loop over the tokens).",
                     "评分时用课程的 `Gate` 和 `Expert` 代替你的；`forward` 的运算量会被统计（每个路由专家只运行一次，且只处理路由给它的词元："
                     "不要对词元循环）。"),)),
    Contract("moe_parameter_counts", dtypes=(), dtype=_INT_PAIR, device="none"),
])
SPACES = spaces(CONTRACTS)


def _tokens_family(seed, members, typed=(), space=None):
    """The layers' families (Expert, Gate, MoE): one probe per member (axis, label, zh, shape of x,
    scale of x), the n-th input x drawn with seed + n; every output and gradient compared. `typed`
    members (label, zh, shape, dtype) are dtype probes, for a layer moved to that dtype
    (causal_layers.split_dtypes); each label names its dtype."""
    probes = [Probe(axis, label, lambda n=n, shape=shape, scale=scale: ((randn(*shape, seed=seed + n) * scale,), {}), zh)
              for n, (axis, label, zh, shape, scale) in enumerate(members)]
    probes += [Probe("dtype", label, lambda n=n, shape=shape, dtype=dtype: ((randn(*shape, seed=seed + 50 + n).to(dtype),), {}), zh)
               for n, (label, zh, shape, dtype) in enumerate(typed)]
    return Family(probes, compares=("values", "shape", "dtype", "device", "inputs", "grads"), space=space)


def _tied_logits():  # a tie inside the top k (both kept) and one below it (both dropped)
    return torch.tensor([[2.0, 2.0, 0.0, -1.0, 0.5, -3.0], [4.0, 3.0, 1.0, 1.0, 1.0, -1.0], [0.5, -1.0, 3.0, -2.0, 3.0, 0.0]])


def _balance_inputs(seed, N, E, k, unused=False):
    probs = torch.softmax(randn(N, E, seed=seed) * 2, -1)
    steer = torch.linspace(0.0, 0.3, E)  # the choice made with a bias, as DeepSeek's
    chosen = (probs + steer)[:, :E - 1] if unused else probs + steer  # expert E - 1 left unused
    return (probs, chosen.topk(k, -1).indices, E), {}


_GRADED = ("values", "shape", "dtype", "device", "inputs", "grads")
FAMILIES = {
    "Expert": _tokens_family(160, [
        ("batch", "a (2, 3, dim) input whose tokens differ", "词元各不相同的 (2, 3, dim) 输入", (2, 3, 6), 1.0),
        ("edges", "a single token (dim,)", "单个词元 (dim,)", (6,), 1.0),
        ("extreme", "inputs of order 30", "30 量级的输入", (4, 6), 30.0),
    ], typed=[("float64 inputs, the expert moved with .to(torch.float64)", "float64 输入，专家已用 .to(torch.float64) 转换",
               (3, 6), torch.float64)], space=SPACES["Expert"]),
    "topk_router": Family([
        Probe("batch", "five tokens whose logits differ, k=2", lambda: ((router_logits(170), 2), {}), "五个 logits 各不相同的词元，k=2"),
        Probe("extreme", "logits in the hundreds (±500, 300)", lambda: ((router_logits(171, [500.0, -500.0, 300.0, 0.0, -300.0]), 3), {}),
              "数百量级的 logits（±500、300）"),
        Probe("ties", "tied logits inside and below the top k", lambda: ((_tied_logits(), 2), {}), "在前 k 个之内和之下的并列 logits"),
        Probe("edges", "k equal to the number of experts, one token", lambda: ((router_logits(172, N=1), 6), {}), "k 等于专家数，只有一个词元"),
        Probe("edges", "k=1", lambda: ((router_logits(173, N=3), 1), {}), "k=1"),
        Probe("coverage", "an expert no token picks", lambda: ((router_logits(174, unused=5), 2), {}), "没有词元选择的专家"),
        Probe("dtype", "float64 logits", lambda: ((router_logits(175).double(), 2), {}), "float64 的 logits"),
        Probe("dtype", "bfloat16 logits", lambda: ((spaced_logits(176).bfloat16(), 2), {}), "bfloat16 的 logits"),
    ], compares=_GRADED, space=SPACES["topk_router"]),
    "load_balancing_loss": Family([
        Probe("batch", "six tokens, 4 experts, k=2", lambda: _balance_inputs(180, 6, 4, 2), "六个词元、4 个专家、k=2"),
        Probe("coverage", "an expert no token picks", lambda: _balance_inputs(181, 6, 5, 2, unused=True), "没有词元选择的专家"),
        Probe("arguments", "k=3 of 6 experts", lambda: _balance_inputs(182, 5, 6, 3), "6 个专家中选 k=3"),
        Probe("edges", "one token, k=1", lambda: _balance_inputs(183, 1, 4, 1), "一个词元，k=1"),
    ], compares=_GRADED, space=SPACES["load_balancing_loss"]),
    "Gate": _tokens_family(190, [
        ("batch", "six tokens that differ", "六个各不相同的词元", (6, 12), 1.0),
        ("edges", "one token", "一个词元", (1, 12), 1.0),
        ("extreme", "inputs of order 5", "5 量级的输入", (6, 12), 5.0),
    ], space=SPACES["Gate"]),
    "MoE": _tokens_family(195, [
        ("batch", "a (2, 5, dim) input whose tokens differ", "词元各不相同的 (2, 5, dim) 输入", (2, 5, 12), 1.0),
        ("edges", "a single token (dim,)", "单个词元 (dim,)", (12,), 1.0),
        ("extreme", "inputs of order 10", "10 量级的输入", (6, 12), 10.0),
    ], space=SPACES["MoE"]),
    "update_expert_bias": Family([
        Probe("ties", "loads exactly at the mean", lambda: ((torch.tensor([0.5, -0.2, 0.0, 0.1]), torch.tensor([4, 8, 2, 2]), 0.05), {}),
              "正好等于平均值的负载"),
        Probe("coverage", "an expert with no token", lambda: ((torch.tensor([0.1, 0.0, -0.1]), torch.tensor([7, 0, 3]), 0.01), {}),
              "没有词元的专家"),
        Probe("arguments", "the default gamma", lambda: ((torch.zeros(3), torch.tensor([5, 0, 1])), {}), "默认的 gamma"),
        Probe("dtype", "a float64 bias", lambda: ((torch.tensor([0.5, -0.2, 0.3], dtype=torch.float64), torch.tensor([9, 1, 2]), 0.05), {}),
              "float64 的偏置"),
    ], compares=("values", "shape", "dtype", "device", "inputs"), space=SPACES["update_expert_bias"]),
    "moe_parameter_counts": Family([
        Probe("arguments", "DeepSeek-V3's sizes", lambda: ((7168, 2048, 256, 8, 1), {}), "DeepSeek-V3 的尺寸"),
        Probe("edges", "no shared expert", lambda: ((12, 5, 8, 2, 0), {}), "没有共享专家"),
        Probe("arguments", "one activated, three shared", lambda: ((10, 3, 6, 1, 3), {}), "一个激活专家、三个共享专家"),
    ], compares=("values",), space=SPACES["moe_parameter_counts"]),
}

# Mutants of the model answers that no input the contracts allow can tell apart (`python -m autograder mutants 10`).
_TWO_D = "the logits and scores are (N, E): dim 1 is dim -1, and -1 is topk's default"
_LAST = "dim 1 is dim -1 of an (N, G) or (N, k) tensor, and -1 is the default"
EQUIVALENT = {
    "topk_router": {"line 3: -1 -> 1": _TWO_D, "line 4: keyword dim= dropped": _TWO_D, "line 4: -1 -> 1": _TWO_D, "line 5: -1 -> 1": _TWO_D},
    "load_balancing_loss": {"line 3: .to(...) dropped (an alias or the old dtype)":
                            "integer counts divided by an int are float32, the only dtype graded here"},
    "Gate": {
        "line 2: constant 1 -> 0": "a default of 0 groups (or 0 kept) takes the same path as 1: only n_expert_groups > 1 groups experts",
        "line 2: constant 1 -> 2": "n_limited_groups is read only when the experts are grouped (the default gate is not)",
        "line 9: (5 ** 0.5) -> its left operand": "the initialisation is never graded: the course's weights are loaded",
        "line 9: constant 5 -> 6": "the initialisation is never graded: the course's weights are loaded",
        "line 9: constant 5 -> 4": "the initialisation is never graded: the course's weights are loaded",
        "line 9: constant 0.5 -> 1.0": "the initialisation is never graded: the course's weights are loaded",
        "line 9: constant 0.5 -> 0.25": "the initialisation is never graded: the course's weights are loaded",
        "line 9: keyword a= dropped": "the initialisation is never graded: the course's weights are loaded",
        "line 9: ** -> *": "the initialisation is never graded: the course's weights are loaded",
        "line 10: False -> True": "the bias's requires_grad is free (the text: requires_grad=False is fine); no gradient reaches it",
        "line 10: keyword requires_grad= dropped": "the bias's requires_grad is free (the text: requires_grad=False is fine); no gradient reaches it",
        "line 18: if self.n_groups > 1 -> if True": "one group of every expert, its one group kept: the same choice",
        "line 18: > -> >=": "one group of every expert, its one group kept: the same choice",
        "line 18: constant 1 -> 0": "one group of every expert, its one group kept: the same choice",
        "line 16: -1 -> 1": _LAST, "line 23: keyword dim= dropped": _LAST, "line 24: keyword dim= dropped": _LAST,
        "line 24: -1 -> 1": _LAST, "line 27: keyword dim= dropped": _LAST, "line 27: -1 -> 1": _LAST, "line 30: -1 -> 1": _LAST,
        "line 31: .to(...) dropped (an alias or the old dtype)": "the weights are computed in x's dtype already (the layer is moved with x)",
    },
    "MoE": {
        "line 2: constant 0 -> -1": "a default of -1 shared experts builds none, as 0 does",
        "line 3: constant 1 -> 0": "n_limited_groups is read only when the experts are grouped (the default MoE's are not)",
        "line 3: constant 1 -> 2": "n_limited_groups is read only when the experts are grouped (the default MoE's are not)",
        "line 19: keyword minlength= dropped": "experts past the last one used get no token either way: the loop skips them",
        "line 19: len(self.experts) -> the constant 8 (its value on the first probe)": "counts past the experts are zeros the loop skips; experts past 8 unused get none either way",
        "line 20: -1 -> 1": "unsqueeze(1) is unsqueeze(-1) on the 1-D weights",
        "line 24: if count -> if True": "an expert run on no token adds nothing (and stays within the counted matrix products)",
    },
}
