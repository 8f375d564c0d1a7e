"""The general mechanisms of grading by properties, on small functions: the device pretence
(checks/elsewhere.py), the harness (checks/harness.py) and the table that shows both."""
import pytest
import torch
from torch import nn

import utils.attention as ref
from autograder.checks import call, graded_checks, randn
from autograder.checks.core import elsewhere
from autograder.checks.core.harness import Family, Probe, Steps, holds, same_as_reference


def _device_finding(fn, *args):
    return elsewhere.run(fn, fn.__name__, args, {})[1]


def positions_right(x):
    return x + torch.arange(x.shape[-1], device=x.device)


def positions_on_cpu(x):
    return x + torch.arange(x.shape[-1])


def zeros_then_fill(x):
    out = torch.zeros(x.shape)  # filled through indexing: the result stays on the CPU
    out[...] = x
    return out


def cpu_table_gpu_index(idx):
    return torch.eye(4)[idx]


def gpu_table_cpu_index(x):
    return x[torch.tensor([0, 2])]


def scalar_tensor(x):
    return x * torch.tensor(2.0)  # a zero-dim CPU tensor may meet a GPU tensor


def parameter_from_input(x):
    return nn.Parameter(x.clone()) * x  # a Parameter shares its tensor's storage, hence its device


@pytest.mark.parametrize("fn, refused", [(positions_right, False), (positions_on_cpu, True), (zeros_then_fill, True),
                                         (gpu_table_cpu_index, False), (scalar_tensor, False),
                                         (parameter_from_input, False)])
def test_device_pretence_refuses_what_a_gpu_refuses(fn, refused):
    elsewhere._probed.clear()
    found = _device_finding(fn, randn(3, 4, seed=1))
    assert (found is not None) == refused, found
    if found:
        assert "another device" in found[0] and "设备" in found[1]


def test_a_cpu_table_indexed_by_a_gpu_index_is_refused():
    elsewhere._probed.clear()
    assert _device_finding(cpu_table_gpu_index, torch.tensor([1, 3])) is not None


def ones_honouring_device(n, device=None):
    return torch.ones(n, n, device=device).triu(1)


def ones_ignoring_device(n, device=None):
    return torch.ones(n, n).triu(1)


def ones_moved_to_device(n, device=None):
    return torch.ones(n, n).triu(1).to(device)


class HoldsItsDevice:  # an object could keep the device and use it after the pretence: never asked
    def __init__(self, n, device=None):
        self.device, self.data = device, torch.zeros(n)


@pytest.mark.parametrize("fn, refused", [(ones_honouring_device, False), (ones_ignoring_device, True),
                                         (ones_moved_to_device, False)])
@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_a_device_argument_is_asked_for_elsewhere(fn, refused, device):
    elsewhere._probed.clear()
    out, found = elsewhere.run(fn, fn.__name__, (3,), {"device": device})
    assert (found is not None) == refused, found
    assert out.device.type == "cpu" and torch.equal(out, torch.ones(3, 3).triu(1))
    if found:
        assert "asked for another device" in found[0] and "另一设备" in found[1]
    assert elsewhere.run(HoldsItsDevice, "HoldsItsDevice", (3,), {"device": device})[0].device == device


def test_inputs_on_another_real_device_run_as_they_are():
    elsewhere._probed.clear()
    x = torch.zeros(3, device="meta")  # stands for a real GPU: the pretence would move what it creates to the CPU
    out, found = elsewhere.run(lambda t: torch.ones(3, device=t.device), "f", (x,), {})
    assert found is None and out.device.type == "meta"


def test_device_pretence_leaves_values_and_randomness_alone():
    def noisy(x):
        return x + torch.rand(x.shape, device=x.device)
    elsewhere._probed.clear()
    torch.manual_seed(0)
    out, found = elsewhere.run(noisy, "noisy", (torch.zeros(5),), {})
    torch.manual_seed(0)
    assert found is None and torch.equal(out, noisy(torch.zeros(5)))
    assert out.device.type == "cpu"  # outside the pretence, the real device


def test_device_finding_is_said_after_the_checks_own():
    def check_wrong_and_on_cpu(fn):
        out = call(fn, randn(2, 3, seed=2), name="f")
        assert torch.allclose(out, torch.zeros(2, 3)), "the value is wrong first"
    namespace = {"check_it": check_wrong_and_on_cpu}
    graded_checks(namespace)
    with pytest.raises(AssertionError, match="the value is wrong first"):
        namespace["check_it"](positions_on_cpu)
    namespace = {"check_it": lambda fn: call(fn, randn(2, 3, seed=2), name="f")}
    graded_checks(namespace)
    with pytest.raises(AssertionError, match="another device"):
        namespace["check_it"](positions_on_cpu)


SOFTMAX = Family([Probe("batch", "two rows that differ", lambda: ((randn(2, 5, seed=1),), {}), "两行不同的输入"),
                  Probe("extreme", "logits in the hundreds", lambda: ((300 * randn(2, 5, seed=2),), {}), "数百量级的 logits"),
                  Probe("dtype", "float64 inputs", lambda: ((randn(2, 5, seed=3).double(),), {}), "float64 输入")],
                 compares=("values", "shape", "dtype", "device", "inputs", "grads"))


def _stable(x, dim=-1):
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


def _in_float32_cast_back(x, dim=-1):
    return _stable(x.float(), dim).to(x.dtype)


def _overflows(x, dim=-1):
    e = x.exp()
    return e / e.sum(dim, keepdim=True)


def _always_float32(x, dim=-1):
    return _stable(x.float(), dim)


def _detached_sum(x, dim=-1):
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True).detach()


@pytest.mark.parametrize("fn, words", [(_stable, None), (_in_float32_cast_back, None), (_overflows, "logits in the hundreds"),
                                       (_always_float32, "dtype"), (_detached_sum, "gradient")])
def test_harness_compares_values_dtype_and_every_gradient(fn, words):
    if words is None:
        same_as_reference(fn, ref.softmax, SOFTMAX, "softmax", grads=True)
        return
    with pytest.raises(AssertionError, match=words):
        same_as_reference(fn, ref.softmax, SOFTMAX, "softmax", grads=True)


def _pick(table, i):
    if i >= table.shape[0]:
        raise IndexError(f"row {i} of {table.shape[0]}")
    return table[i]


def _pick_clamped(table, i):
    return table[min(i, table.shape[0] - 1)]


def _pick_any_error(table, i):
    return table[[i]][0]  # IndexError of its own: any exception refuses


PAST_THE_END = Family([Probe("edges", "a row past the end", lambda: ((torch.eye(3), 3), {}), "越界的行"),
                       Probe("edges", "the last row", lambda: ((torch.eye(3), 2), {}), "最后一行")])


@pytest.mark.parametrize("fn, refused", [(_pick, True), (_pick_clamped, False), (_pick_any_error, True)])
def test_where_the_reference_raises_the_learner_must_raise(fn, refused):
    if refused:
        same_as_reference(fn, _pick, PAST_THE_END, "pick")
        return
    with pytest.raises(AssertionError, match="bad input"):
        same_as_reference(fn, _pick, PAST_THE_END, "pick")


def _sample(model, x):
    return model(x)


def _sample_in_eval(model, x):  # switches the caller's model to eval() and leaves it there
    model.eval()
    return model(x)


def _sample_and_restore(model, x):
    was = model.training
    model.eval()
    try:
        return model(x)
    finally:
        model.train(was)


@pytest.mark.parametrize("fn, refused", [(_sample, False), (_sample_in_eval, True), (_sample_and_restore, False)])
def test_a_module_argument_keeps_its_mode(fn, refused):
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.0)).train()
    if refused:
        with pytest.raises(AssertionError, match="left model in another mode"):
            call(fn, model, torch.zeros(1, 3), name="sample")
    else:
        call(fn, model, torch.zeros(1, 3), name="sample")
        assert model.training


class _Scale(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * self.w


class _ScaleKeepsFirst(_Scale):  # right on any first call: keeps that call's input
    def forward(self, x):
        self.__dict__.setdefault("first", x)
        return self.first * self.w


ONE_CALL = Family([Probe("batch", "rows that differ", lambda: ((randn(2, 3, seed=7),), {}), "不同的行")],
                  compares=("values", "shape", "dtype", "device", "inputs", "grads"))


def test_a_module_is_called_again_on_other_inputs():
    from autograder.checks.core.harness import same_as_reference_module
    same_as_reference_module(_Scale, _Scale, (3,), ONE_CALL, "Scale", grads=True)
    with pytest.raises(AssertionError, match="compute every call from its own inputs"):
        same_as_reference_module(_ScaleKeepsFirst, _Scale, (3,), ONE_CALL, "Scale", grads=True)


_RESULTS = {}


def _double(x):
    return x * 2


def _double_cached(x):  # one result per shape, handed to every caller
    return _RESULTS.setdefault(tuple(x.shape), x * 2)


def test_a_function_returns_a_new_result_on_every_call():
    family = Family([Probe("batch", "rows", lambda: ((torch.ones(2, 3),), {}), "行")])
    same_as_reference(_double, _double, family, "double")
    with pytest.raises(AssertionError, match="returned the same tensor on a second call"):
        same_as_reference(_double_cached, _double, family, "double")


def test_holds_counts_tensors_in_any_container():
    import collections

    class Window:
        def __init__(self, keep):
            self.kept = collections.deque(maxlen=keep)
    short, long = Window(2), Window(None)
    for i in range(5):
        short.kept.append(torch.zeros(3))
        long.kept.append(torch.zeros(3))
    assert holds(short) == 6 and holds(long) == 15
    view = torch.zeros(10)
    assert holds({"a": view, "b": [view[:5]]}) == 10  # one storage, counted once


def test_probes_name_known_axes_only():
    with pytest.raises(ValueError):
        Probe("kindness", "x", lambda: ((), {}))
    assert Steps([("update", (), {})]).calls


def test_properties_table_has_every_exercise_and_its_columns():
    from autograder.properties import table
    rows = table()
    assert len(rows) >= 70 and all(len(r) == 6 for r in rows)
    assert {r[0] for r in rows} >= {f"{n:02d}" for n in range(17)}


# A copy is a copy (checks/storage.py) -------------------------------------------------------
def _copied(x):
    return x.clone() * 1


def _returned_itself(x):
    return x


def _view_of_input(x):
    return x.T.T


COPY = Family([Probe("batch", "a matrix", lambda: ((torch.arange(6.0).view(2, 3),), {}), "一个矩阵")])


@pytest.mark.parametrize("fn, refused", [(_copied, False), (_returned_itself, True), (_view_of_input, True)])
def test_an_output_may_not_share_its_inputs_memory_unless_the_course_does(fn, refused):
    if not refused:
        same_as_reference(fn, _copied, COPY, "copy")
        same_as_reference(_view_of_input, _view_of_input, COPY, "view")  # the course returns a view: so may the learner
        return
    with pytest.raises(AssertionError, match="shares memory"):
        same_as_reference(fn, _copied, COPY, "copy")


class _Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(2, 3))


def _copy_into(dst, src):
    with torch.no_grad():
        dst.w.copy_(src.w)


def _alias_into(dst, src):
    dst.w = nn.Parameter(src.w.detach())  # the same storage: an alias, not a copy


MODULES = Family([Probe("batch", "two modules", lambda: ((_Holder(), _filled()), {}), "两个模块")])


def _filled():
    h = _Holder()
    with torch.no_grad():
        h.w.copy_(torch.arange(6.0).view(2, 3))
    return h


def test_a_copy_into_a_module_that_aliases_its_source_is_refused():
    from autograder.checks.core import rules
    rules.register("zz", [rules.Contract("copy_into", may_change=("dst",))])  # its job: change dst in place
    effect = lambda out, args, kwargs: args[0].w
    same_as_reference(_copy_into, _copy_into, MODULES, "copy_into", effect=effect)
    with pytest.raises(AssertionError, match="shares memory"):
        same_as_reference(_alias_into, _copy_into, MODULES, "copy_into", effect=effect)
