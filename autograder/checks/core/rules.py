"""Each exercise's declared contract: the rules that can cost a mark, said once, read by everyone.

A `Contract` (declared in `CONTRACTS` of `nbNN/contract.py`, beside the exercise's input family)
says what grading enforces beyond "the same numbers as the course's":

- `forbids`: library calls that would do the exercise's whole job (refused while the learner's
  code runs: `shortcuts.own_work` takes them from here and nowhere else);
- `helpers`: the course's helpers that do part of the exercise's work (also refused);
- `raises`: the inputs that must raise, and which error (`expect_raises` and the harness's
  bad-input probes name one of them);
- `preconditions`: what the caller guarantees; never probed, so never graded;
- `may_change`: the arguments the exercise changes in place (`inputs.snapshot` spares them);
- `dtypes`: the dtypes graded (the harness's dtype probes stay within them), and `dtype` what the
  output's dtype is;
- `device`: how the device rule applies ("inputs": outputs and created tensors on the inputs'
  device; "argument": on the `device=` it is given; "none": no tensor in or out);
- `earlier`: "own" where the text asks the exercise to call the learner's own earlier
  exercises; else they are the course's while it is graded.

Three readers, one declaration: the checks, the **Rules** block of the exercise's text (written
by `python -m autograder sync` between `<!-- rules: NAME -->` and `<!-- /rules -->`, see
`rules_block`), and `python -m autograder properties`. What the checks really enforced is
recorded while they run (`record`, and `AUTOGRADER_RULES_LOG`), so test_rules.py can fail when a
check enforces a rule that its exercise does not state, or states one that nothing enforces.
"""
import importlib
import re
import json
import os
import sys
from dataclasses import dataclass, field

DTYPES = ("float32", "float64", "bfloat16", "float16")
DEVICES = ("inputs", "argument", "none")


@dataclass(frozen=True)
class Forbid:
    """A library call that would do the exercise's job: `target` is its full dotted path."""
    __slotnames__ = []
    target: str  # "torch.nn.functional.scaled_dot_product_attention"
    en: str  # why, completing "Not allowed: `...` (...)"
    zh: str

    def resolve(self) -> tuple:
        """(owner, attribute): the object whose attribute is replaced while learner code runs."""
        module, _, attr = self.target.rpartition(".")
        try:
            return importlib.import_module(module), attr
        except ImportError:  # a class attribute: torch.Tensor.softmax
            owner_module, _, owner = module.rpartition(".")
            return getattr(importlib.import_module(owner_module), owner), attr

    @property
    def shown(self) -> str:
        for long, short in (("torch.nn.functional.", "F."), ("torch.Tensor.", "Tensor."), ("torch.nn.", "nn.")):
            if self.target.startswith(long):
                return short + self.target[len(long):]
        return self.target


@dataclass(frozen=True)
class Raises:
    """Input that must raise `error` (a builtin exception's name, or "Exception": any error)."""
    __slotnames__ = []
    error: str
    when: str  # completing "Raises ValueError when ..."
    zh: str  # completing "……时抛出 ValueError"

    @property
    def exception(self) -> type:
        return _exception(self.error)


def _builtin(name: str) -> type:
    import builtins
    error = getattr(builtins, name, None)
    if not (isinstance(error, type) and issubclass(error, BaseException)):
        raise ValueError(f"{name!r} is not a builtin exception")
    return error


@dataclass(frozen=True)
class Contract:
    __slotnames__ = []
    exercise: str
    forbids: tuple = ()  # Forbid, ...
    helpers: tuple = ()  # names of utils helpers whose code may not run inside the learner's
    raises: tuple = ()  # Raises, ...
    preconditions: tuple = ()  # (en, zh), ...: what the caller guarantees, never probed
    may_change: tuple = ()  # parameter names as the text names them
    dtypes: tuple = ("float32",)  # the floating dtypes of the probes
    dtype: tuple | None = None  # (en, zh) of the output's dtype; None: "the input's dtype"
    device: str = "inputs"
    earlier: str = "course"  # or "own"
    notes: tuple = ()  # (en, zh), ...: other rules the check enforces, in words (a buffer, what runs per tile)
    also: tuple = ()  # other names of the exercise's cell that checks call (a kernel's launcher)

    def __post_init__(self):
        unknown = set(self.dtypes) - set(DTYPES)
        if unknown or self.device not in DEVICES or self.earlier not in ("course", "own"):
            raise ValueError(f"contract of {self.exercise}: dtypes {self.dtypes}, device {self.device!r}, earlier {self.earlier!r}")
        for r in self.raises:
            _exception(r.error)  # a typo in an error's name fails at import, not at grading

    def raise_for(self, error: type):
        """The declared Raises that an exception of type `error` answers, or None."""
        return next((r for r in self.raises if issubclass(error, _exception(r.error))), None)


def _exception(name: str) -> type:
    return Exception if name == "Exception" else _builtin(name)


# The registry ------------------------------------------------------------------------------
_CONTRACTS: dict = {}  # exercise -> Contract
_NOTEBOOK: dict = {}  # exercise -> "04"
_ALSO: dict = {}  # another name of an exercise's cell -> the exercise


def register(notebook: str, contracts) -> dict:
    """Called by nbNN/contract.py: its contracts, in the notebook's order."""
    for c in contracts:
        _CONTRACTS[c.exercise], _NOTEBOOK[c.exercise] = c, notebook
        for other in c.also:
            _ALSO[other] = c.exercise
    return {c.exercise: c for c in contracts}


def _registry_loaded():
    """The registry, rebuilt from the families modules loaded in this process when it is empty:
    grading's guard runs this file afresh before a test cell whenever ENFORCED has changed, and
    the families modules, which it leaves as they are, registered their contracts only once."""
    if _CONTRACTS:
        return
    for name, module in sorted(sys.modules.items()):
        contracts = getattr(module, "CONTRACTS", None) if re.fullmatch(r"autograder\.checks\.nb\d\d\.contract", name) else None
        if isinstance(contracts, dict):
            register(name.rsplit("nb", 1)[1], contracts.values())


def load(notebook: str) -> dict:
    module = importlib.import_module(f"autograder.checks.nb{notebook}.contract")
    return dict(getattr(module, "CONTRACTS", {}))


def of(exercise: str) -> Contract | None:
    """The contract of an exercise (`who` may carry a method: "KVCache.update")."""
    _registry_loaded()
    base = exercise.split(".")[0]
    return _CONTRACTS.get(_ALSO.get(base, base))


def earlier_exercises(exercise: str) -> tuple:
    """The exercises declared before `exercise` in its notebook."""
    _registry_loaded()
    base = exercise.split(".")[0]
    notebook = _NOTEBOOK.get(base)
    names = [e for e, nb in _NOTEBOOK.items() if nb == notebook]
    return tuple(names[:names.index(base)]) if base in names else ()


# What the checks enforced, recorded while they run --------------------------------------------
LOG_ENV = "AUTOGRADER_RULES_LOG"
ENFORCED: dict = {}  # exercise -> {"forbids": set, "helpers": set, "raises": set, "dtypes": set}


def record(exercise: str, kind: str, value):
    _registry_loaded()
    base = exercise.split(".")[0]
    base = _ALSO.get(base, base)
    ENFORCED.setdefault(base, {}).setdefault(kind, set()).add(value)
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps([base, kind, value]) + "\n")


def undeclared(exercise: str, kind: str, value) -> str | None:
    """Why an enforced rule is not declared (None when it is)."""
    c = of(exercise)
    if c is None:
        return f"{exercise} has no declared contract"
    declared = {"forbids": {f.target for f in c.forbids}, "helpers": set(c.helpers),
                "raises": {r.error for r in c.raises}, "dtypes": set(c.dtypes)}[kind]
    if kind == "raises" and ("Exception" in declared or any(issubclass(_builtin(value), _exception(d)) for d in declared)):
        return None
    return None if value in declared else f"{exercise} enforces {kind} {value!r}, which its contract does not declare"


# The Rules block of the exercise's text ---------------------------------------------------
_DTYPE_ZH = {"float32": "float32", "float64": "float64", "bfloat16": "bfloat16", "float16": "float16"}


def _and(items, zh=False) -> str:
    items = list(items)
    if zh:
        return "、".join(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def lines(c: Contract) -> list[tuple[str, str]]:
    """The rules of one exercise, as (English, Chinese) lines."""
    out = []
    if c.forbids:
        out.append(("Not allowed: " + "; ".join(f"`{f.shown}` ({f.en})" for f in c.forbids) + ".",
                    "不允许使用：" + "；".join(f"`{f.shown}`（{f.zh}）" for f in c.forbids) + "。"))
    if c.helpers:
        names = [f"`{h}`" for h in c.helpers]
        out.append((f"The course's {_and(names)} may not run inside your code: this exercise is that part of the work.",
                    f"课程的 {_and(names, zh=True)} 不能在你的代码中运行：本练习要你写的正是这部分工作。"))
    for r in c.raises:
        what = "an error (any exception)" if r.error == "Exception" else f"`{r.error}`"
        zh_what = "错误（任何异常都可以）" if r.error == "Exception" else f" `{r.error}`"
        cond, _, note = r.zh.partition("：")  # "条件：说明" reads as "条件时抛出 X：说明"
        out.append((f"Raises {what} when {r.when}.", f"{cond}时抛出{zh_what}" + (f"：{note}。" if note else "。")))
    for en, zh in c.preconditions:
        out.append((f"Not graded (the caller guarantees it): {en}.", f"不评分（由调用者保证）：{zh}。"))
    if c.may_change:
        names = [f"`{m}`" for m in c.may_change]
        out.append((f"Changes {_and(names)} in place (that is its job); no other argument.",
                    f"原地修改 {_and(names, zh=True)}（这正是它的任务）；不修改其他参数。"))
    if not c.dtypes and c.dtype:  # no floating input
        out.append((f"dtype: {c.dtype[0]}.", f"dtype：{c.dtype[1]}。"))
    elif c.dtypes != ("float32",) or c.dtype:
        en, zh = c.dtype or ("the output has the input's dtype", "输出与输入的 dtype 相同")
        out.append((f"Graded in {_and(c.dtypes)}: {en}.", f"在 {_and(c.dtypes, zh=True)} 下评分：{zh}。"))
    if c.device == "inputs":
        out.append(("Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).",
                    "设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。"))
    elif c.device == "argument":
        out.append(("Device: the result is created on the `device` argument (pass `device=device` to what you build).",
                    "设备：结果创建在参数 `device` 指定的设备上（把 `device=device` 传给你构造的张量）。"))
    if c.earlier == "own":
        out.append(("Calls your own earlier exercises of this notebook (the text asks for them): a mistake there shows here too.",
                    "调用你自己在本笔记本中更早完成的练习（正文要求如此）：那里的错误在这里也会体现。"))
    out.extend(c.notes)
    return out


GENERAL = ("the course-wide rules hold too (notebook 00, \"How grading works\")",
           "全课程通用的规则同样适用（笔记本 00，“评分如何进行”）")


def rules_block(c: Contract) -> str:
    """Markdown of the Rules block, English lines then Chinese lines (jupytext-ready, no '# ')."""
    en = [f"- {a}" for a, _ in lines(c)] + [f"- And {GENERAL[0]}."]
    zh = [f"- {b}" for _, b in lines(c)] + [f"- 另外，{GENERAL[1]}。"]
    return "\n".join(["", f"#### Rules that grading checks · 评分检查的规则 (`{c.exercise}`)", "", *en, "", *zh, ""])


# The rules that hold for every exercise: notebook 00's "How grading works" and GRADING.md ------
GENERAL_RULES = (
    ("**Same numbers as the course's.** Your code runs beside the course's reference on a family of inputs (sizes, "
     "values, dtypes, layouts and flags the exercise allows); outputs, shapes, dtypes and every gradient are compared.",
     "**与课程的结果相同。** 你的代码与课程的参考实现在一族输入上并排运行（练习允许的大小、数值、dtype、内存布局和选项）；"
     "比较输出、形状、dtype 以及每一个梯度。"),
    ("**Inputs unchanged.** Do not change an argument in place (`x /= s`, `x.add_(...)`), unless the exercise's rules "
     "say it does; a module argument keeps its `train()`/`eval()` mode.",
     "**输入保持不变。** 不要原地修改参数（`x /= s`、`x.add_(...)`），除非练习的规则说明它会这样做；"
     "模块参数保持它的 `train()`/`eval()` 模式。"),
    ("**Device.** Outputs stay on the inputs' device, and a tensor you create is made there: "
     "`torch.arange(T, device=x.device)`, `torch.ones(T, T, dtype=torch.bool, device=x.device)`. Grading runs your code "
     "with inputs that report a GPU, so a tensor left on the CPU shows.",
     "**设备。** 输出留在输入所在的设备上，你新建的张量也要建在那里：`torch.arange(T, device=x.device)`、"
     "`torch.ones(T, T, dtype=torch.bool, device=x.device)`。评分时你的代码会在报告自己位于 GPU 上的输入上运行，"
     "所以留在 CPU 上的张量会被发现。"),
    ("**dtype and precision.** The output has the input's dtype unless the exercise says otherwise. float32 is the "
     "precision graded: a float64 input is graded at float32's tolerance (computing in float32 and casting back is "
     "fine), a bfloat16 input at bfloat16's; the dtypes graded are the ones the exercise's rules list.",
     "**dtype 与精度。** 除非练习另有说明，输出与输入的 dtype 相同。评分的精度是 float32：float64 输入按 float32 的容差评分"
     "（用 float32 计算再转换回来是可以的），bfloat16 输入按 bfloat16 的容差评分；评分所用的 dtype 就是练习规则中列出的那些。"),
    ("**New results, no memory of earlier calls.** Every call returns new tensors (no cache of results), an output does "
     "not share memory with an input unless the course's does (a copy is a copy), and a module called twice answers "
     "the second call as if the first had not happened, unless keeping something is its job (a cache).",
     "**新的结果，不记得之前的调用。** 每次调用返回新的张量（不缓存结果）；除非课程的实现如此，输出不与输入共享内存"
     "（复制就是复制）；模块被调用两次时，第二次的回答与第一次调用没有发生过一样，除非保存东西正是它的任务（缓存）。"),
    ("**Bad input.** Where an exercise's rules say it raises an error, it must raise that error; what they call a "
     "precondition is never graded.",
     "**错误的输入。** 练习的规则说明会抛出某个错误时，必须抛出那个错误；规则中称为前提条件的情况不会被评分。"),
    ("**Your own work.** Handing in the course's reference from `utils/` is refused (an alias, a wrapper or a subclass "
     "of it too); a library function is allowed unless the exercise's rules name it. Reusing a class of an earlier "
     "notebook is fine.",
     "**自己的工作。** 交上 `utils/` 中课程的参考实现会被拒绝（它的别名、包装或子类也一样）；库函数都可以用，"
     "除非练习的规则点名不允许。复用之前笔记本中的类是可以的。"),
    ("**A mistake costs marks once.** While an exercise is graded, the earlier exercises of its notebook that it calls "
     "are the course's versions, visible tests included, unless its rules say it calls your own.",
     "**一个错误只扣一次分。** 评某个练习时，它调用的本笔记本中较早的练习会换成课程的版本（可见测试也一样），"
     "除非它的规则说明调用的是你自己的。"),
)


def general_block() -> str:
    """Markdown of the course-wide rules, English then Chinese (notebook 00, GRADING.md)."""
    return "\n".join(["", *[f"- {en}" for en, _ in GENERAL_RULES], "", *[f"- {zh}" for _, zh in GENERAL_RULES], ""])


def drift(contracts: dict, enforced: dict) -> list[str]:
    """What the checks enforced (`enforced`: exercise -> kind -> values, as `record` logs them)
    against what the contracts declare, both ways: a rule enforced but not declared (and so not
    in the text), or declared but never enforced while the model answer was graded."""
    problems = []
    for name, c in contracts.items():
        seen = enforced.get(name, {})
        for kind, declared in (("forbids", {f.target for f in c.forbids}), ("helpers", set(c.helpers)),
                               ("raises", {r.error for r in c.raises}), ("dtypes", set(c.dtypes))):
            got = set(seen.get(kind, ()))
            for value in sorted(declared - got):
                problems.append(f"{name}: its contract declares {kind} {value!r}, but no check enforced it")
            for value in sorted(got - declared):
                if kind != "raises" or undeclared(name, kind, value):
                    problems.append(f"{name}: a check enforced {kind} {value!r}, which its contract does not declare")
    for name in sorted(set(enforced) - set(contracts)):
        problems.append(f"{name}: checks ran it, but no contract of this notebook declares it")
    return problems


def read_log(path) -> dict:
    """The records `record` appended to an AUTOGRADER_RULES_LOG file."""
    enforced: dict = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            name, kind, value = json.loads(line)
            enforced.setdefault(name, {}).setdefault(kind, set()).add(value)
    return enforced
