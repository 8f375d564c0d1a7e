import pytest
import torch
import torch.nn.functional as F

from utils import attention
from utils.embeddings import embed, one_hot_embed
from utils.fixtures import JOURNEY_WORDS, journey_inputs

# Raschka, "Build a Large Language Model (From Scratch)", section 3.3.
BOOK_SCORES = [0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]
BOOK_WEIGHTS = [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]
BOOK_NAIVE = [0.1455, 0.2278, 0.2249, 0.1285, 0.1077, 0.1656]
BOOK_CONTEXT = [0.4419, 0.6515, 0.5683]
BOOK_ROW0 = [0.4421, 0.5931, 0.5790]


def close(actual, expected, atol=1e-4):
    torch.testing.assert_close(actual, torch.tensor(expected), atol=atol, rtol=0)


def test_fixture():
    x = journey_inputs()
    assert x.shape == (6, 3) and x.dtype == torch.float32 and len(JOURNEY_WORDS) == 6
    x[0, 0] = 99.0
    assert journey_inputs()[0, 0] == pytest.approx(0.43)  # a fresh tensor every call


def test_book_numbers():
    x = journey_inputs()
    scores = attention.attention_scores(x[1], x)
    close(scores, BOOK_SCORES)
    close(scores / scores.sum(), BOOK_NAIVE)
    close(attention.softmax(scores), BOOK_WEIGHTS)
    close(attention.context_vector(x[1], x), BOOK_CONTEXT)
    close(attention.self_attention(x)[1], BOOK_CONTEXT)
    close(attention.self_attention(x)[0], BOOK_ROW0)


def test_softmax_matches_torch_and_is_stable():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 5, generator=g) * 10
    for dim in (0, 1, -1):
        torch.testing.assert_close(attention.softmax(x, dim), torch.softmax(x, dim))
    big = torch.tensor([[1000.0, 1001.0], [-1000.0, -999.0]])
    torch.testing.assert_close(attention.softmax(big), torch.softmax(big, -1))
    masked = torch.tensor([0.0, float("-inf"), 1.0])
    assert attention.softmax(masked)[1] == 0


def test_self_attention_is_sdpa_without_scaling():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 7, 5, generator=g)
    expected = F.scaled_dot_product_attention(x, x, x, scale=1.0)
    torch.testing.assert_close(attention.self_attention(x), expected, atol=1e-5, rtol=1e-4)
    weights = attention.self_attention_weights(x)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 7))


def test_embedding_lookup_is_one_hot_product():
    weight = torch.randn(10, 4, generator=torch.Generator().manual_seed(2), requires_grad=True)
    ids = torch.tensor([[1, 9, 9], [0, 3, 2]])
    out = embed(ids, weight)
    torch.testing.assert_close(out, one_hot_embed(ids, weight))
    torch.testing.assert_close(out, torch.nn.functional.embedding(ids, weight))
    out.sum().backward()
    assert weight.grad[9].sum() == pytest.approx(8.0)  # row 9 used twice, 4 features each


def test_embed_rejects_float_ids():
    with pytest.raises(TypeError, match="integers"):
        embed(torch.tensor([1.0]), torch.zeros(3, 2))
