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
