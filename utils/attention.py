"""Dot-product attention with no trainable weights (notebook 01).

Every token's embedding serves as its own query, key and value: the score of key j for
query i is x_i . x_j, a softmax turns a row of scores into weights, and the context vector
is the weighted sum of the inputs. Shapes follow the course convention: (..., T, d).
"""
import torch


def attention_scores(query: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """Dot product of one query (d,) with every input row (T, d) -> (T,)."""
    return inputs @ query


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x) / sum(exp(x)) along `dim`, stable for large inputs; -inf entries get weight 0.

    Subtracting each slice's own maximum leaves the result unchanged (the factor exp(-max)
    cancels) and keeps exp() from overflowing. A slice that is entirely -inf has no valid
    entry and gives NaN, as torch.softmax does.
    """
    shifted = x - x.amax(dim=dim, keepdim=True)
    exp = shifted.exp()
    return exp / exp.sum(dim=dim, keepdim=True)


def context_vector(query: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """Attention-weighted sum of the inputs for one query (d,) -> (d,)."""
    weights = softmax(attention_scores(query, inputs), dim=-1)
    return weights @ inputs


def self_attention_weights(inputs: torch.Tensor) -> torch.Tensor:
    """softmax(X Xᵀ) row-wise: (..., T, d) -> (..., T, T); row i holds query i's weights."""
    scores = inputs @ inputs.transpose(-2, -1)
    return softmax(scores, dim=-1)


def self_attention(inputs: torch.Tensor) -> torch.Tensor:
    """Every token's context vector at once: (..., T, d) -> (..., T, d)."""
    return self_attention_weights(inputs) @ inputs
