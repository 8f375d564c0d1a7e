import math

import torch
import torch.nn.functional as F

from utils import self_attention as sa
from utils.fixtures import journey_inputs


def test_book_step_by_step_numbers():
    """Raschka section 3.4.1: manual_seed(123), torch.rand weights, d_out = 2 (CPU generator)."""
    torch.manual_seed(123)
    x = journey_inputs()
    W_q, W_k, W_v = (torch.rand(3, 2) for _ in range(3))
    q, k, v = sa.project_qkv(x, W_q, W_k, W_v)
    torch.testing.assert_close(q[1], torch.tensor([0.4306, 1.4551]), atol=1e-4, rtol=0)
    torch.testing.assert_close(sa.attend(q, k, v)[1], torch.tensor([0.3061, 0.8210]), atol=1e-4, rtol=0)


def test_attend_matches_pytorch():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 6, generator=g)
    torch.testing.assert_close(sa.attend(q, k, v), F.scaled_dot_product_attention(q, k, v))


def test_v1_and_v2_agree_after_copy_square_and_not():
    for d_in, d_out in ((3, 3), (5, 2)):
        torch.manual_seed(0)
        v1, v2 = sa.SelfAttentionV1(d_in, d_out), sa.SelfAttentionV2(d_in, d_out)
        sa.copy_weights_v2_to_v1(v1, v2)
        x = torch.randn(2, 4, d_in)
        torch.testing.assert_close(v1(x), v2(x))
        assert isinstance(v1.W_query, torch.nn.Parameter) and v1.W_query.shape == (d_in, d_out)


def test_v2_bias_and_scale():
    m = sa.SelfAttentionV2(4, 3, qkv_bias=True)
    assert all(getattr(m, n).bias is not None for n in ("W_query", "W_key", "W_value"))
    x = torch.randn(1, 3, 4)
    q, k, v = m.W_query(x), m.W_key(x), m.W_value(x)
    expected = torch.softmax(q @ k.mT / math.sqrt(3), -1) @ v
    torch.testing.assert_close(m(x), expected)
