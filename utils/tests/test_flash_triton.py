"""The Triton kernels of notebook 15 against PyTorch: F.scaled_dot_product_attention, float64
attention and autograd. On a CPU they run in Triton's interpreter (small sizes: every program is
executed in Python); on a GPU the same tests run the compiled kernels."""
import math

import pytest
import torch
import torch.nn.functional as F

from utils.flash_attention import naive_attention
from utils.flash_triton import (TritonFlashAttention, check_inputs, interpreted, kernel_device, tolerance,
                                triton_flash_attention_forward, triton_softmax)

DEVICE = kernel_device()
# float32 on a GPU: tl.dot multiplies in TF32 (10 bits of mantissa), as matmuls there do by default
TOL = {torch.float32: tolerance()["atol"], torch.bfloat16: 3e-2, torch.float16: 4e-3}


def randn(*shape, seed, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale).to(dtype).to(DEVICE)


def exact(q, k, v, causal):
    """(out, lse) in float64 on the CPU: what the kernels must equal up to their dtype's rounding."""
    return naive_attention(q.cpu().double(), k.cpu().double(), v.cpu().double(), causal)


def bottom_right(T_q, T_k):
    return torch.ones(T_q, T_k, dtype=torch.bool, device=DEVICE).tril(T_k - T_q)  # True = seen


def test_the_interpreter_runs_where_there_is_no_gpu():
    assert interpreted() or torch.cuda.is_available()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_rows(dtype):
    x = randn(5, 37, seed=0, dtype=dtype, scale=3.0)  # 37 columns: a block of 64, 27 masked
    x[1] += 500.0  # exp overflows without the row's maximum
    x[2, ::3] = float("-inf")
    out = triton_softmax(x)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out.cpu().double(), torch.softmax(x.cpu().double(), -1), atol=TOL[dtype], rtol=0)


def test_softmax_rows_of_a_strided_view():
    wide = randn(4, 50, seed=1)
    torch.testing.assert_close(triton_softmax(wide[:, :30]).cpu(), torch.softmax(wide[:, :30].cpu(), -1), atol=1e-6, rtol=0)
    torch.testing.assert_close(triton_softmax(wide.T).cpu(), torch.softmax(wide.T.cpu(), -1), atol=1e-6, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_against_float64_and_sdpa(causal, dtype):
    # batch items and heads that differ, lengths that are not multiples of the blocks, T_q != T_k
    q, k, v = randn(2, 3, 19, 16, seed=2, dtype=dtype), randn(2, 3, 37, 16, seed=3, dtype=dtype), randn(2, 3, 37, 16, seed=4, dtype=dtype)
    out, lse = triton_flash_attention_forward(q, k, v, causal, block_q=16, block_k=16)
    assert out.dtype == dtype and lse.dtype == torch.float32 and lse.shape == (2, 3, 19)
    right_out, right_lse = exact(q, k, v, causal)
    torch.testing.assert_close(out.cpu().double(), right_out, atol=TOL[dtype], rtol=0)
    torch.testing.assert_close(lse.cpu().double(), right_lse, **(tolerance() if dtype == torch.float32 else dict(atol=2e-3, rtol=0)))
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=bottom_right(19, 37) if causal else None)
    # no further from the exact answer than SDPA in the same dtype, up to one rounding of the output
    # (not in float32 on a GPU, where tl.dot multiplies in TF32 and SDPA does not)
    ours, theirs = ((t.cpu().double() - right_out).abs().max().item() for t in (out, sdpa))
    assert ours <= theirs + 2 * torch.finfo(dtype).eps or (dtype == torch.float32 and not interpreted()), (ours, theirs)


def test_forward_with_large_scores_and_other_blocks():
    q, k, v = randn(1, 2, 40, 32, seed=5, scale=30.0), randn(1, 2, 40, 32, seed=6), randn(1, 2, 40, 32, seed=7)
    out, lse = triton_flash_attention_forward(q, k, v, True, block_q=32, block_k=16)  # scores in the hundreds
    right_out, right_lse = exact(q, k, v, True)
    assert right_lse.abs().max() > 100
    # on a GPU, TF32 rounds scores in the hundreds by about 0.1: exp of that moves the weights
    torch.testing.assert_close(out.cpu().double(), right_out, atol=TOL[torch.float32] if interpreted() else 0.1, rtol=0)
    torch.testing.assert_close(lse.cpu().double(), right_lse, atol=0, rtol=tolerance()["rtol"])


def test_forward_leaves_its_inputs_alone_and_takes_split_heads():
    x = randn(2, 21, 2, 16, seed=8)  # (B, T, H, d): split heads give a non-contiguous (B, H, T, d) view
    q = x.transpose(1, 2)
    copy = q.clone()
    out, _ = triton_flash_attention_forward(q, q, q, True, 16, 16)
    assert torch.equal(q, copy)
    torch.testing.assert_close(out.cpu().double(), exact(q, q, q, True)[0], atol=TOL[torch.float32], rtol=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_autograd_function_gradients(causal, dtype):
    q, k, v, g = (randn(1, 2, T, 16, seed=9 + i, dtype=dtype) for i, T in enumerate((70, 90, 90, 70)))
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.cpu().double().requires_grad_() for t in (q, k, v)]
    out = TritonFlashAttention.apply(*ours, causal)
    saved = [tuple(t.shape) for t in out.grad_fn.saved_tensors]  # q, k, v, out, lse: no (T_q, T_k) probabilities
    right = F.scaled_dot_product_attention(*theirs, attn_mask=bottom_right(70, 90).cpu() if causal else None)
    (out.float() * g.float()).sum().backward()
    (right * g.cpu().double()).sum().backward()
    torch.testing.assert_close(out.cpu().double(), right.detach(), atol=TOL[dtype], rtol=0)
    for ours_t, theirs_t in zip(ours, theirs):
        assert ours_t.grad.dtype == dtype
        scale = theirs_t.grad.abs().max().item()
        torch.testing.assert_close(ours_t.grad.cpu().double(), theirs_t.grad, atol=4 * TOL[dtype] * max(scale, 1.0), rtol=0)
    assert saved == [(1, 2, 70, 16), (1, 2, 90, 16), (1, 2, 90, 16), (1, 2, 70, 16), (1, 2, 70)]


@pytest.mark.parametrize("bad, words", [
    (lambda q: (q[0], q, q, False), "(B, H, T, d)"),
    (lambda q: (q[..., :12], q[..., :12], q[..., :12], False), "power of two"),
    (lambda q: (q, q.double(), q, False), "one dtype"),
    (lambda q: (q, q[:, :, :5], q[:, :, :5], True), "T_q <= T_k"),
])
def test_bad_inputs_get_a_clear_error(bad, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_inputs(*bad(randn(1, 1, 8, 16, seed=0)))


def test_the_flop_count_of_a_forward():
    from utils.bench_triton import attention_flops
    assert attention_flops(1, 1, 4, 8, False) == 4 * 4 * 4 * 8
    assert attention_flops(1, 1, 4, 8, True) == 4 * 4 * 4 * 8 / 2
    assert math.isclose(attention_flops(4, 16, 4096, 128, False) / 1e12, 4 * 16 * 4096 ** 2 * 128 * 4 / 1e12)


def test_bfloat16_arithmetic_is_what_a_gpu_computes():
    """Each bf16 elementwise operation in float32, rounded to bf16 (torch's bf16 arithmetic does the
    same): the interpreter alone computes on the bit patterns (x + x gives NaN, -x is off by 30)."""
    import triton
    import triton.language as tl

    @triton.jit
    def ops(X, OUT, N: tl.constexpr):
        i = tl.arange(0, N)
        x = tl.load(X + i)
        tl.store(OUT + i, x * 0.5)
        tl.store(OUT + N + i, x + x)
        tl.store(OUT + 2 * N + i, -x)
        tl.store(OUT + 3 * N + i, tl.maximum(x, 0.0))
        tl.store(OUT + 4 * N + i, x * x - x)

    x = torch.linspace(-3, 3, 32, device=DEVICE).bfloat16()
    out = torch.empty(5 * 32, dtype=torch.bfloat16, device=DEVICE)
    ops[(1,)](x, out, N=32)
    expected = torch.cat([x * 0.5, x + x, -x, x.clamp(min=0), x * x - x])
    assert torch.equal(out, expected), (out - expected).abs().max()
