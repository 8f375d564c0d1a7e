"""Outputs follow their inputs' device, observed on a machine without a GPU.

The first calls of each exercise (`checks.call`) run with their inputs *reporting* another
device (`ELSEWHERE`, a GPU). A TorchFunctionMode keeps the pretence: tensors
reachable from the inputs (and a module's parameters and buffers, and the state of the object a
method belongs to, as if it had lived there all along) are tagged; `x.device` of a tagged tensor
answers `ELSEWHERE`; a tensor created with `device=ELSEWHERE`, or computed from a tagged one, is
tagged too; everything still runs on the CPU. What a GPU refuses is recorded: an operation
that combines a tagged tensor with an untagged one of one element or more (a mask or positions
built with torch.arange(T) and no device, a plain tensor attribute that module.to() does not
move), and an output left on the CPU. Zero-dim tensors may mix, as PyTorch allows; indexing
and copies (x[i] = y, .to, .copy_) may cross devices, as they may on a GPU. A function given
device='cpu' is asked for ELSEWHERE instead, and its output must be there (a causal_mask that
ignores its device= argument).

Values are exactly what they would be without the pretence (every operation still runs on the
CPU), and nothing is run twice (a check that counts calls counts the same); a call that raises
under the pretence (an API it does not reach, such as torch.Generator(device=x.device)) is run
again plainly, with the random number generators put back, and shows its real error if any.
The `meta` device would show the same, but its first use imports torch._dynamo (a second of
every submit).
"""
import contextlib
import functools
import random
import sys

import torch
from torch.overrides import TorchFunctionMode

from autograder.checks import CheckFailed, message

ELSEWHERE = torch.device("cuda", 0)
_DEVICE_GET, _IS_CUDA_GET = torch.Tensor.device.__get__, torch.Tensor.is_cuda.__get__
_MAY_CROSS = {torch.Tensor.to, torch.Tensor.copy_, torch.Tensor.cpu, torch.Tensor.type_as, torch.Tensor.new_tensor,
              torch.Tensor.untyped_storage, torch.Tensor.data_ptr}
_INDEXING = {torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.index_put_}
PENDING = [None]  # the first finding of the running check, said when the check ends
_depth = [0]
MAX_PROBES = 3  # per call name and check: the first calls of an exercise (a sequence's later steps included)
_probed: dict = {}


class _Tags:
    """Tensors that live 'elsewhere', by identity or by storage (a view, or an nn.Parameter made
    from a tagged tensor, shares its storage). Held for the one call only, strongly, so that no
    address is reused while the call runs (and a tensor's == is elementwise: no WeakSet)."""

    def __init__(self):
        self.refs, self.storages = {}, {}

    def add(self, t):
        if isinstance(t, torch.Tensor) and id(t) not in self.refs:
            self.refs[id(t)] = t
            ptr = _storage(t)
            if ptr:
                self.storages.setdefault(ptr, t)

    def __contains__(self, t):
        return self.refs.get(id(t)) is t or (_storage(t) or None) in self.storages


def _storage(t) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def _elsewhere(device) -> bool:
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, torch.device) and device.type == "cuda"


class Elsewhere(TorchFunctionMode):
    def __init__(self, tags: _Tags):
        super().__init__()
        self.tags, self.mixed = tags, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func == _DEVICE_GET:
            return ELSEWHERE if args[0] in self.tags else func(*args)
        if func == _IS_CUDA_GET:
            return args[0] in self.tags or func(*args)
        asked = _elsewhere(kwargs.get("device"))
        if asked:
            kwargs["device"] = "cpu"
        if func in (torch.Tensor.to, torch.Tensor.cuda):
            asked = asked or func is torch.Tensor.cuda or any(_elsewhere(a) for a in args[1:])
            args = tuple("cpu" if _elsewhere(a) else a for a in args)
            if func is torch.Tensor.cuda:
                func, args = torch.Tensor.clone, args[:1]
        tensors = _tensors((args, kwargs), [])
        inside = any(t in self.tags for t in tensors)
        stray = [t for t in tensors if t not in self.tags and t.dim() > 0] if inside else []
        if func in _INDEXING and isinstance(args[0], torch.Tensor) and len(args) > 1:
            inside = args[0] in self.tags  # x[i] lives where x lives; a CPU x indexed by a GPU i is refused
            index = _tensors(args[1], [])
            stray = [args[0]] if not inside and args[0].dim() > 0 and any(t in self.tags for t in index) else []
        elif func in _MAY_CROSS:
            stray = []
        if stray and self.mixed is None:
            line = _learner_line()
            if "/triton/" not in line:  # Triton's interpreter copies its tensors to the CPU and back by design
                self.mixed = (getattr(func, "__name__", str(func)), tuple(stray[0].shape), line)
        out = func(*args, **kwargs)
        leaves_cpu = func is torch.Tensor.cpu or (func is torch.Tensor.to and not asked and any(
            a == "cpu" or isinstance(a, torch.device) and a.type == "cpu" for a in list(args[1:]) + [kwargs.get("device")]))
        if (inside or asked) and not leaves_cpu:
            for t in _tensors(out, []):
                self.tags.add(t)
        return out


def _tensors(obj, found: list) -> list:
    """The tensors in obj and its tuples, lists and dicts: what torch's tree_flatten finds in the
    arguments and outputs of a torch function, at a fifth of its cost (it runs on every operation
    of a probed call: tree_flatten there took a second of notebook 12's submit)."""
    if isinstance(obj, torch.Tensor):
        found.append(obj)
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            _tensors(item, found)
    elif isinstance(obj, dict):
        for item in obj.values():
            _tensors(item, found)
    return found


def _learner_line() -> str:
    """The innermost line of learner code (a notebook cell) on the stack, for the evidence."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not any(part in name for part in ("/torch/", "/autograder/checks/", "<frozen")):
            return f"{name}, line {frame.f_lineno}: {frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


def _tag_all(obj, tags: _Tags, seen=None):
    """Tag every tensor reachable from obj (its attributes, containers, a module's tensors)."""
    seen = seen if seen is not None else set()
    if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None), type)):
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        tags.add(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tag_all(v, tags, seen)
    elif isinstance(obj, (list, tuple, set)) or type(obj).__name__ == "deque":
        for v in obj:
            _tag_all(v, tags, seen)
    elif hasattr(obj, "__dict__") and not callable(obj) or isinstance(obj, torch.nn.Module):
        _tag_all(vars(obj), tags, seen)
    elif hasattr(obj, "__self__"):  # a bound method: its object's state lives there too
        _tag_all(obj.__self__, tags, seen)


def _cpu(device) -> bool:
    return device == "cpu" or isinstance(device, torch.device) and device.type == "cpu"


def _asked_elsewhere(fn, args, kwargs):
    """A function given device='cpu' (device=torch.device('cpu')) is asked for ELSEWHERE
    instead, so that one that ignores its device= shows it. Not a class or a method: an
    object could keep the device and use it after the pretence has ended."""
    if isinstance(fn, type) or hasattr(fn, "__self__") or not callable(fn):
        return args, kwargs, False
    new_args = tuple(ELSEWHERE if isinstance(a, torch.device) and _cpu(a) else a for a in args)
    new_kwargs = {k: ELSEWHERE if k == "device" and _cpu(v) else v for k, v in kwargs.items()}
    return new_args, new_kwargs, new_args != args or new_kwargs != kwargs


def run(fn, name: str, args, kwargs):
    """fn(*args, **kwargs) with its tensors reporting ELSEWHERE (the first MAX_PROBES calls of
    each name): (output, finding), the finding being the first thing a GPU would refuse, as
    (en, zh, evidence), or None."""
    tags, asked = _Tags(), False
    holds_ctx = any(hasattr(a, "saved_tensors") for a in args)  # an autograd ctx: its saved tensors are out of reach
    run_args, run_kwargs = args, kwargs
    if _probed.get(name, 0) < MAX_PROBES and not holds_ctx:
        _tag_all((args, kwargs), tags)
        if not isinstance(fn, type):
            _tag_all(getattr(fn, "__self__", fn), tags)
        run_args, run_kwargs, asked = _asked_elsewhere(fn, args, kwargs)
    if not tags.refs and not asked:  # no tensor or device goes in (or probed enough): nothing to follow
        return fn(*args, **kwargs), None
    if any(_DEVICE_GET(t).type != "cpu" for t in tags.refs.values()):  # on a real GPU already: no pretence needed
        return fn(*args, **kwargs), None
    _probed[name] = _probed.get(name, 0) + 1
    states = torch.get_rng_state(), random.getstate()
    mode = Elsewhere(tags)
    try:
        with mode:
            out = fn(*run_args, **run_kwargs)
    except (AssertionError, NotImplementedError):
        raise
    except Exception as e:
        if not any(word in str(e).lower() for word in ("cuda", "device")):
            raise  # an error of its own, the same without the pretence
        # an API the pretence does not reach (torch.Generator(device=x.device)): run it plainly
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        return fn(*args, **kwargs), None
    return out, _finding(name, mode, out, tags, asked and not tags.refs)


@contextlib.contextmanager
def pretence():
    """Inside, a tensor made with device=ELSEWHERE (or from one made so) reports it; yields
    `there(t)`: whether t was made there. How a check sees that a constructor honours its device=
    argument without the meta device, whose first operation through torch's Python decompositions
    (zeros_like) imports sympy, 0.7 s of a submit."""
    tags = _Tags()
    with Elsewhere(tags):
        yield lambda t: isinstance(t, torch.Tensor) and t in tags


# The rule each finding applies, quoted from notebook 00's "How grading works" (rules.GENERAL_RULES).
RULE = ("Device rule (notebook 00): outputs stay on the inputs' device, and a tensor you create is made there.",
        "设备规则（笔记本 00）：输出留在输入所在的设备上，你新建的张量也要建在那里。")


def _finding(name, mode, out, tags, only_asked=False):
    if mode.mixed:
        op, shape, line = mode.mixed
        return (f"{RULE[0]} {name} combines a tensor on the CPU (shape {shape}) with its inputs on another device: on a GPU this "
                "crashes. Create every tensor on the input's device (torch.arange(T, device=x.device), x.new_zeros, "
                "torch.zeros_like) and keep a module's tensors in parameters or registered buffers, which .to() moves.",
                f"{RULE[1]}{name} 把一个位于 CPU 的张量（形状 {shape}）与位于另一设备上的输入一起运算：在 GPU 上这会报错。"
                "请在输入所在的设备上创建每个张量（torch.arange(T, device=x.device)、x.new_zeros、torch.zeros_like），"
                "并把模块的张量放在参数或注册的缓冲区中，.to() 会移动它们。",
                f"{op} at {line}; inputs reported device {ELSEWHERE}, emulated on the CPU")
    stray = [t for t in _tensors(out, []) if t.dim() > 0 and t not in tags]
    if stray and only_asked:
        return (f"{RULE[0]} {name} returns a tensor on the CPU although it was asked for another device: pass its device= on to "
                "every tensor it creates (torch.ones(..., device=device)).",
                f"{RULE[1]}{name} 被要求在另一设备上创建结果，却返回了位于 CPU 的张量：请把 device= 传给它创建的每个张量"
                "（torch.ones(..., device=device)）。",
                f"output of shape {tuple(stray[0].shape)}; asked for device {ELSEWHERE}, emulated on the CPU")
    if stray:
        return (f"{RULE[0]} {name} returns a tensor on the CPU although its inputs are on another device: build the result from "
                "the inputs (or pass device=x.device), so it stays where they are.",
                f"{RULE[1]}{name} 的输入在另一设备上，它却返回了位于 CPU 的张量：请由输入构造结果（或传入 device=x.device），让它留在输入所在的设备上。",
                f"output of shape {tuple(stray[0].shape)}; inputs reported device {ELSEWHERE}, emulated on the CPU")
    return None


def deferred(check):
    """check, raising the first device finding of its calls after everything else passed."""
    @functools.wraps(check)
    def run(*args, **kwargs):
        if _depth[0] == 0:
            PENDING[0] = None
            _probed.clear()
        _depth[0] += 1
        try:
            result = check(*args, **kwargs)
        finally:
            _depth[0] -= 1
        if _depth[0] == 0 and PENDING[0] is not None:
            found, PENDING[0] = PENDING[0], None
            raise CheckFailed(message(*found))
        return result
    run.graded = True
    return run
