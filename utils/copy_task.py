"""The copying task the mini DeepSeek is trained on (11, 12).

Each sequence is BOS, a segment of L distinct random tokens (L from 4 to 16, drawn per
sequence), SEP, then the segment and SEP repeated until seq_len tokens:

    BOS a1 a2 ... aL SEP a1 a2 ... aL SEP a1 a2 ...

Nothing predicts the first segment (up to ln(62) nats a token), and everything after the first
SEP is determined by what came before. Since L varies, no fixed offset finds the answer: the
model must find the previous occurrence of the current token and copy the one after it, which is
what an induction head does (Olsson et al., 2022). Two layers are enough to build one.

    make_batch(batch_size, seq_len, generator, device=None) -> LongTensor (B, seq_len)    the task's sequences
    copy_mask(tokens) -> BoolTensor (B, T)  True where tokens[:, t] is determined by tokens[:, :t]
    copy_prompts(n, generator, device=None) -> list of (1, T) prompts ending in the first SEP (for generation)

The sequences are drawn where the generator lives (a CPU generator: the same tokens for every
device) and then moved to `device`.

A model's predictions at positions t-1 are graded on copy_mask(tokens)[:, 1:] (the targets).
Training lives in `utils.train_mini`, decoding with a draft in `utils.mtp`; both import this
module, neither imports the other's command. Tests: `.venv/bin/pytest utils/tests/test_mini_deepseek.py`.
"""
import torch

BOS, SEP = 0, 1
MIN_LEN, MAX_LEN = 4, 16
SEQ_LEN = 48


def make_batch(batch_size: int, seq_len: int = SEQ_LEN, generator=None, vocab_size: int = 64,
               device=None) -> torch.Tensor:
    """(B, seq_len) sequences BOS seg SEP seg SEP ... with a segment of distinct tokens per row."""
    g = generator
    drawn = g.device if g is not None else device
    L = torch.randint(MIN_LEN, MAX_LEN + 1, (batch_size, 1), generator=g, device=drawn)  # (B, 1)
    segments = torch.rand(batch_size, vocab_size - 2, generator=g, device=drawn).argsort(dim=1) + 2  # (B, V-2), distinct
    j = (torch.arange(seq_len - 1, device=drawn)[None, :]) % (L + 1)  # (B, T-1): place in the repeating unit seg+SEP
    body = torch.where(j < L, segments.gather(1, j.clamp(max=vocab_size - 3)), torch.full_like(j, SEP))
    return torch.cat([torch.full((batch_size, 1), BOS, device=drawn), body], dim=1).to(device)


def copy_mask(tokens: torch.Tensor) -> torch.Tensor:
    """True at the positions after the first SEP: their token is determined by the earlier ones."""
    first_sep = (tokens == SEP).int().argmax(dim=1, keepdim=True)  # (B, 1)
    return torch.arange(tokens.shape[1], device=tokens.device)[None, :] > first_sep


def copy_prompts(n: int, generator=None, seq_len: int = SEQ_LEN, device=None) -> list:
    """n prompts (1, L + 2): BOS, a segment, SEP; the rest of a sequence is for the model to copy."""
    batch = make_batch(n, seq_len, generator, device=device)
    ends = (batch == SEP).int().argmax(dim=1)
    return [batch[i:i + 1, :int(ends[i]) + 1] for i in range(n)]
