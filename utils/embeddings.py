"""Token embeddings: an id picks one row of a weight matrix.

`embed(ids, weight)` is exactly what `nn.Embedding` computes; notebook 00 shows that an
embedding lookup equals multiplying a one-hot vector by the weight matrix.
"""
import torch


def embed(token_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Rows of `weight` (V, d) picked by `token_ids` (..., T) -> (..., T, d)."""
    if token_ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"token ids must be integers, got {token_ids.dtype}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be (vocab_size, d), got shape {tuple(weight.shape)}")
    return weight[token_ids]


def one_hot_embed(token_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The same lookup written as one_hot(ids) @ W: slower, but shows it is a linear map."""
    one_hot = torch.nn.functional.one_hot(token_ids.long(), weight.shape[0]).to(weight.dtype)
    return one_hot @ weight
