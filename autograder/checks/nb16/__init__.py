"""Hidden checks of notebook 16: linear attention and the delta rule, a state of fixed size.

Ground truth is utils.linear_attention, itself checked against Hugging Face transformers' pure-PyTorch
references (utils/tests/test_linear_attention.py). When a value is wrong it is compared with what
each usual mistake computes (`delta_variants`), so that the message names the mistake; then the
property harness runs the exercise and the reference side by side over the family of inputs in
`nb16/contract.py`, gradients included.

What values cannot show is watched while the learner's code runs (`state_watch.StateWatch`), as the
exercises' contracts declare (`CONTRACTS` in nb16/contract.py, which make sync writes into each
exercise's Rules block):
- linear_attention_recurrent creates nothing larger than its inputs, its output and its state (no
  (T, T) matrix, no state per token kept);
- linear_attention_parallel runs as many torch operations for 24 tokens as for 6 (no loop over tokens);
- chunk_gated_delta_rule creates a few states per chunk, not one per token (no token-by-token loop).
Dtypes as the contracts fix them: outputs in the inputs' dtype, states in float32 (gated_delta_step, a
single step, keeps its inputs' dtype); the rules' ValueError for a head count that is not a multiple,
in every mode of the flags (the input spaces' "bad" axis)."""
import functools

import torch

import utils.linear_attention as ref
from autograder.checks import graded_checks, call, expect, expect_close, expect_known, expect_raises, expect_tensor, fail, own_work, randn
from autograder.checks.nb16 import delta_variants as var
from autograder.checks.core.comparisons import _where
from autograder.checks.nb16.contract import FAMILIES, _rule
from autograder.checks.core.harness import same_as_reference
from autograder.checks.nb16.state_watch import StateWatch
from utils.mla import one_thread

_DTYPES_EN = "return the output in the inputs' dtype and the state in float32 (compute in float32 whatever the inputs' dtype)"
_DTYPES_ZH = "输出用输入的 dtype 返回，状态用 float32 返回（无论输入是什么 dtype 都用 float32 计算）"


def _pair(result, who, second_may_be_none=False):
    """(out, state) of a function that returns two things."""
    expect(isinstance(result, (tuple, list)) and len(result) == 2,
           f"{who} must return a pair (out, state).", f"{who} 必须返回一对结果 (out, state)。", f"got {type(result).__name__}")
    out, state = result
    expect_tensor(out, f"{who}'s out", f"{who} 的 out")
    if not (second_may_be_none and state is None):
        expect_tensor(state, f"{who}'s state", f"{who} 的 state")
    return out, state


def _expect_dtypes(result, who, dtype, state_dtype=torch.float32):
    out, state = _pair(result, who, second_may_be_none=True)
    got = (out.dtype, None if state is None else state.dtype)
    expect(got == (dtype, state_dtype),
           f"With {dtype} inputs {who} must {_DTYPES_EN}.", f"输入为 {dtype} 时，{who} 必须{_DTYPES_ZH}。",
           f"out {got[0]}, state {got[1]}; expected {dtype} and {state_dtype}")


def _inputs(seed, B=2, T=9, H=3, d_k=4, d_v=5):
    q, k, v = randn(B, T, H, d_k, seed=seed), randn(B, T, H, d_k, seed=seed + 1), randn(B, T, H, d_v, seed=seed + 2)
    return q, k.transpose(1, 2).contiguous().transpose(1, 2), v  # k as a head split leaves it: not contiguous


# linear attention -------------------------------------------------------------------------------
def check_linear_attention_recurrent(linear_attention_recurrent):
    fn, who = linear_attention_recurrent, "linear_attention_recurrent"
    q, k, v = _inputs(160)
    long = [randn(2, 40, 2, 4, seed=163), randn(2, 40, 2, 4, seed=164), randn(2, 40, 2, 3, seed=165)]
    watch = StateWatch()
    with own_work(fn, who):
        out, state = _pair(call(fn, q, k, v, name=who), who)
        low = call(fn, *(t.bfloat16() for t in (q, k, v)), name=who)
        with watch:
            call(fn, *long, name=who)
    want_out, want_state = var.linear_recurrent(q, k, v)
    mistakes = lambda: [(var.linear_recurrent(q, k, v, **{key: not default})[0], *words)
                        for (key, words), default in zip(var.LINEAR_RECURRENT.items(), (False, True, False))]
    expect_known(out, want_out, mistakes,
                 f"{who}'s output differs from causal linear attention: S_t = S_(t-1) + k_tᵀ v_t, o_t = (q_t / sqrt(d_k)) S_t.",
                 f"{who} 的输出与因果线性注意力不同：S_t = S_(t-1) + k_tᵀ v_t，o_t = (q_t / sqrt(d_k)) S_t。")
    expect_close(state, want_state,
                 f"{who}'s state must be the sum over all tokens of k_tᵀ v_t, of shape (B, H, d_k, d_v): keys index its rows.",
                 f"{who} 的状态必须是所有词元的 k_tᵀ v_t 之和，形状为 (B, H, d_k, d_v)：键对应它的行。")
    _expect_dtypes(low, who, torch.bfloat16)
    limit = max(t.numel() for t in long + [torch.empty(2, 40, 2, 3), torch.empty(2, 2, 4, 3)])
    expect(watch.largest <= limit,
           f"{who} created a tensor of shape {watch.largest_shape}, larger than its inputs, its output and its state: the recurrent form keeps one state per head and updates it token by token (no (T, T) matrix, no state per token).",
           f"{who} 创建了形状为 {watch.largest_shape} 的张量，比它的输入、输出和状态都大：循环形式为每个头只保存一个状态，逐个词元更新它（不要 (T, T) 矩阵，也不要每个词元一个状态）。",
           f"{watch.largest} elements, at most {limit} allowed (T = 40)")
    reference = ref.linear_attention_recurrent  # looked up before own_work blocks it
    with own_work(fn, who):
        same_as_reference(fn, reference, FAMILIES[who], who, grads=True)


def check_linear_attention_parallel(linear_attention_parallel):
    fn, who = linear_attention_parallel, "linear_attention_parallel"
    q, k, v = _inputs(170)
    calls = {}
    with own_work(fn, who):
        out = call(fn, q, k, v, name=who)
        low = call(fn, *(t.bfloat16() for t in (q, k, v)), name=who)
        for T in (6, 24):
            with StateWatch() as calls[T]:
                call(fn, randn(1, T, 2, 4, seed=171), randn(1, T, 2, 4, seed=172), randn(1, T, 2, 3, seed=173), name=who)
    want = var.linear_parallel(q, k, v)
    defaults = {"diagonal": True, "future": False, "softmax": False, "scale": True}
    expect_known(out, want, lambda: [(var.linear_parallel(q, k, v, **{key: not defaults[key]}), *words)
                                     for key, words in var.LINEAR_PARALLEL.items()],
                 f"{who} differs from causal linear attention: ((Q / sqrt(d_k)) Kᵀ with zeros above the diagonal) V, per batch item and head.",
                 f"{who} 与因果线性注意力不同：((Q / sqrt(d_k)) Kᵀ，对角线之上为 0) 再乘以 V，对每个批次项和每个头分别计算。")
    expect(isinstance(low, torch.Tensor) and low.dtype == torch.bfloat16,
           f"With bfloat16 inputs {who} must return bfloat16 (compute in float32, cast the output back).",
           f"输入为 bfloat16 时 {who} 必须返回 bfloat16（用 float32 计算，再把输出转换回来）。", f"got {getattr(low, 'dtype', None)}")
    expect(calls[24].calls - calls[6].calls < 9,
           f"{who} ran more torch operations for 24 tokens than for 6: the parallel form computes every token at once with matrix products and a mask, without a loop over tokens.",
           f"{who} 处理 24 个词元时执行的 torch 运算比处理 6 个词元时多：并行形式用矩阵乘法和掩码一次算出所有词元，不对词元循环。",
           f"{calls[6].calls} operations for T = 6, {calls[24].calls} for T = 24")
    reference = ref.linear_attention_parallel
    with own_work(fn, who):
        same_as_reference(fn, reference, FAMILIES[who], who, explain=_explain_low_precision(who), grads=True)


def _explain_low_precision(who):
    """Values that differ on bfloat16 inputs only (the float32 probes came first and passed): the arithmetic's dtype."""
    def explain(probe, out, expected):
        if probe.dtype == "bfloat16" or "bfloat16" in probe.label:
            en_on, zh_on = _where(probe)
            return (f"{who}'s output differs from the course's on bfloat16 inputs{en_on}: compute in float32 (`.float()`) and cast "
                    "the output back; bfloat16's 8 bits lose too much over a sum of many scores.",
                    f"{who} 的输出在 bfloat16 输入上与课程的结果不同{zh_on}：用 float32 计算（`.float()`），再把输出转换回来；"
                    "bfloat16 只有 8 位，对许多分数求和时损失太多。")
        return None
    return explain


# the gated delta rule ---------------------------------------------------------------------------
def check_gated_delta_step(gated_delta_step):
    fn, who = gated_delta_step, "gated_delta_step"
    B, H, d_k, d_v = 2, 3, 4, 5
    state, q, k = randn(B, H, d_k, d_v, seed=180) * 0.5, randn(B, H, d_k, seed=181), randn(B, H, d_k, seed=182) * 0.5
    v, g = randn(B, H, d_v, seed=183), torch.tensor([[-0.1, -1.0, -3.0], [-0.5, 0.0, -2.0]])
    beta = torch.tensor([[0.3, 0.9, 0.6], [1.0, 0.2, 0.5]])
    args = (state, q, k, v, g, beta)
    with own_work(fn, who):
        result = call(fn, *args, name=who)
        double = call(fn, *(t.double() for t in args), name=who)
    out, new = _pair(result, who)
    want_out, want_new = ref.gated_delta_step(*args)
    mistakes = {key: var.step(*args, **{key: True}) for key in var.STEP}
    expect_known(new, want_new, [(m[1], *var.STEP[key]) for key, m in mistakes.items()],
                 f"{who}'s new state is wrong: S = exp(g) S, then S += kᵀ (beta (v - k S)).",
                 f"{who} 的新状态不对：S = exp(g) S，然后 S += kᵀ (beta (v - k S))。")
    expect_known(out, want_out, [(m[0], *var.STEP[key]) for key, m in mistakes.items()],
                 f"{who}'s output is wrong: o = q S with the state after the write.",
                 f"{who} 的输出不对：o = q S，用写入之后的状态。")
    _, double_state = _pair(double, who)
    expect(double[0].dtype == torch.float64 and double_state.dtype == torch.float64,
           f"{who} must return out and the new state in the dtype it is given (float64 here): the recurrent function gives it float32, a float64 caller expects float64.",
           f"{who} 必须以给它的 dtype（这里是 float64）返回 out 和新状态：循环函数给它的是 float32，float64 的调用者期望得到 float64。",
           f"out {double[0].dtype}, state {double_state.dtype}")
    reference = ref.gated_delta_step
    with own_work(fn, who):
        same_as_reference(fn, reference, FAMILIES[who], who, grads=True)


def _expect_rule_values(fn, who, chunk=None):
    """The named part shared by the recurrent and chunked forms: values on grouped heads with an
    initial state, with and without the L2 normalisation; None as the state when not asked for; the
    dtypes; the error for a head count that is not a multiple."""
    extra = {} if chunk is None else {"chunk_size": chunk}
    for seed, l2 in ((190, False), (191, True)):  # the first without an initial state: the zeros are the function's own
        args, kwargs = _rule(seed, B=2, T=7, H_k=2, H_v=4, d_k=4, d_v=3, l2=l2, initial=l2)
        with own_work(fn, who):
            out, state = _pair(call(fn, *args, **kwargs, **extra, name=who), who)
        want_out, want_state = var.rule(*args, **kwargs)
        expect_known(out, want_out, lambda: [(m[0], en, zh) for m, en, zh in var.rule_mistakes(args, kwargs)],
                     f"{who}'s output differs from the gated delta rule (grouped value heads, use_qk_l2norm={l2}, {'an' if l2 else 'no'} initial state): per token S = exp(g) S, S += kᵀ (beta (v - k S)), o = q S, with q scaled by d_k ** -0.5.",
                     f"{who} 的输出与门控 delta 规则不同（分组的值头、use_qk_l2norm={l2}、{'有' if l2 else '没有'}初始状态）：每个词元 S = exp(g) S，S += kᵀ (beta (v - k S))，o = q S，q 乘以 d_k ** -0.5。")
        expect_known(state, want_state, lambda: [(m[1], en, zh) for m, en, zh in var.rule_mistakes(args, kwargs)],
                     f"{who}'s final state differs from the gated delta rule's (use_qk_l2norm={l2}): it is the state after the last token, (B, H_v, d_k, d_v).",
                     f"{who} 的最终状态与门控 delta 规则的不同（use_qk_l2norm={l2}）：它是最后一个词元之后的状态，(B, H_v, d_k, d_v)。")
    args, kwargs = _rule(192, T=5, final=False)
    low_args, low_kwargs = _rule(193, T=5, H_v=4, dtype=torch.bfloat16)
    bad_args, bad_kwargs = _rule(194, T=3, H_k=2, H_v=3)
    with own_work(fn, who):
        result = call(fn, *args, **kwargs, **extra, name=who)
        low = call(fn, *low_args, **low_kwargs, **extra, name=who)
        expect_raises(ValueError, fn, *bad_args, **bad_kwargs, **extra, name=who,
                      en=f"{who} must raise ValueError when H_v (3) is not a multiple of H_k (2): each key head serves H_v // H_k value heads.",
                      zh=f"当 H_v（3）不是 H_k（2）的倍数时，{who} 必须抛出 ValueError：每个键头服务 H_v // H_k 个值头。")
    expect(_pair(result, who, second_may_be_none=True)[1] is None,
           f"With output_final_state=False {who} must return (out, None).", f"output_final_state=False 时 {who} 必须返回 (out, None)。",
           f"got a {type(result[1]).__name__} as the second element")
    _expect_dtypes(low, who, torch.bfloat16)


def _explain_rule(who):
    """A difference that only keys near zero with use_qk_l2norm=True show: the normalisation's eps."""
    def explain(probe, out, expected):
        if "values=keys near zero" in probe.label and "flag:use_qk_l2norm=True" in probe.label:
            en_on, zh_on = _where(probe)
            return (f"{who} differs on keys near zero with use_qk_l2norm=True{en_on}, where the L2 normalisation's eps decides: "
                    "normalise as x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6), eps 1e-6 inside the square root "
                    "(F.normalize divides by max(|x|, 1e-12), which differs there).",
                    f"{who} 在键接近 0 且 use_qk_l2norm=True 时与参考不同{zh_on}，这时由 L2 归一化的 eps 决定结果："
                    "要按 x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6) 归一化，eps 为 1e-6 并放在平方根之内"
                    "（F.normalize 除以 max(|x|, 1e-12)，在这里会不同）。")
        return None
    return explain


def check_recurrent_gated_delta_rule(recurrent_gated_delta_rule):
    fn, who = recurrent_gated_delta_rule, "recurrent_gated_delta_rule"
    _expect_rule_values(fn, who)
    reference = ref.recurrent_gated_delta_rule
    with own_work(fn, who):
        same_as_reference(fn, reference, FAMILIES[who], who, explain=_explain_rule(who), grads=True)


def _explain_chunk(probe, out, expected):
    en_on, zh_on = _where(probe)
    if isinstance(out, torch.Tensor) and not torch.isfinite(out.detach()).all() and torch.isfinite(expected).all():
        return (f"chunk_gated_delta_rule gives NaN or inf{en_on}: with strong decay e^γ underflows to 0 and e^(γ_j - γ_t) overflows for j > t; compute each pair's decay as exp(γ_t - γ_j) with the positions j > t masked to -inf before the exp (never exp(γ_t) / exp(γ_j), never inf times a zero mask).",
                f"chunk_gated_delta_rule 得到了 NaN 或 inf{zh_on}：衰减很强时 e^γ 下溢为 0，而 j > t 时 e^(γ_j - γ_t) 上溢；每一对位置的衰减要算成 exp(γ_t - γ_j)，并在 exp 之前把 j > t 的位置屏蔽为 -inf（不要算 exp(γ_t) / exp(γ_j)，也不要用 inf 乘以为 0 的掩码）。")
    return _explain_rule("chunk_gated_delta_rule")(probe, out, expected)


def check_chunk_gated_delta_rule(chunk_gated_delta_rule):
    fn, who = chunk_gated_delta_rule, "chunk_gated_delta_rule"
    _expect_rule_values(fn, who, chunk=4)
    B, T, H, d_k, d_v, C = 2, 64, 2, 5, 3, 16
    args, kwargs = _rule(200, B=B, T=T, H_k=H, H_v=H, d_k=d_k, d_v=d_v, chunk=C)
    with own_work(fn, who), StateWatch(state_shape=(B, H, d_k, d_v), square=T) as watch:
        out, _ = _pair(call(fn, *args, **kwargs, name=who), who)
    expect_close(out, ref.recurrent_gated_delta_rule(*args, **{k: v for k, v in kwargs.items() if k != "chunk_size"})[0],
                 f"{who} differs from the recurrent form on {T} tokens in chunks of {C}.", f"{who} 在 {T} 个词元、每块 {C} 个时与循环形式不同。",
                 atol=1e-4, rtol=1e-4)
    expect(watch.states < T / 2,
           f"{who} created about {watch.states:.0f} state-sized tensors for {T} tokens in {T // C} chunks: update the state once per chunk (the corrections of a chunk's tokens solved together, the UT transform), not once per token, and do not call the recurrent form.",
           f"{who} 为 {T} 个词元（{T // C} 块）创建了大约 {watch.states:.0f} 个状态大小的张量：每块只更新一次状态（一块内所有词元的修正量一起求解，即 UT 变换），而不是每个词元更新一次，也不要调用循环形式。",
           f"state shape {(B, H, d_k, d_v)}; fewer than {T // 2} allowed")
    expect(watch.square_shape is None,
           f"{who} built a tensor of shape {watch.square_shape}, with a ({T}, {T}) pair of dims for {T} tokens in chunks of {C}: work within each chunk with (chunk_size, chunk_size) matrices; one chunk of the whole sequence is the quadratic parallel form, not the chunked one.",
           f"{who} 为 {T} 个词元（每块 {C} 个）构造了形状为 {watch.square_shape} 的张量，其中有一对 ({T}, {T}) 的维度：在每一块内用 (chunk_size, chunk_size) 的矩阵计算；把整个序列当作一块是二次复杂度的并行形式，不是分块形式。")
    reference = ref.chunk_gated_delta_rule
    with own_work(fn, who):
        same_as_reference(fn, reference, FAMILIES[who], who, explain=_explain_chunk, grads=True)


# memory of a hybrid stack -----------------------------------------------------------------------
_BYTES = (3, 1000, 5, 2, 4, 16, 8, 64)  # batch, tokens, linear layers, full layers, heads, d_k, d_v, cache elements per token
_BYTES_MISTAKES = {
    "grows": ("The state of a linear layer does not grow with seq_len: batch_size * heads * d_k * d_v numbers per layer, whatever the length.",
              "线性层的状态不随 seq_len 增长：每层 batch_size * heads * d_k * d_v 个数，与长度无关。"),
    "twice": ("cache_elements_per_token already counts keys and values (2 * n_kv_heads * head_dim for GQA): do not multiply by 2 again.",
              "cache_elements_per_token 已经把键和值都算进去了（GQA 是 2 * n_kv_heads * head_dim）：不要再乘以 2。"),
    "swapped": ("The state's bytes per element are state_bytes_per_element (4, float32) and the cache's cache_bytes_per_element (2, bfloat16), not the other way round.",
                "状态每个元素的字节数是 state_bytes_per_element（4，float32），缓存的是 cache_bytes_per_element（2，bfloat16），不要弄反。"),
    "batch": ("Both the states and the cache hold one copy per text of the batch: multiply by batch_size.",
              "状态和缓存都为批次中的每段文本保存一份：要乘以 batch_size。"),
}


def _bytes_variant(batch, T, n_lin, n_full, heads, d_k, d_v, per_token, mistake):
    s_b, c_b = (2, 4) if mistake == "swapped" else (4, 2)
    b = 1 if mistake == "batch" else batch
    state = b * n_lin * heads * d_k * d_v * s_b * (T if mistake == "grows" else 1)
    return state, b * T * n_full * per_token * c_b * (2 if mistake == "twice" else 1)


def check_hybrid_cache_bytes(hybrid_cache_bytes):
    fn, who = hybrid_cache_bytes, "hybrid_cache_bytes"
    with own_work(fn, who):
        got = call(fn, *_BYTES, name=who)
    want = ref.hybrid_cache_bytes(*_BYTES)
    expect(isinstance(got, tuple) and len(got) == 2, f"{who} must return a pair of ints (state bytes, cache bytes).",
           f"{who} 必须返回一对整数 (状态字节数, 缓存字节数)。", f"got {got!r}")
    if tuple(got) != want:
        for mistake, (en, zh) in _BYTES_MISTAKES.items():
            if tuple(got) == _bytes_variant(*_BYTES, mistake):
                fail(en, zh, f"got {got}, expected {want} for {_BYTES}")
        fail(f"{who} is wrong: state = batch * linear layers * heads * d_k * d_v * state bytes; cache = batch * seq_len * full layers * elements per token * cache bytes.",
             f"{who} 不对：状态 = 批大小 * 线性层数 * 头数 * d_k * d_v * 状态的字节数；缓存 = 批大小 * seq_len * 全注意力层数 * 每个词元的元素数 * 缓存的字节数。",
             f"got {got}, expected {want} for {_BYTES}")
    reference = ref.hybrid_cache_bytes
    with own_work(fn, who):
        same_as_reference(fn, reference, FAMILIES[who], who)


def _on_one_thread(check):
    """The check on one thread, as the harness runs: its tensors are tiny, and on a busy machine threads
    waiting for each other cost far more than the arithmetic."""
    @functools.wraps(check)
    def run(*args, **kwargs):
        with one_thread():
            return check(*args, **kwargs)
    return run


for _name in [n for n in globals() if n.startswith("check_")]:
    globals()[_name] = _on_one_thread(globals()[_name])
graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
