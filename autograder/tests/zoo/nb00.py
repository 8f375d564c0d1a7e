"""Solutions of notebook 00 that grading must reject (WRONG) or accept (RIGHT)."""
import torch
import torch.nn.functional as F

import utils.tokenizer
from utils.tokenizer import gpt2_encoding

tokenizer = gpt2_encoding()


def encode_chars(text):
    return [ord(c) for c in text]


def encode_lower(text):
    return tokenizer.encode(text.lower())


def encode_strip(text):
    return tokenizer.encode(text.strip())


def encode_with_eot(text):
    return tokenizer.encode(text) + [50256]


def encode_tensor(text):
    return torch.tensor(tokenizer.encode(text))


def encode_word_by_word(text):
    return [i for word in text.split() for i in tokenizer.encode(word)]


def encode_calls_utils(text):
    return utils.tokenizer.encode(text)


def encode_ordinary(text):
    return tokenizer.encode_ordinary(text)


def encode_all_special(text):  # the same ids: the texts graded hold no special token
    return tokenizer.encode(text, allowed_special="all")


def encode_batch(text):
    return list(tokenizer.encode_batch([text])[0])


def embed_columns(token_ids, weight):
    return weight[:, token_ids].T


def embed_via_list(token_ids, weight):
    return torch.tensor(weight[token_ids].tolist())


def embed_functional(token_ids, weight):
    return F.embedding(token_ids, weight)


def embed_one_hot_long(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]) @ weight


def embed_double(token_ids, weight):
    return weight[token_ids].double()


def embed_fresh_layer(token_ids, weight):
    return torch.nn.Embedding(*weight.shape)(token_ids)


def embed_one_hot_unchecked(token_ids, weight):  # F.one_hot raises RuntimeError past the vocabulary, not IndexError
    return F.one_hot(token_ids, weight.shape[0]).to(weight.dtype) @ weight


def embed_one_hot(token_ids, weight):
    if (token_ids >= weight.shape[0]).any():
        raise IndexError(f"id {int(token_ids.max())} is past the vocabulary of {weight.shape[0]}")
    return F.one_hot(token_ids, weight.shape[0]).to(weight.dtype) @ weight


def embed_one_hot_float32(token_ids, weight):  # float32-only: crashes on a float64 or bfloat16 weight
    if (token_ids >= weight.shape[0]).any():
        raise IndexError("id past the vocabulary")
    return F.one_hot(token_ids, weight.shape[0]).float() @ weight


def embed_fixed_vocabulary(token_ids, weight):  # the visible test's vocabulary of 6 and the first hidden one's 11, hard-coded
    if (token_ids >= weight.shape[0]).any():
        raise IndexError("id past the vocabulary")
    return F.one_hot(token_ids, 11).to(weight.dtype)[..., :weight.shape[0]] @ weight


def embed_view_ids(token_ids, weight):  # .view needs contiguous ids: crashes on ids laid out with gaps
    return weight[token_ids.view(-1)].view(*token_ids.shape, weight.shape[-1])


def embed_wraps_ids(token_ids, weight):  # an id past the vocabulary silently wraps around to the first rows
    return weight[token_ids % weight.shape[0]]


def embed_reshape_ids(token_ids, weight):
    return weight[token_ids.reshape(-1)].reshape(*token_ids.shape, weight.shape[-1])


def embed_loop(token_ids, weight):  # one row at a time; weight[i] raises IndexError past the vocabulary
    rows = [weight[i] for i in token_ids.reshape(-1).tolist()]
    return torch.stack(rows).reshape(*token_ids.shape, weight.shape[-1])


def embed_eye_on_cpu(token_ids, weight):  # right values, but the identity is made on the CPU
    return torch.eye(weight.shape[0], dtype=weight.dtype)[token_ids] @ weight


def embed_regrown_gradient(token_ids, weight):  # requires_grad again, but the weight never learns
    return weight[token_ids].detach().requires_grad_()


def embed_index_select(token_ids, weight):
    return weight.index_select(0, token_ids.reshape(-1)).reshape(*token_ids.shape, -1)


def embed_clamped(token_ids, weight):  # an id past the vocabulary silently becomes the last row
    return weight[token_ids.clamp(0, weight.shape[0] - 1)]


WRONG = {
    "encode": {
        "one id per character": (encode_chars, "one id per character"),
        "lower-cases the text": (encode_lower, "keep spaces and case"),
        "strips spaces": (encode_strip, "keep spaces and case"),
        "appends <|endoftext|>": (encode_with_eot, "appended <|endoftext|>"),
        "returns a tensor": (encode_tensor, "plain Python list"),
        "encodes word by word": (encode_word_by_word, "keep spaces and case"),
        "calls utils.tokenizer.encode": (encode_calls_utils, "not utils.tokenizer.encode"),
    },
    "embed": {
        "picks columns": (embed_columns, "rows of the weight, not columns"),
        "goes through Python lists": (embed_via_list, "lost the gradient"),
        "calls F.embedding": (embed_functional, "not allowed: F.embedding"),
        # bad input gets an error, as the course's does / 错误的输入要报错，和课程的实现一样
        "clamps ids past the vocabulary": (embed_clamped, "returns a result for bad input"),
        "one-hot of integer dtype": (embed_one_hot_long, "crashed"),
        "changes the dtype": (embed_double, "dtype"),
        "one-hot rows made on the CPU": (embed_eye_on_cpu, "another device"),
        "detached, then requires_grad_()": (embed_regrown_gradient, "gradient"),
        "a fresh nn.Embedding": (embed_fresh_layer, "not allowed: F.embedding"),
        "one-hot product without the IndexError check": (embed_one_hot_unchecked, "raised RuntimeError for bad input"),
        "one-hot made float32 (crashes in float64 and bfloat16)": (embed_one_hot_float32, "combines tensors of two dtypes"),
        "a vocabulary of 11 hard-coded": (embed_fixed_vocabulary, "crashed"),
        ".view on ids laid out with gaps": (embed_view_ids, "view size is not compatible"),
        "ids wrapped around modulo vocab_size": (embed_wraps_ids, "returns a result for bad input"),
    },
}

RIGHT = {
    "encode": {"encode_ordinary": encode_ordinary, "encode_batch": encode_batch, "allowed_special='all'": encode_all_special},
    "embed": {"one-hot product with its own IndexError": embed_one_hot, "index_select": embed_index_select,
              "reshape, index, reshape back": embed_reshape_ids, "a loop over the ids": embed_loop},
}
