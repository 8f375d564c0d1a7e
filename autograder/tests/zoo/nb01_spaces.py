"""Issue 36: notebook 01 solutions that the declared input spaces catch (WRONG: dtypes, layouts, one-signed
extremes) or that the rules now allow (RIGHT: float32 or float64 inside, cast back; torch.softmax where allowed)."""
import torch

WRONG = {"attention_scores": {}, "softmax": {}, "context_vector": {}, "self_attention_weights": {}, "self_attention": {}}
RIGHT = {name: {} for name in WRONG}


def scores_query_float32(query, inputs):  # float32-only: crashes on float64 and bfloat16 inputs
    return inputs @ query.float()


def scores_float32_cast_back(query, inputs):
    return (inputs.float() @ query.float()).to(inputs.dtype)


def softmax_shift_if_large(x, dim=-1):  # shifts only a large positive maximum: all-negative slices underflow to 0 / 0
    m = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - m.clamp(min=80.0) + 80.0 * (m < 80.0))
    return e / e.sum(dim=dim, keepdim=True)


def softmax_sum_float32(x, dim=-1):  # the sum made float32: the result follows it, not the input's dtype
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True, dtype=torch.float32)


def softmax_view_rows(x, dim=-1):  # .view needs contiguous memory: crashes on column-major or strided logits
    moved = x.transpose(dim, -1)
    rows = moved.view(-1, moved.shape[-1])
    e = torch.exp(rows - rows.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)).view(moved.shape).transpose(dim, -1)


def softmax_movedim(x, dim=-1):
    last = x.movedim(dim, -1)
    e = torch.exp(last - last.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)).movedim(-1, dim)


def softmax_float64_cast_back(x, dim=-1):
    y = x.double()
    e = torch.exp(y - y.amax(dim=dim, keepdim=True))
    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)


def context_weights_float32(query, inputs):  # float32-only: float32 weights times float64 or bfloat16 inputs crash
    weights = torch.softmax(inputs @ query, dim=-1).float()
    return weights @ inputs


def context_torch_softmax(query, inputs):  # allowed here: the exercise is the weighted sum
    return torch.softmax(inputs @ query, dim=-1) @ inputs


def weights_bmm_reshape(inputs):
    flat = inputs.reshape(-1, *inputs.shape[-2:])
    return torch.softmax(torch.bmm(flat, flat.transpose(1, 2)), dim=-1).reshape(*inputs.shape[:-1], inputs.shape[-2])


def attention_softmax_in_float32(inputs):  # float32-only: float32 weights times float64 or bfloat16 inputs crash
    return torch.softmax(inputs @ inputs.transpose(-2, -1), dim=-1, dtype=torch.float32) @ inputs


def attention_float32_cast_back(inputs):
    x = inputs.float()
    return (torch.softmax(x @ x.transpose(-2, -1), dim=-1) @ x).to(inputs.dtype)


WRONG["attention_scores"]["query cast to float32 (crashes in float64 and bfloat16)"] = (scores_query_float32, "combines tensors of two dtypes")
WRONG["softmax"].update({
    "shifts only a large positive maximum": (softmax_shift_if_large, "subtract each slice's own maximum"),
    "sums in float32": (softmax_sum_float32, "must follow its input's dtype"),
    ".view on logits laid out with gaps": (softmax_view_rows, "crashed"),
})
WRONG["context_vector"]["weights made float32 (crashes in float64 and bfloat16)"] = (context_weights_float32, "combines tensors of two dtypes")
WRONG["self_attention"]["softmax with dtype=torch.float32 (crashes in float64 and bfloat16)"] = (attention_softmax_in_float32, "combines tensors of two dtypes")
RIGHT["attention_scores"]["float32, cast back"] = scores_float32_cast_back
RIGHT["softmax"].update({"movedim to the last dim and back": softmax_movedim, "float64, cast back": softmax_float64_cast_back})
RIGHT["context_vector"]["torch.softmax, allowed here"] = context_torch_softmax
RIGHT["self_attention_weights"]["bmm on the reshaped batch"] = weights_bmm_reshape
RIGHT["self_attention"]["everything in float32, cast back"] = attention_float32_cast_back

