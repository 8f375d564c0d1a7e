import hashlib

import pytest

from utils import tokenizer


def test_hello_world_ids():
    assert tokenizer.encode("Hello, world") == [15496, 11, 995]


def test_round_trip_and_pieces():
    text = "Your journey starts with one step 注意力 <|endoftext|>"
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert ids[-1] == 50256
    assert tokenizer.tokens("Your journey") == ["Your", " journey"]


def test_vocabulary_size():
    assert tokenizer.gpt2_encoding().n_vocab == 50257


def test_files_are_gpt2_originals():
    for path, expected in zip(tokenizer.gpt2_files(), (tokenizer.VOCAB_BPE_SHA256, tokenizer.ENCODER_JSON_SHA256)):
        with open(path, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == expected


def test_ranks_are_tiktokens_own(monkeypatch, tmp_path):
    """The course reads GPT-2's files itself; tiktoken's loader must give the very same ranks."""
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # its copies go here, not to /tmp
    vocab_bpe, encoder_json = tokenizer.gpt2_files()
    assert tokenizer.gpt2_ranks() == data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=vocab_bpe, encoder_json_file=encoder_json,
        vocab_bpe_hash=tokenizer.VOCAB_BPE_SHA256, encoder_json_hash=tokenizer.ENCODER_JSON_SHA256)


def test_nothing_is_written(monkeypatch, tmp_path):
    """Loading the tokenizer keeps no copy of the files anywhere (tiktoken's loader would)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    tokenizer.gpt2_encoding.cache_clear()
    tokenizer.gpt2_encoding()
    assert not list(tmp_path.iterdir())


def test_tampered_file_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(tokenizer, "VOCAB_BPE_SHA256", "0" * 64)
    with pytest.raises(RuntimeError, match="sha256"):
        tokenizer.gpt2_files()


def test_no_network_needed(monkeypatch):
    """Building the encoding must not touch the network (nothing is fetched at run time)."""
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("the tokenizer tried to open a network connection")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    tokenizer.gpt2_encoding.cache_clear()
    assert tokenizer.encode("offline") == tokenizer.gpt2_encoding().encode("offline")
